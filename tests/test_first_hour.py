"""What a new user meets in the first hour (issue 26, "The first hour of a new user"), through the real CLI.

Each test runs `python -m neutrino ...` in a subprocess, as a user would, and checks what it prints
and its exit status.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO_PTX = ROOT / "neutrino" / "probes" / "demo_vadd.ptx"
FAKE = ROOT / "tests" / "fakecuda"
VEC_PTX = ROOT / "tests" / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"
HAVE_PTXAS = shutil.which("ptxas") is not None


def neutrino(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 120):
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "neutrino", *args], capture_output=True, text=True,
                          cwd=cwd, env=environ, timeout=timeout)


def inline(position: str) -> str:
    return f'position = "{position}", datamodel = "sum", before = "SAVE.u64 {{BYTES}};"'


# -- 1. a mistyped position is an error; a position that matches nothing is a warning


@pytest.mark.parametrize("position, suggestion", [("ld.globl", "'ld.global'"), ("lds.global", "'ld.global'"),
                                                   ("foo", None)])
def test_mistyped_position_is_an_error_with_did_you_mean(tmp_path, position, suggestion):
    run = neutrino("instrument", str(DEMO_PTX), "-e", inline(position), "-o", str(tmp_path / "out.ptx"))
    assert run.returncode == 1, run.stderr
    assert f"position '{position}': no PTX" in run.stderr
    if suggestion:
        assert f"did you mean {suggestion}" in run.stderr
    assert not (tmp_path / "out.ptx").exists()


def test_mistyped_position_in_a_probe_file_names_file_and_line(tmp_path):
    probe = tmp_path / "p.toml"
    probe.write_text('[p]\nposition = "ld.global:st.gloabl"\ndatamodel = "sum"\nbefore = "SAVE.u64 {BYTES};"\n')
    run = neutrino("instrument", str(DEMO_PTX), "-p", str(probe))
    assert run.returncode == 1
    assert f"{probe}:2:" in run.stderr and "no PTX modifier 'gloabl'" in run.stderr
    assert "did you mean 'st.global'" in run.stderr


def test_position_matching_nothing_in_the_kernel_is_a_warning(tmp_path):
    run = neutrino("instrument", str(DEMO_PTX), "-e", inline("st.shared:atom.global"), "-o", str(tmp_path / "o.ptx"))
    assert run.returncode == 0, run.stderr
    assert ("warning: probe inline: position 'st.shared:atom.global' matched 0 instructions in kernel vadd"
            in run.stderr)
    matched = neutrino("instrument", str(DEMO_PTX), "-e", inline("ld.global"), "-o", str(tmp_path / "o.ptx"))
    assert matched.returncode == 0 and "matched 0" not in matched.stderr


def test_demo_says_when_a_position_matched_nothing(tmp_path):
    run = neutrino("demo", "-e", inline("st.shared"), "--dir", str(tmp_path / "demo"))
    assert run.returncode == 0, run.stderr
    assert "position 'st.shared' matched 0 instructions in kernel vadd" in run.stderr


@pytest.fixture(scope="module")
def fakecuda(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")],
                   check=True)
    return d


def profile(fakecuda: Path, tmp_path: Path, *args: str):
    env = {"LD_LIBRARY_PATH": str(fakecuda), "FAKECUDA_BUFPARAM": "4", "NEUTRINO_CACHE_DIR": str(tmp_path / "cache")}
    return neutrino(*args, "-o", str(tmp_path / "trace"), "--", sys.executable, str(FAKE / "app.py"), str(VEC_PTX),
                    "saxpy4", "1", cwd=tmp_path, env=env, timeout=300)


def test_a_run_whose_probe_matched_nothing_says_so(tmp_path, fakecuda):
    run = profile(fakecuda, tmp_path, "-e", inline("st.shared"))
    assert run.returncode == 0, run.stderr
    assert "1 probed launch(es)" in run.stderr
    assert ("warning: probe inline: position 'st.shared' matched 0 instructions in the 1 probed kernel(s)"
            in run.stderr)


def test_a_run_with_a_mistyped_position_refuses_to_start(tmp_path, fakecuda):
    run = profile(fakecuda, tmp_path, "-e", inline("ld.globl"))
    assert run.returncode == 1, run.stderr
    assert "did you mean 'ld.global'" in run.stderr and "app done" not in run.stdout


# -- 3. one cause, one error; a misspelled key gets a "did you mean"


def errors_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


def test_a_bad_datamodel_is_one_error(tmp_path):
    run = neutrino("instrument", str(DEMO_PTX), "-e",
                   'position = "kernel", datamodel = "wrp:8", after = "SAVE.u32 {%smid};"')
    assert run.returncode == 1
    assert len(errors_of(run.stderr)) == 1, run.stderr
    assert "malformed datamodel 'wrp:8'" in run.stderr and "add a datamodel" not in run.stderr


def test_a_misspelled_key_is_one_error_with_did_you_mean():
    run = neutrino("instrument", str(DEMO_PTX), "-e",
                   'position = "kernel", datamodell = "warp:8", after = "SAVE.u32 {%smid};"')
    assert run.returncode == 1
    assert errors_of(run.stderr) == [
        "neutrino: <-e>:1:22: error: [probe inline] unknown key 'datamodell'; did you mean 'datamodel'?"], run.stderr


def test_a_missing_datamodel_is_still_reported_once():
    run = neutrino("instrument", str(DEMO_PTX), "-e", 'position = "kernel", after = "SAVE.u32 {%smid};"')
    assert run.returncode == 1
    assert len(errors_of(run.stderr)) == 1 and "SAVE needs a datamodel" in run.stderr


def test_a_misspelled_map_key_in_a_file(tmp_path):
    probe = tmp_path / "p.toml"
    probe.write_text('[map.m]\ntype = "sum"\nfeilds = ["n:u64"]\n[probe.p]\nposition = "kernel"\n'
                     'after = "SAVE [ m ] {1};"\n')
    run = neutrino("instrument", str(DEMO_PTX), "-p", str(probe))
    assert run.returncode == 1
    assert f"{probe}:3:1: error: [map m] unknown key 'feilds' for a sum map; did you mean 'fields'?" in run.stderr


# -- 4. -e errors count columns in what the user typed


@pytest.mark.parametrize("text, token", [
    ('position = "kernel", datamodel = "warp:8", after = "SAVE.u32 {%smid, %nope};"', "%nope"),
    ('position = "ld.globl", datamodel = "sum", before = "SAVE.u64 {BYTES};"', "ld.globl"),
    ('  position = "kernel", datamodel = "wrp:8", after = "SAVE.u32 {%smid};"', "wrp:8"),
])
def test_e_columns_point_into_what_was_typed(text, token):
    run = neutrino("instrument", str(DEMO_PTX), "-e", text)
    assert run.returncode == 1
    first = errors_of(run.stderr)[0]
    column = int(first.split("<-e>:1:")[1].split(":")[0])
    assert column == text.index(token) + 1, run.stderr
    assert f"    {text}\n" in run.stderr  # the line shown is the one typed, not the rewritten `inline = {{ ... }}`
    assert "inline = {" not in run.stderr


# -- 5. a bad option value is a usage error (2); a --check that could not be made is not a pass


@pytest.mark.parametrize("option", [["--launches", "every:0"], ["--buffer-budget", "1X"], ["--trace-budget", "0"],
                                    ["--launches", "5:2"]])
def test_bad_option_values_exit_2(tmp_path, option):
    run = neutrino("-p", "block_sched", *option, "--", sys.executable, "-c", "open('ran', 'w')", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"neutrino: error: {option[0]} '{option[1]}'")
    assert not (tmp_path / "ran").exists()


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_check_that_was_skipped_is_not_a_success(tmp_path):
    old = ROOT / "tests" / "data" / "targets" / "sm10_v14_32bit.ptx"  # ptxas 13 refuses it, probed or not
    count = 'position = "ld.global", before = ".reg .b32 %n; add.u32 %n, %n, 1;"'
    run = neutrino("instrument", str(old), "-e", count, "--check", "-o", str(tmp_path / "o.ptx"))
    assert run.returncode == 1, run.stderr
    assert "error: --check: ptxas: check skipped: ptxas refuses the unprobed module as well" in run.stderr
    assert (tmp_path / "o.ptx").exists()  # written, and said to be unchecked
    unchecked = neutrino("instrument", str(old), "-e", count, "-o", str(tmp_path / "o.ptx"))
    assert unchecked.returncode == 0, unchecked.stderr
    ok = neutrino("instrument", str(DEMO_PTX), "-p", "block_sched", "--check", "-o", str(tmp_path / "v.ptx"))
    assert ok.returncode == 0 and "ptxas: ok for" in ok.stderr


# -- 6. each command's usage is its own; instrument's input is a FILE with help


@pytest.mark.parametrize("command", ["instrument", "print", "report", "export", "demo", "list", "query", "diff"])
def test_subcommand_usage_names_the_command(command):
    run = neutrino(command, "--help")
    assert run.returncode == 0
    assert run.stdout.startswith(f"usage: neutrino {command} ["), run.stdout[:200]
    assert "COMMAND ..." not in run.stdout and "program [args...]" not in run.stdout


def test_instrument_input_is_a_file_with_help():
    run = neutrino("instrument", "--help")
    assert "FILE" in run.stdout and "ptx\n" not in run.stdout
    assert "fatbin, cubin or executable" in run.stdout and "AMDGPU" in run.stdout
    missing = neutrino("instrument", "-p", "block_sched")
    assert missing.returncode == 2
    assert "the following arguments are required: FILE" in missing.stderr
    assert "usage: neutrino instrument [-h]" in missing.stderr


# -- 7. tensorop counts every tensor-core class of the semantics table: mma, wmma.mma, wgmma.mma_async

WMMA_PTX = ROOT / "tests" / "data" / "wmma" / "wmma_gemm.sm80.ptx"  # nvcc -ptx -arch=sm_80 wmma_gemm.cu


def tensor_core_instructions(path: Path) -> dict[str, int]:
    """Per entry, the original instructions whose opcode starts with mma, wmma.mma or wgmma.mma_async (by text)."""
    import re

    counts, entry = {}, None
    for line in path.read_text().splitlines():
        start = re.match(r"\.(?:visible\s+)?\.entry\s+(\w+)", line.strip())
        if start:
            entry = start.group(1)
            counts[entry] = 0
        elif entry and re.match(r"\s*(?:@!?%\w+\s+)?(?:mma|wmma\.mma|wgmma\.mma_async)\.", line):
            counts[entry] += 1
    return counts


def test_tensorop_position_is_the_semantics_tables_tensor_core_classes():
    from neutrino.isa.ptx.semantics import TABLE, TENSOR_CORE_POSITION
    from neutrino.toolbox import load_probes

    assert set(TENSOR_CORE_POSITION.split(":")) == {"mma", "wmma.mma", "wgmma.mma_async"}
    assert not TABLE[("wmma", "load")].tensor_core and not TABLE[("wgmma", "fence")].tensor_core
    for tool in ("tensorop", "tensorop_thread"):
        [counting] = [p for p in load_probes(tool).probes if not p.at_kernel]
        assert counting.position == (("#tensor_core",),), tool  # the table's class, by name


@pytest.mark.parametrize("path", [WMMA_PTX, ROOT / "tests/data/realworld/nvcc/tensor_core.sm_80.ptx",
                                  ROOT / "tests/data/corpus/triton/matmul.sm90a.ptx"], ids=lambda p: p.name)
def test_tensorop_counts_wmma_mma_and_wgmma(tmp_path, path):
    expected = tensor_core_instructions(path)
    assert sum(expected.values()) > 0
    check = ["--check"] if HAVE_PTXAS else []
    run = neutrino("instrument", str(path), "-p", "tensorop", "--info", str(tmp_path / "info.json"),
                   "-o", str(tmp_path / "out.ptx"), *check)
    assert run.returncode == 0, run.stderr
    kernels = json.loads((tmp_path / "info.json").read_text())["kernels"]
    for entry, count in expected.items():
        assert kernels[entry]["matched"] == {"count_mma": count}, entry
    assert "matched 0 instructions" not in run.stderr or 0 in expected.values()


def test_wmma_kernel_is_counted_by_tensorop_and_gmem_bytes_alike(tmp_path):
    for tool, matched in (("tensorop", 5), ("gmem_bytes", 11)):  # 5 wmma.mma; 10 wmma.load.*.global + 1 wmma.store.d
        run = neutrino("instrument", str(WMMA_PTX), "-p", tool, "--info", str(tmp_path / "i.json"), "-o", os.devnull)
        assert run.returncode == 0, run.stderr
        info = json.loads((tmp_path / "i.json").read_text())["kernels"]["wmma_gemm"]
        assert sum(info["matched"].values()) == matched, (tool, info["matched"])


# -- 8. DSL helpers: nl.clock and nl.clock(), nl.addr and nl.addr() read the same value

DSL_PROBE = '''
from neutrino import probe, Map
import neutrino.language as nl

@Map(level="thread", type="array", size=16, cap=1)
class rec:
    when: nl.u64
    where: nl.u64

@probe(pos="ld.global", level="thread", before=True)
def p():
    rec.save({clock}, {addr})
'''


def test_dsl_helpers_accept_both_forms(tmp_path):
    outputs = []
    for clock, addr in (("nl.clock()", "nl.addr"), ("nl.clock", "nl.addr()")):
        probe = tmp_path / "p.py"
        probe.write_text(DSL_PROBE.format(clock=clock, addr=addr))
        out = tmp_path / "out.ptx"
        run = neutrino("instrument", str(DEMO_PTX), "-p", str(probe), "-o", str(out))
        assert run.returncode == 0, run.stderr
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]
    assert "%clock64" in outputs[0]


@pytest.mark.parametrize("expression, message", [
    ("nl.u32", "'nl.u32' is a conversion: call it on a value, nl.u32(x)"),
    ("nl.addr(1)", "nl.addr() takes no arguments\n        rec.save(nl.clock(), nl.addr(1))\n"),
    ("nl.probe()", "'nl.probe' cannot be called here\n        rec.save(nl.clock(), nl.probe())\n"),
])
def test_dsl_helper_misuse_says_what_is_right(tmp_path, expression, message):
    probe = tmp_path / "p.py"
    probe.write_text(DSL_PROBE.format(clock="nl.clock()", addr=expression))
    run = neutrino("instrument", str(DEMO_PTX), "-p", str(probe))
    assert run.returncode == 1
    assert message in run.stderr, run.stderr
    if "takes no arguments" in message:
        assert "hint: write nl.addr() or nl.addr: both read the same value" in run.stderr
    if "cannot be called" in message:
        assert "hint: calls: nl.clock(), nl.time()" in run.stderr


# -- 9. the memory refusal says what is refused; event.log's options are an object; Trace's repr is one line


@pytest.mark.parametrize("snippet, verb", [(".reg .b64 %a; ld.global.u64 %a, [%a];", "ld reads memory"),
                                           (".reg .b64 %a; st.global.u64 [%a], %a;", "st writes memory"),
                                           (".reg .b64 %a; atom.global.add.u64 %a, [%a], 1;",
                                            "atom reads and writes memory")])
def test_memory_refusal_says_what_is_refused(snippet, verb):
    run = neutrino("instrument", str(DEMO_PTX), "-e", f'position = "kernel", before = "{snippet}"')
    assert run.returncode == 1
    assert (f"{verb}: probe code may neither read nor write memory; its results leave only through SAVE"
            in run.stderr), run.stderr
    assert "may only write memory" not in run.stderr


def test_event_log_options_is_an_object_and_trace_repr_is_short(tmp_path, fakecuda):
    run = profile(fakecuda, tmp_path, "-p", "block_sched", "--launches", "every:2")
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in (tmp_path / "trace" / "event.log").read_text().splitlines()]
    [start] = [e for e in events if e["event"] == "start"]
    assert isinstance(start["options"], dict) and start["options"]["launches"]["every"] == 2
    from neutrino.runtime.start.options import RuntimeOptions, logged_options

    old_form = json.dumps(start["options"])  # what logs before this change hold
    assert logged_options(old_form) == logged_options(start["options"]) == start["options"]
    assert RuntimeOptions.from_json(old_form) == RuntimeOptions.from_json(start["options"])
    shown = subprocess.run([sys.executable, "-c", "import sys, neutrino.trace as t; print(repr(t.load(sys.argv[1])))",
                            str(tmp_path / "trace")], capture_output=True, text=True, env={**os.environ,
                                                                                            "PYTHONPATH": str(ROOT)})
    assert shown.returncode == 0, shown.stderr
    line = shown.stdout.strip()
    assert line.startswith("<Trace ") and "1 launch(es) of 1 kernel(s)" in line and "probe block_sched" in line
    assert "\n" not in line and "SAVE" not in line and len(line) < 300


# -- 2. the README's custom pass does what it says (tests/test_readme.py checks its PTX as well)


def test_readme_custom_pass_probes_one_access_per_kernel(tmp_path):
    import re

    code = re.search(r"### A custom pass\n.*?```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    shutil.copy(VEC_PTX, tmp_path / "kernel.ptx")
    (tmp_path / "example.py").write_text(code)
    example = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert example.returncode == 0, example.stderr
    cli = neutrino("instrument", str(VEC_PTX), "-p", "gmem_bytes", "--info", str(tmp_path / "all.json"), "-o", os.devnull)
    assert cli.returncode == 0, cli.stderr
    every = json.loads((tmp_path / "all.json").read_text())["kernels"]
    shown = dict(line.split(": ", 1) for line in example.stdout.splitlines())
    for kernel, info in every.items():
        matched = info["matched"]["count_bytes"]
        assert shown[kernel] == f"{matched} global accesses matched, {info['sites'] - matched + 1} sites kept, " \
                                "maps ['gmem_bytes']"


# -- 10. the demo leaves nothing where it runs; the README is a guide, its measurements are in docs/


def test_demo_writes_outside_the_working_directory_and_says_where(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "tmp").mkdir()
    run = neutrino("demo", cwd=tmp_path / "work", env={"TMPDIR": str(tmp_path / "tmp")})
    assert run.returncode == 0, run.stderr
    assert not list((tmp_path / "work").iterdir())  # nothing in the checkout
    [out] = list((tmp_path / "tmp").iterdir())
    assert out.name.startswith("neutrino-demo-")
    assert f"files: {out}/original.ptx, {out}/probed.ptx, {out}/kernel.json" in run.stdout
    assert (out / "probed.ptx").exists() and json.loads((out / "kernel.json").read_text())["kernels"]["vadd"]
    chosen = neutrino("demo", "--dir", str(tmp_path / "mine"), cwd=tmp_path / "work")
    assert chosen.returncode == 0 and (tmp_path / "mine" / "probed.ptx").exists()


def test_readme_is_a_guide_and_its_measurements_are_in_docs():
    import re

    readme = (ROOT / "README.md").read_text()
    for section in ("## Command line", "## Probes", "## Offline commands", "## Architecture", "## Where to read more"):
        assert section in readme, section
    assert "## Performance" not in readme
    measured = [line for line in readme.splitlines() if re.search(r"\d\s*(µs|ms|ns)\b|\d\.\d+x\b", line)]
    assert len(measured) <= 3, measured  # a guide: a figure or two, not tables of them
    for doc in ("docs/overhead.md", "docs/cpu-performance.md"):
        assert doc in readme and (ROOT / doc).exists(), doc
    overhead = (ROOT / "docs" / "overhead.md").read_text()
    assert "| plain | 70.7 µs |" in overhead and "benchmarks/overhead.py" in overhead
    assert "benchmarks/engine.py" in (ROOT / "docs" / "cpu-performance.md").read_text()
    help_text = neutrino("--help").stdout  # what the README's command table promises exists
    for command in ("list", "demo", "instrument", "report", "export"):
        assert f"neutrino {command}" in readme and command in help_text
