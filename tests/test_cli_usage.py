"""The command line as users meet it, through the real entry points: the `neutrino` script and `python -m neutrino`.

Every test runs a subprocess with this checkout first on PYTHONPATH, so the
installed console script imports the code under test.
"""

from __future__ import annotations

import json
import re
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
VADD = DATA / "corpus" / "triton" / "vadd.sm90a.ptx"
SCRIPT = shutil.which("neutrino")
FORMS = ["module", pytest.param("script", marks=pytest.mark.skipif(SCRIPT is None, reason="no neutrino script"))]
INLINE = 'position = "kernel", datamodel = "warp:8", after = "SAVE.u32 {%smid, %laneid};"'


def environment(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    for key in ("NO_COLOR", "FORCE_COLOR", "NEUTRINO_OPTIONS"):
        env.pop(key, None)
    env.update(extra)
    return env


def neutrino(*args, form="module", cwd=None, stderr=subprocess.PIPE, **env) -> subprocess.CompletedProcess:
    entry = [SCRIPT] if form == "script" else [sys.executable, "-m", "neutrino"]
    return subprocess.run([*entry, *map(str, args)], stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=cwd,
                          env=environment(**env), timeout=120)


@pytest.mark.parametrize("form", FORMS)
def test_version_and_help(form):
    from neutrino import __version__

    proc = neutrino("--version", form=form)
    assert (proc.returncode, proc.stdout) == (0, f"neutrino {__version__}\n")
    proc = neutrino("--help", form=form)
    assert proc.returncode == 0
    text = proc.stdout
    assert "examples:" in text and "neutrino -p block_sched -- python train.py" in text
    assert "exit status: 0 ok; 1 bad input" in text and "2 usage error" in text
    assert text.rstrip().endswith("(FORCE_COLOR: colour even when not on a terminal).")  # the examples come last


def test_help_imports_neither_attrs_nor_numpy():
    code = "import sys; from neutrino.cli import main; main(['--help']); print(sorted({'attrs', 'numpy'} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment(), timeout=60)
    assert proc.stdout.splitlines()[-1] == "[]"


def test_list_names_every_tool_and_verbose_shows_fields():
    from neutrino.toolbox import tool_names

    proc = neutrino("list")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == tool_names()
    assert "block_sched_local" not in proc.stdout and len(lines) == 10  # 7 + lines, lines_light, lines_blocktime
    proc = neutrino("list", "-v")
    assert "map block_sched (array, warp, cap 1, 16 B): start:u64, elapsed:u32, cuid:u32" in proc.stdout
    assert "map gmem_bytes (sum): bytes:u64, active_threads:u64" in proc.stdout


def test_mistyped_command_says_did_you_mean():
    proc = neutrino("instrment", VADD, "-p", "block_sched")
    assert proc.returncode == 2
    assert proc.stderr.startswith("neutrino: error: unknown command 'instrment'; did you mean 'instrument'?")
    assert "--probe" not in proc.stderr and "required" not in proc.stderr


@pytest.mark.parametrize("option, value", [("--time-every", "-1"), ("--time-every", "x"), ("--build-threads", "-2")])
def test_out_of_range_counts_are_usage_errors(tmp_path, option, value):
    """A count below its least value: a usage error naming the option (exit 2), no traceback, nothing run."""
    proc = neutrino(option, value, "-p", "block_sched", "--", sys.executable, "-c", "open('ran', 'w')", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"argument {option}: expected an integer of at least 0, got '{value}'" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_command_after_probe_option_is_not_run_as_a_program(tmp_path):
    proc = neutrino("-p", "block_sched", "report", "trace", cwd=tmp_path)
    assert proc.returncode == 2
    assert "'report' is a neutrino command: commands come first (neutrino report trace)" in proc.stderr
    assert not (tmp_path / "trace").exists()  # nothing was run


def test_mistyped_probe_name_says_did_you_mean(tmp_path):
    for args in (["instrument", VADD, "-p", "block_shed"], ["-p", "block_shed", "--", "true"]):
        proc = neutrino(*args, cwd=tmp_path)
        assert proc.returncode == 1, args
        assert proc.stderr.startswith("neutrino: block_shed: error: no such probe file or built-in tool; "
                                      "did you mean 'block_sched'?")
        assert "Traceback" not in proc.stderr


def test_inline_probe_for_instrument(tmp_path):
    proc = neutrino("instrument", VADD, "-e", INLINE, "--info", tmp_path / "info.json", "-o", tmp_path / "out.ptx")
    assert proc.returncode == 0, proc.stderr
    info = json.loads((tmp_path / "info.json").read_text())
    (m,) = info["kernels"]["vadd"]["maps"]
    assert (m["name"], [f["name"] for f in m["fields"]]) == ("inline", ["smid", "laneid"])
    proc = neutrino("instrument", VADD, "-e", 'position = "kernel", before = "frobnicate %r1;"')
    assert proc.returncode == 1 and re.match(r"neutrino: <-e>(:1:\d+)?: error: \[probe inline\]", proc.stderr)
    proc = neutrino("instrument", VADD, "-e", INLINE, "-p", "block_sched")
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


def test_k_selects_by_substring_or_exact_name(tmp_path):
    gemm = DATA / "corpus" / "nvcc" / "gemm.sm90.ptx"
    from neutrino.engine import list_entries

    entries = list_entries(gemm.read_text())
    assert len(entries) >= 2
    part = entries[0][3:-3]
    chosen = [e for e in entries if part in e]
    info = tmp_path / "info.json"
    proc = neutrino("instrument", gemm, "-p", "block_sched", "-k", part, "--info", info, "-o", tmp_path / "o.ptx")
    if len(chosen) == 1:
        assert proc.returncode == 0 and list(json.loads(info.read_text())["kernels"]) == chosen
    else:
        assert proc.returncode == 1 and f"selects {len(chosen)} entries" in proc.stderr
    from neutrino.cli import main  # the same entry point, in this process: the other forms of -k

    assert main(["instrument", str(gemm), "-p", "block_sched", "-k", f"={entries[1]}", "--info", str(info),
                 "-o", str(tmp_path / "o.ptx")]) == 0
    assert list(json.loads(info.read_text())["kernels"]) == [entries[1]]
    assert main(["instrument", str(gemm), "-p", "block_sched", "-k", f"={entries[1][:-1]}"]) == 1


def test_gcn_instrument_takes_k_and_e_as_ptx_does(tmp_path):
    """AMDGPU assembly: -k is the same matcher as for PTX (substring, =NAME, A:B), and -e is accepted."""
    from neutrino.llvm_mc import find_llvm_mc

    atomics = DATA / "gcn" / "atomics.gfx90a.s"
    info, out = tmp_path / "info.json", tmp_path / "out.s"
    check = ["--check"] if find_llvm_mc() else []
    for pattern in ("tom", "=atomics", "nope:omi"):
        proc = neutrino("instrument", atomics, "-p", "gmem_bytes", "-k", pattern, "--info", info, "-o", out, *check)
        assert proc.returncode == 0, (pattern, proc.stderr)
        assert list(json.loads(info.read_text())["kernels"]) == ["atomics"]
    for pattern in ("=tom", "nope"):
        proc = neutrino("instrument", atomics, "-p", "gmem_bytes", "-k", pattern)
        assert proc.returncode == 1 and f"-k {pattern}: no entry" in proc.stderr and "(entries: atomics)" in proc.stderr
    two = tmp_path / "two.s"  # two kernels (not a valid code object: -k refuses before instrumenting)
    two.write_text(atomics.read_text() + (DATA / "gcn" / "vadd.gfx90a.s").read_text())
    proc = neutrino("instrument", two, "-p", "gmem_bytes", "-k", "a")
    assert proc.returncode == 1 and "-k a selects 2 entries (atomics, vadd)" in proc.stderr

    # -e: the compact form (a GCN snippet's lines separated by \n: `;` starts a comment in GCN assembly)
    proc = neutrino("instrument", atomics, "-e", r'position = "kernel", datamodel = "warp:8", after = ".reg .s32 %c\nCUID %c\nSAVE.u32 {%c}"',
                    "--info", info, "-o", out, *check)
    assert proc.returncode == 0, proc.stderr
    kernel = json.loads(info.read_text())["kernels"]["atomics"]
    assert kernel["sites"] == 1 and [m["name"] for m in kernel["maps"]] == ["inline"] and "nt_map_inline" in out.read_text()
    proc = neutrino("instrument", atomics, "-e", '[p]\nposition = "global_load"\ndatamodel = "sum"\nbefore = "SAVE.u64 {BYTES}"')
    assert proc.returncode == 0 and "BYTES" not in proc.stdout, proc.stderr
    proc = neutrino("instrument", atomics, "-e", 'position = "kernel", after = "mov.u32 %r, 1;"')  # a PTX snippet
    assert proc.returncode == 1 and re.match(r"neutrino: <-e>:1:\d+: error: \[probe inline\] mov.u32 is not allowed", proc.stderr)
    proc = neutrino("instrument", atomics, "-p", "gmem_bytes", "-o", tmp_path / "no" / "out.s")
    assert proc.returncode == 1 and "-o " in proc.stderr and "cannot write" in proc.stderr and "Traceback" not in proc.stderr


def test_k_means_the_same_in_the_profiler():
    from neutrino.runtime.start.options import RuntimeOptions

    opts = RuntimeOptions(probe="p", kernels=["gemm", "=vadd"], exclude=["=gemm_tail"])
    assert opts.wants("sgemm_kernel") and opts.wants("vadd") and not opts.wants("vadd2")
    assert not opts.wants("gemm_tail") and opts.wants("gemm_tail2")


def test_exit_codes_and_error_format(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[p]\nposition = "kernel"\nbefore = "bra $L;"\n')
    for args in (["instrument", VADD, "-p", bad], ["-p", bad, "--", "true"]):
        proc = neutrino(*args, cwd=tmp_path)
        assert proc.returncode == 1, args  # bad input, whichever command
        assert proc.stderr.startswith(f"neutrino: {bad}:3:"), proc.stderr
        assert ": error: [probe p]" in proc.stderr.splitlines()[0]
    proc = neutrino("instrument", VADD, "--no-such-option", "-p", "block_sched")
    assert proc.returncode == 2 and proc.stderr.startswith("neutrino: error: unrecognized arguments")
    proc = neutrino("-p", "block_sched", "-q", "--", sys.executable, "-c", "raise SystemExit(7)", cwd=tmp_path)
    assert proc.returncode == 7 and proc.stderr == ""  # the program's own status; -q: nothing of ours
    proc = neutrino("-p", "block_sched", "-q", "--", "no-such-program-xyz", cwd=tmp_path)
    assert proc.returncode == 127 and "neutrino: error: cannot run 'no-such-program-xyz'" in proc.stderr


def test_colour_on_a_terminal_and_no_color(tmp_path):
    def stderr_on_a_terminal(**env):
        leader, follower = pty.openpty()
        try:
            neutrino("instrment", stderr=follower, **env)
            os.close(follower)
            chunks = []
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode()
        finally:
            os.close(leader)

    coloured = stderr_on_a_terminal(TERM="xterm")
    assert "neutrino: \x1b[1;31merror:\x1b[0m unknown command 'instrment'" in coloured
    plain = stderr_on_a_terminal(TERM="xterm", NO_COLOR="1")
    assert "\x1b[" not in plain and "neutrino: error: unknown command 'instrment'" in plain
    assert "\x1b[" not in neutrino("instrment").stderr  # not a terminal
    from neutrino.console import format_message

    located = format_message("k.toml:3:7: error: [probe p] bad\n    x\n      ^\n    hint: h", colour=True)
    assert located.splitlines()[0] == "neutrino: \x1b[1mk.toml:3:7:\x1b[0m \x1b[1;31merror:\x1b[0m [probe p] bad"


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "event.log").read_text().splitlines()]


@pytest.mark.parametrize("form", FORMS)
def test_run_without_cuda_leaves_a_trace_and_says_so(tmp_path, form):
    proc = neutrino("-p", "block_sched", "--", sys.executable, "-c", "print('ran')", form=form, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    (run_dir,) = (tmp_path / "trace").iterdir()
    assert proc.stderr == (f"neutrino: no kernel seen: no process of the program loaded a CUDA module (no GPU or CUDA "
                           f"driver, or the program made no CUDA call); trace in {run_dir}\n")
    start, end = events(run_dir)
    assert start["event"] == "start" and start["argv"][1:] == ["-c", "print('ran')"]
    assert end["event"] == "exit" and end["launches"] == 0 and end["exit_status"] == 0


def test_output_names_the_trace_directory(tmp_path):
    out = tmp_path / "my.trace"
    for status in (0, 3):  # a second run replaces the first trace
        proc = neutrino("-o", out, "-e", INLINE, "--", sys.executable, "-c", f"raise SystemExit({status})", cwd=tmp_path)
        assert proc.returncode == status
        assert proc.stderr.rstrip().endswith(f"trace in {out}")
        assert [e["event"] for e in events(out)] == ["start", "exit"] and events(out)[1]["exit_status"] == status
    assert not (tmp_path / "trace").exists()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    proc = neutrino("-o", tmp_path / "notes", "-p", "block_sched", "--", "true")
    assert proc.returncode == 1 and "not a neutrino trace" in proc.stderr
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_report_formats_for_scripts(tmp_path):
    from test_analysis_trace import BLOCK_SCHED, WARPS, section, write_trace

    run = write_trace(tmp_path, [{"kernel": "vadd", "grid": (4, 1, 1), "block": (64, 1, 1), "duration_ns": 160.0,
                                  "sections": [section("block_sched", "warp", BLOCK_SCHED, 16, [[w] for w in WARPS])]}])
    proc = neutrino("report", run, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    (row,) = report["kernels"]
    assert (row["kernel"], row["launches"], row["records"], row["time_us"]) == ("vadd", 1, 8, 0.16)
    assert row["block_sched.blocks"] == 4 and row["block_sched.sms"] >= 1  # numbers, not display strings
    assert isinstance(row["block_sched.busy_imbalance"], float) and row["block_sched.span_unit"]
    proc = neutrino("report", run, "--format", "csv")
    header, line = proc.stdout.splitlines()
    assert header.startswith("kernel,launches,maps,records,dropped,time_us,block_sched.blocks")
    assert line.startswith("vadd,1,block_sched,8,0,0.16,4")
    assert not (run / "report").exists()  # no plots for scripts


def output_of_two_processes(out: Path, first_wrote_out: bool = True) -> Path:
    """An `-o OUT` trace of a program whose two processes were profiled (spec/trace-format.md): the
    first wrote OUT itself (or, when it loaded no CUDA module, only claimed it), the second
    OUT/<time>_<pid>; they ran different kernels."""
    from test_analysis_trace import BLOCK_SCHED, GMEM_BYTES, WARPS, section, write_trace

    def run(root: Path, kernel: str, pid: int, launches: int) -> Path:
        sections = [section("block_sched", "warp", BLOCK_SCHED, 16, [[w] for w in WARPS]),
                    section("gmem_bytes", "thread", GMEM_BYTES, 8, [[(12,)]] * 256)]
        path = write_trace(root, [{"kernel": kernel, "grid": (4, 1, 1), "block": (64, 1, 1), "duration_ns": 100.0 * pid,
                                   "sections": sections}] * launches)
        log = path / "event.log"
        log.write_text(log.read_text().replace('"pid": 1}', f'"pid": {pid}}}', 1))
        return path

    out.mkdir()
    (out / ".owner").touch()
    if first_wrote_out:
        for item in run(out.parent / f"{out.name}.first", "first_kernel", 4242, 2).iterdir():
            item.rename(out / item.name)
    run(out.parent / f"{out.name}.second", "second_kernel", 4243, 3).rename(out / "20260101-000001_4243")
    return out


def test_report_and_export_cover_every_process_of_an_output_directory(tmp_path):
    out = output_of_two_processes(tmp_path / "app.trace")
    proc = neutrino("report", out, "--out", tmp_path / "plots")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"trace {out}: 2 processes")
    assert "== process 0 (pid 4242)" in proc.stdout and "== process 1 (pid 4243)" in proc.stdout
    combined = proc.stdout.split("== all processes", 1)[1].splitlines()
    assert combined[1].split() == ["kernel", "launches", "process", "0", "(us)", "process", "1", "(us)", "max/min"]
    assert [line.split()[:4] for line in combined[3:5]] == [["first_kernel", "2", "848.4", "-"],
                                                            ["second_kernel", "3", "-", "1272.9"]]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["process0", "process1"]

    proc = neutrino("report", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["launches"] == 5
    assert [(row["process"], row["kernel"], row["launches"]) for row in doc["kernels"]] == [
        (0, "first_kernel", 2), (1, "second_kernel", 3)]
    proc = neutrino("report", out, "--format", "csv")
    assert proc.stdout.startswith("process,kernel,launches,") and len(proc.stdout.splitlines()) == 3

    proc = neutrino("export", out, "--perfetto", tmp_path / "app.json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "app.json").read_text())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == {1: "process 0 (pid 4242)", 2: "process 1 (pid 4243)"}
    assert doc["otherData"]["processes"] == [0, 1]
    launches = [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == "launch"]
    assert sorted((e["pid"], e["name"]) for e in launches) == [(1, "first_kernel")] * 2 + [(2, "second_kernel")] * 3


def test_output_directory_whose_first_process_wrote_nothing(tmp_path):
    """The first process claimed OUT and loaded no CUDA module; two children wrote OUT/<time>_<pid>."""
    import neutrino.trace as nt

    out = output_of_two_processes(tmp_path / "app.trace", first_wrote_out=False)
    (out / "20260101-000001_4243").rename(out / "20260101-000002_99")
    output_of_two_processes(tmp_path / "other.trace")
    (tmp_path / "other.trace" / "20260101-000001_4243").rename(out / "20260101-000002_100")
    proc = neutrino("report", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert [row["process"] for row in json.loads(proc.stdout)["kernels"]] == [0, 1]  # pid 99 started before 100
    assert [len(t.launches) for _, t in nt.load_job(out)] == [3, 3]
    with pytest.raises(nt.TraceError, match="the trace of 2 processes of one program"):
        nt.load(out)
    plain = tmp_path / "trace"  # a trace directory of two separate runs is no program's: name one
    output_of_two_processes(tmp_path / "x.trace", first_wrote_out=False).rename(plain)
    (plain / ".owner").unlink()
    (plain / "20260101-000001_4243").rename(plain / "20260101-000001_7")
    output_of_two_processes(tmp_path / "y.trace", first_wrote_out=False)
    (tmp_path / "y.trace" / "20260101-000001_4243").rename(plain / "20260101-000001_8")
    proc = neutrino("report", plain)
    assert proc.returncode == 1 and "holds 2 runs" in proc.stderr


def test_demo_is_short_and_says_where_the_files_are(tmp_path):
    proc = neutrino("demo", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert len(proc.stdout.splitlines()) <= 6
    out = Path(proc.stdout.split("files: ")[1].split(",")[0]).parent  # a temporary directory, not the cwd
    assert f"files: {out}/original.ptx, {out}/probed.ptx, {out}/kernel.json" in proc.stdout
    assert (out / "probed.ptx").read_text().count(".entry") == 1 and not list(tmp_path.iterdir())


def test_every_tool_gives_numbers_to_scripts():
    """report --format csv|json takes each tool's kernel_numbers (quantities, not display strings)."""
    from neutrino.analysis import analyses

    assert analyses() and all(callable(getattr(tool, "kernel_numbers", None)) for tool in analyses())
