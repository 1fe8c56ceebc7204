"""Bad input, second part (issue 11): wrong TOML types, depth and size limits, linear growth, and one
regression test per class of bug tests/test_fuzz.py found. Times are measured in
benchmarks/hardening_scaling.py; here growth is checked by counting steps (calls),
which does not depend on the machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import neutrino.trace as nt
from neutrino.cli import main
from neutrino.engine import instrument
from neutrino.errors import NeutrinoError, ProbeError
from neutrino.language import compile_source
from neutrino.language.errors import DslError
from neutrino.probefile import FieldNames, parse_probes
from neutrino.toolbox import load_probes

DATA = Path(__file__).parent / "data"
VEC = DATA / "corpus" / "nvcc" / "vec.sm90.ptx"
SNIPPET = '".reg .u32 %r; mov.u32 %r, 1;"'


def refusal(text: str) -> str:
    with pytest.raises(ProbeError) as info:
        parse_probes(text, "p.toml")
    return str(info.value)


# ---------------------------------------------------------------- TOML values of the wrong type


@pytest.mark.parametrize("text,where,message", [
    (f'[probe.p]\nposition = "kernel"\nafter = true\n', "p.toml:3:1:", "[probe p] after must be a string of PTX"),
    (f'[probe.p]\nposition = "kernel"\nbefore = 12\n', "p.toml:3:1:", "[probe p] before must be a string of PTX"),
    (f'[probe.p]\nposition = "kernel"\n[probe.p.after]\nx = 1\n', "p.toml:3:1:", "[probe p] after must be a string of PTX"),
    (f'[probe.p]\nposition = ["kernel"]\nafter = {SNIPPET}\n', "p.toml:2:1:", "[probe p] position is required"),
    (f'[probe.p]\nposition = 1979-05-27\nafter = {SNIPPET}\n', "p.toml:2:1:", "[probe p] position is required"),
    (f'[probe.p]\nposition = "kernel"\nlevel = ["warp"]\nafter = {SNIPPET}\n', "p.toml:3:1:", "[probe p] level must be one of"),
    (f'[probe.p]\nposition = "kernel"\nlevel = {{a = 1}}\nafter = {SNIPPET}\n', "p.toml:3:1:", "[probe p] level must be one of"),
    (f'[probe]\np = "kernel"\n', "p.toml:2:1:", "[probe p] a probe must be a table"),
    (f'[probe]\np = [1, 2]\n', "p.toml:2:1:", "[probe p] a probe must be a table"),
    (f'[map.m]\ntype = ["sum"]\n[probe.p]\nposition = "kernel"\nafter = {SNIPPET}\n', "p.toml:2:1:", "[map m] type must be one of"),
    (f'[map.m]\nlevel = "warp"\ncap = [1]\nfields = ["a:u32"]\n[probe.p]\nposition = "kernel"\nafter = {SNIPPET}\n',
     "p.toml:3:1:", "[map m] cap must be a positive integer"),
    (f'[map.m]\nlevel = "warp"\nfields = {{a = "u32"}}\n[probe.p]\nposition = "kernel"\nafter = {SNIPPET}\n',
     "p.toml:3:1:", "[map m] fields must be a non-empty array"),
    (f'[map.m]\nlevel = "warp"\nfields = [["a:u32"]]\n[probe.p]\nposition = "kernel"\nafter = {SNIPPET}\n',
     "p.toml:3:1:", "[map m] malformed field"),
    (f'[map]\nm = 3\n[probe.p]\nposition = "kernel"\nafter = {SNIPPET}\n', "p.toml:2:1:", "map m must be a table"),
    (f'[[map.m]]\nlevel = "warp"\n[probe.p]\nposition = "kernel"\nafter = {SNIPPET}\n', "p.toml:1:1:", "map m must be a table"),
    (f'analyze_hook = 1\n[p]\nposition = "kernel"\nafter = {SNIPPET}\n', "p.toml:1:1:", "analyze_hook must be a string"),
    (f'[p]\nposition = "kernel"\ndatamodel = ["warp:8"]\nafter = {SNIPPET}\n', "p.toml:3:1:", "[probe p] malformed datamodel"),
    (f'[p]\nposition = "kernel"\nafter = {SNIPPET}\n[p]\nlevel = "warp"\n', "p.toml:4:", "invalid TOML: table [p] appears twice"),
])
def test_toml_values_of_the_wrong_type_are_located(text, where, message):
    rendered = refusal(text)
    assert rendered.startswith(where) and message in rendered, rendered


def test_wrong_types_through_the_cli(tmp_path, capsys):
    probe = tmp_path / "p.toml"
    probe.write_text('[probe.p]\nposition = "kernel"\nafter = true\n')
    assert main(["instrument", str(VEC), "-p", str(probe)]) == 1
    err = capsys.readouterr().err
    assert f"{probe}:3:1: error: [probe p] after must be a string of PTX" in err and "Traceback" not in err


def test_a_register_of_an_unknown_type_is_refused_once(tmp_path):
    """Fuzz regression: the verifier typed the uses of a register whose declared type it had refused (KeyError)."""
    rendered = refusal('[p]\nposition = "kernel"\ndatamodel = "warp:8"\n'
                       'after = ".reg .bogus64 %a; .reg .u64 %b; mov.u64 %a, 1; add.u64 %b, %a, %a; SAVE.u64 {%a};"\n')
    assert "register type .bogus64 is not allowed" in rendered and rendered.count("error:") == 1


# ---------------------------------------------------------------- depth


DSL = "from neutrino import probe\nimport neutrino.language as nl\n\n@probe(pos='kernel', level='thread')\ndef p():\n"


@pytest.mark.parametrize("expression", ["-" * 20000 + "nl.clock()", "not " * 20000 + "1", "~" * 3000 + "nl.clock()",
                                        "nl.clock() + " * 3000 + "1", "1 if 1 else " * 5000 + "1", "2 ** " * 8000 + "2"],
                         ids=["minus", "not", "invert", "plus", "ifexp", "power"])
def test_a_dsl_expression_nested_too_deeply_is_located(expression):
    with pytest.raises(DslError) as info:
        compile_source(DSL + "    x = " + expression + "\n", "deep.py")
    first = str(info.value).splitlines()[0]
    assert first.startswith("deep.py:6") and "expression nested too deeply (more than 100 levels)" in first
    assert "internal compiler error" not in str(info.value)


def test_a_dsl_expression_under_the_limit_compiles():
    toml = compile_source(DSL + "    x = " + "-" * 60 + "nl.clock()\n", "ok.py")
    assert "neg" in toml or "sub" in toml or "not" in toml


def test_a_deep_dsl_expression_through_the_cli(tmp_path, capsys):
    probe = tmp_path / "deep.py"
    probe.write_text(DSL + "    x = " + "-" * 20000 + "nl.clock()\n")
    assert main(["instrument", str(VEC), "-p", str(probe)]) == 1
    err = capsys.readouterr().err
    assert f"{probe}:6" in err and "nested too deeply" in err and "internal compiler error" not in err


# ---------------------------------------------------------------- size: refused with a located message


def test_a_long_line_without_its_semicolon_is_located(tmp_path, capsys):
    """16,000 `+1` terms on a truncated line: the body scan retried at every position (17 s); now one pass."""
    ptx = VEC.read_text()
    path = tmp_path / "long.ptx"
    path.write_text(ptx.replace("ret;", "add.u32 %r1, 1" + "+1" * 16000))
    line = ptx[: ptx.index("ret;")].count("\n") + 1
    assert main(["instrument", str(path), "-p", "block_sched"]) == 1
    err = capsys.readouterr().err
    assert f"long.ptx:{line}:2: error: instruction is missing its ';'" in err


def test_a_save_of_3000_values_is_refused_by_the_record_size():
    rendered = refusal('[p]\nposition = "kernel"\ndatamodel = "warp:256"\nafter = ".reg .u64 %r; SAVE.u64 {'
                       + ", ".join(["%r"] * 3000) + '};"\n')
    assert "p.toml:3:1: error: [probe p] SAVE writes 24000 bytes per record but the datamodel's record is 256 bytes" in rendered


def test_field_names_are_unique_and_stable():
    names = FieldNames()
    assert [names.claim(b) for b in ("r", "r", "r1", "r", "r1", "smid")] == ["r", "r1", "r11", "r2", "r12", "smid"]


# ---------------------------------------------------------------- linear growth, by counting steps


def steps(function, *args) -> int:
    """Python and C function calls made by `function(*args)`: a machine-independent measure of work."""
    count = 0

    def tick(frame, event, arg):
        nonlocal count
        count += 1

    sys.setprofile(tick)
    try:
        function(*args)
    except NeutrinoError:
        pass
    finally:
        sys.setprofile(None)
    return count


def grows_linearly(make, n: int = 100, factor: int = 8) -> tuple[int, int]:
    """Steps for input sizes n and factor·n: linear work grows by about `factor`, quadratic by factor²."""
    steps(make, n), steps(make, factor * n)  # warm caches (regex compilation, imports, lru caches)
    small, large = steps(make, n), steps(make, factor * n)
    assert large <= 1.25 * factor * small, f"{small} steps for n={n}, {large} for n={factor * n}"
    return small, large


@pytest.mark.parametrize("header", ["p", "probe.p"])
def test_probe_tables_grow_linearly(header):
    grows_linearly(lambda n: parse_probes("".join(f'[{header}{i}]\nposition = "kernel"\nafter = {SNIPPET}\n' for i in range(n))), n=25)


def test_save_operands_grow_linearly():
    grows_linearly(lambda n: parse_probes('[p]\nposition = "kernel"\ndatamodel = "warp:256"\nafter = ".reg .u64 %r; SAVE.u64 {'
                                          + ", ".join(["%r"] * n) + '};"\n'))


def test_dsl_save_arguments_grow_linearly():
    head = DSL.replace("level='thread')", "level='thread', size=8)") + "    x = nl.clock()\n    nl.save("
    grows_linearly(lambda n: compile_source(head + "(" + ", ".join(["x"] * n) + "))\n", "p.py"), n=100)


def test_map_fields_grow_linearly():
    grows_linearly(lambda n: parse_probes('[map.m]\nlevel = "warp"\nfields = [' + ", ".join(f'"f{i}:u32"' for i in range(n))
                                          + ']\n[probe.p]\nposition = "kernel"\nlevel = "warp"\nafter = "SAVE [ m ] {%smid};"\n'))


def test_kernel_registers_named_like_ours_grow_linearly():
    """The probe register prefix (%nt_, %nt1_, …) is chosen in one pass over the kernel's names."""
    ptx = VEC.read_text()

    def make(n):
        regs = "".join(f"\t.reg .b32 %nt{i or ''}_x;\n" for i in range(n))
        instrument(ptx.replace("ret;", regs + "\tret;"), load_probes("block_sched"))

    grows_linearly(make, n=50)


# ---------------------------------------------------------------- fuzz regressions: traces


def _run(tmp_path, events):
    run = tmp_path / "run"
    (run / "result").mkdir(parents=True)
    buf = np.zeros(nt.buffer_bytes(2, 1, 8), np.uint8)
    nt.write_result(run / "result" / "0.bin", grid=(2, 1, 1), block=(32, 1, 1), shared_bytes=0,
                    maps=[nt.MapSection("m", "block", 8, 1, 2, [("v", "u64", 0)], buf.tobytes())])
    good = {"event": "launch", "index": 0, "kernel": "k", "grid": [2, 1, 1], "block": [32, 1, 1], "result": "result/0.bin"}
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in [good, *events]))
    return run


@pytest.mark.parametrize("event,reason", [
    ({"event": "launch", "kernel": "k", "result": "result/0.bin"}, "no 'index'"),
    ({"event": "launch", "index": float("inf"), "kernel": "k", "result": "result/0.bin"}, "infinity"),
    ({"event": "launch", "index": 1, "result": "result" + "/x" * 3000}, "File name too long"),
])
def test_launch_events_that_cannot_be_used_are_skipped_and_named(tmp_path, event, reason):
    trace = nt.load(_run(tmp_path, [event]))
    assert [launch.index for launch in trace.launches] == [0]
    assert len(trace.problems) == 1 and "event.log: launch event" in trace.problems[0] and reason in trace.problems[0]


def test_report_survives_unusable_launch_events(tmp_path, capsys):
    run = _run(tmp_path, [{"event": "launch", "kernel": "k", "result": "result/0.bin"}])
    assert main(["report", str(run), "--out", str(tmp_path / "plots")]) == 0
    assert "skipped" in capsys.readouterr().err


def test_small_sections_are_read_and_large_ones_mapped(tmp_path, monkeypatch):
    """Result sections are read (a memmap per small section made thousands of launches slow) unless large."""
    run = _run(tmp_path, [])
    (launch,) = nt.load(run).launches
    assert not isinstance(launch.maps["m"].records, np.memmap)
    monkeypatch.setattr(nt, "SMALL_SECTION", 0)
    (launch,) = nt.load(run).launches
    assert isinstance(launch.maps["m"].records, np.memmap)
    assert launch.maps["m"].valid().size == 0


# ---------------------------------------------------------------- fuzz regressions: targets


def test_warp_reductions_raise_the_version_of_an_old_module():
    """Fuzz regression: a sum map's warp reduction (activemask, shfl.sync) left `.version 5.0`, which ptxas refuses."""
    from neutrino.isa.ptx import parse_module

    src = (DATA / "targets" / "sm52_v50.ptx").read_text()
    for probe in ("gmem_bytes", str(DATA / "probes" / "agg_explicit.toml")):
        out = instrument(src, load_probes(probe))
        assert parse_module(out.ptx).version == "6.2", probe
        from helpers import HAVE_PTXAS, ptxas
        if HAVE_PTXAS:
            ptxas(out.ptx, "sm_75")


def test_warp_reductions_are_left_out_on_a_target_without_them():
    """Issue 30 §3: an sm_20 module is no longer refused; its sum map adds lane by lane, as before warp reductions."""
    from neutrino.isa.ptx import parse_module

    out = instrument((DATA / "targets" / "sm20_v30.ptx").read_text(), load_probes("gmem_bytes")).ptx
    assert parse_module(out).target == "sm_20" and "activemask" not in out


# ---------------------------------------------------------------- operand counts


@pytest.mark.parametrize("snippet,message", [
    ("mov.u32 %r;", "mov.u32 takes 2 operands, not 1"),
    ("add.u32 %r, %r, 1, 2;", "add.u32 takes 3 operands, not 4"),
    ("selp.u32 %r, 1;", "selp.u32 takes 4 operands, not 2"),
    ("setp.eq.u32 %p;", "setp.eq.u32 takes 3 operands, not 1"),
    ("SAVE.u32;", "malformed SAVE"),
    ("SAVE [ ] {%r};", "malformed SAVE"),
])
def test_snippet_instructions_with_too_few_or_too_many_operands_are_located(snippet, message):
    rendered = refusal('[p]\nposition = "ld"\ndatamodel = "warp:8"\n'
                       f'after = ".reg .u32 %r; .reg .pred %p; mov.u32 %r, IN1; {snippet}"\n')
    assert rendered.startswith("p.toml:4:") and message in rendered


MALFORMED_KERNEL = ["ld.global.f32 %f1;", "ld.global.f32;", "st.global.f32 [%rd1];", "st.global.f32;", "atom.global.add.u32 %r1;",
                    "atom.global.add.u32;", "red.global.add.u32;", "ld.global.f32 %f1, [%rd1], 3;", "ld.global.v2.f32 {%f1}, [%rd1];",
                    "cp.async.ca.shared.global [%r1];", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 %f1;"]


@pytest.mark.parametrize("probe", ["gmem_bytes", "dmat", "tensorop", str(DATA / "probes" / "mem_trace.toml"),
                                   str(DATA / "probes" / "in_operands.toml"), str(DATA / "probes" / "out_value.toml")])
def test_kernel_instructions_with_too_few_or_too_many_operands(probe):
    """Malformed kernel instructions at probed positions: instrumented around, or refused with our error; never IndexError."""
    probes = load_probes(probe)
    for insn in MALFORMED_KERNEL:
        try:
            instrument(VEC.read_text().replace("ret;", insn + "\n\tret;", 1), probes)
        except NeutrinoError:
            pass


@pytest.mark.parametrize("content,message", [
    (b"", "empty image"),
    (bytes(range(200, 256)) * 4, "unrecognised image"),
    (b"\x7fELF", "malformed host ELF"),
])
def test_unreadable_images_name_their_file(tmp_path, capsys, content, message):
    path = tmp_path / "kernel.bin"
    path.write_bytes(content)
    assert main(["instrument", str(path), "-p", "block_sched"]) == 1
    err = capsys.readouterr().err
    assert f"neutrino: {path}: error: " in err and message in err


def test_nested_braces_in_a_snippet_are_located():
    """Fuzz regression: the nesting limits held in kernels but not in probe snippets (RecursionError)."""
    rendered = refusal('[p]\nposition = "kernel"\nafter = """.reg .u32 %r;\nmov.u32 %r, 1;' + "{" * 3000 + '"""\n')
    assert rendered.startswith("p.toml:4:") and "error: [probe p] braces nested more than 256 deep" in rendered


def test_a_field_without_a_name_is_refused(tmp_path):
    """Fuzz regression: a zeroed field name reached numpy ("no field of name")."""
    run = _run(tmp_path, [])
    raw = bytearray((run / "result" / "0.bin").read_bytes())
    first_field = nt.FILE_HEADER.itemsize + nt.MAP_HEADER.itemsize
    raw[first_field:first_field + 32] = bytes(32)
    (run / "result" / "0.bin").write_bytes(bytes(raw))
    (launch,) = nt.load(run).launches
    with pytest.raises(nt.TraceError, match="field 0 has no name"):
        launch.maps


def test_a_field_outside_the_record_of_a_sum_map_is_refused(tmp_path):
    """Fuzz regression (a campaign with random seeds): a sum map's field offset past its record
    reached numpy ("dtype descriptor requires 10512 bytes"); only array maps were checked."""
    run = _run(tmp_path, [])
    size = nt.section_bytes("sum", nt.STRIPES, 1, 16)
    sums = nt.MapSection("counters", "thread", 16, 1, nt.STRIPES, [("a", "u64", 0), ("b", "u64", 8)],
                         bytes(size), type="sum")
    path = run / "result" / "0.bin"
    nt.write_result(path, grid=(2, 1, 1), block=(32, 1, 1), shared_bytes=0, maps=[sums])
    raw = bytearray(path.read_bytes())
    second = nt.FILE_HEADER.itemsize + nt.MAP_HEADER.itemsize + nt.FIELD_DESC.itemsize  # field b
    raw[second + 36:second + 40] = np.uint32(10504).tobytes()  # its offset
    path.write_bytes(bytes(raw))
    (launch,) = nt.load(run).launches
    with pytest.raises(nt.TraceError, match="map counters: field b lies outside its 16-byte record"):
        launch.maps
    assert main(["report", str(run)]) == 1


def test_the_cap_a_sum_map_header_claims_is_not_used(tmp_path):
    """Fuzz regression (a hang in a campaign with random seeds): a sum map's header saying cap 2^31
    made MapData.valid() build a 2^31-element mask (seconds, gigabytes) and then fail in numpy. Its
    rows are added up into one record: cap 1 whatever the header says."""
    run = _run(tmp_path, [])
    sums = nt.MapSection("counters", "thread", 8, 1, nt.STRIPES, [("a", "u64", 0)],
                         np.ones(nt.section_bytes("sum", nt.STRIPES, 1, 8) // 8, "<u8").tobytes(), type="sum")
    path = run / "result" / "0.bin"
    nt.write_result(path, grid=(2, 1, 1), block=(32, 1, 1), shared_bytes=0, maps=[sums])
    raw = bytearray(path.read_bytes())
    at = nt.FILE_HEADER.itemsize + nt.MAP_HEADER.fields["cap"][1]
    raw[at:at + 4] = np.uint32(2**31).tobytes()
    path.write_bytes(bytes(raw))
    (launch,) = nt.load(run).launches
    data = launch.maps["counters"]
    assert data.cap == 1 and data.valid()["a"].tolist() == [nt.STRIPES] and data.totals() == {"a": nt.STRIPES}


def refusal_error(text: str) -> ProbeError:
    with pytest.raises(ProbeError) as info:
        parse_probes(text, "p.toml")
    return info.value


def test_thousands_of_errors_on_one_long_line_render_in_bounded_size():
    """Fuzz regression (a hang in a campaign with random seeds): `SAVE.u32 the;the;…` 18,000 times
    in one 72 KB snippet line gave 18,000 diagnostics, each showing the whole line: 1.3 GB of
    message and 10 s. An error now shows 20 diagnostics and counts the rest; a line is shown
    around its column."""
    from neutrino.errors import SHOWN_DIAGNOSTICS

    for n in (2_000, 20_000):
        text = f'[p]\nposition = "kernel"\ndatamodel = "warp:8"\nbefore = "SAVE.u32 {"the;" * n}"\n'
        error = refusal_error(text)
        assert len(error.diagnostics) >= n  # every problem is still found (the verifier is linear)
        message = str(error)
        assert message.count("p.toml:4:") == SHOWN_DIAGNOSTICS and len(message) < 10_000
        assert message.endswith(f"... and {len(error.diagnostics) - SHOWN_DIAGNOSTICS} more error(s) not shown "
                                f"(the first {SHOWN_DIAGNOSTICS} are)")


@pytest.mark.parametrize("column", [1, 5, 500, 9_990, 10_000])
def test_a_long_line_is_shown_around_the_caret(column):
    from neutrino.errors import Diagnostic, Location

    text = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    _, shown, caret = Diagnostic(Location("f", 1, column, text), "bad").render().split("\n")
    assert len(shown) < 200 and shown[len(caret) - 1] == text[column - 1]  # the caret under the same character


def test_toml_nested_too_deeply_is_located():
    """Fuzz regression: tomllib recursed on 3,000 nested arrays (RecursionError, the CLI's catch-all)."""
    rendered = refusal('[p]\nposition = "kernel"\nbefore = ' + "[" * 3000 + "]" * 3000 + "\n")
    assert rendered.startswith("p.toml:3: error: invalid TOML: arrays or inline tables nested too deeply")


def test_long_blank_run_inside_operands_is_refused_without_a_hang():
    """A fuzz find: `cvta.to.global.u64 %rd3, %r` + a long run of blanks and newlines + more text made the
    instruction regex retry the tail at every character (quadratic: 26 s for 67k characters). Refused,
    located, with the operand shortened in the message; the alarm turns a relapse into a failure."""
    import signal

    from neutrino.errors import NeutrinoError
    from neutrino.isa.ptx import parse_module

    blank = " \n" * 100_000
    text = (".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
            ".reg .b64 %rd<4>;\n.reg .b32 %r<2>;\n"
            f"\tcvta.to.global.u64 %rd3, %r{blank}\tmul.wide.s32 %rd2, %r1, 4;\n\tret;\n}}\n")

    def hang(*_):
        raise TimeoutError("parsing a long blank run took over 20 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(20)
    try:
        with pytest.raises(NeutrinoError) as err:
            parse_module(text, "blank.ptx")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    message = str(err.value)
    assert "blank.ptx:" in message and "cannot parse operand" in message and len(message) < 1000


def test_probe_file_over_one_mebibyte_is_refused_before_reading(tmp_path):
    from neutrino.errors import ProbeError
    from neutrino.probefile import MAX_PROBE_FILE_BYTES
    from neutrino.toolbox import load_probes

    path = tmp_path / "huge.toml"
    path.write_text("# padding\n" * (MAX_PROBE_FILE_BYTES // 10 + 1))
    with pytest.raises(ProbeError, match=r"huge.toml: error: probe file of [\d,]+ characters: the limit is 1,048,576"):
        load_probes(str(path))
