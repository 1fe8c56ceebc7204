"""The verifier refuses hostile or malformed probes with located messages, all of them at once."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neutrino.errors import ProbeError
from neutrino.probefile import parse_probes


def refuse(text: str) -> str:
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "p.toml")
    return str(e.value)


def kernel_probe(body: str, datamodel: str = "thread:16", position: str = "kernel") -> str:
    return f'[p]\nposition = "{position}"\ndatamodel = "{datamodel}"\nbefore = """{body}"""\n'


@pytest.mark.parametrize(
    "body, message",
    [
        ("bra $L1;", "branches are not allowed in probes"),
        ("call foo;", "calls are not allowed in probes"),
        ("ret;", "ret is not allowed in probes"),
        ("exit;", "exit is not allowed in probes"),
        ("trap;", "trap is not allowed in probes"),
        ("bar.sync 0;", "barriers and other synchronization are not allowed in probes"),
        ("membar.gl;", "barriers and other synchronization are not allowed in probes"),
        (".reg .b64 %a; ld.global.u64 %a, [%a];", "ld accesses memory: probes may only write memory through SAVE"),
        (".reg .b64 %a; st.global.u64 [%a], %a;", "st accesses memory: probes may only write memory through SAVE"),
        (".reg .b64 %a; atom.global.add.u64 %a, [%a], 1;", "atom accesses memory"),
        (".reg .b32 %a; mov.u32 %a, %r1;", "undeclared register %r1"),
        ("mov.u32 %r1, 0;", "undeclared register %r1"),
        (".reg .b32 %a; mov.u32 %tid.x, %a;", "special register %tid.x is read-only"),
        (".reg .b64 %a; mov.u64 %a, ADDR;", "helper ADDR is only available at instruction positions"),
        (".reg .b32 %a; add.u64 %a, %a, 1;", "type mismatch: %a is 32-bit but add.u64 expects a 64-bit operand"),
        (".reg .b32 %a; cvt.u32.u64 %a, %a;", "type mismatch: %a is 32-bit but cvt.u32.u64 expects a 64-bit operand"),
        (".reg .b32 %a; @%a mov.u32 %a, 1;", "guard %a is .b32, not .pred"),
        ("$L1: mov.u32 %a, 1;", "label $L1 is not allowed"),
        ("{ .reg .b32 %a; }", "nested { } scopes are not allowed"),
        (".shared .b32 x;", "directive .shared is not allowed"),
        (".reg .b32 %a; mov.u32 %a, foo;", "unknown name foo"),
        ("SAVE.u64 {%q};", "undeclared register %q"),
        ("SAVE.f32 {%smid};", "malformed SAVE"),
        ("SAVE [ m ] {%smid};", "SAVE [ m ] names no map of this file"),
        ("SAVE.u64 {%clock64, %clock64, %clock64};", "SAVE writes 24 bytes per record but the datamodel's record is 16 bytes"),
    ],
)
def test_refusals(body, message):
    report = refuse(kernel_probe(body))
    assert message in report
    assert report.startswith("p.toml:")
    assert "[probe p]" in report or "p.toml:" in report


def test_helpers_at_instruction_positions():
    assert "helper OUT is read-only" in refuse(kernel_probe("mov.u64 OUT, 1;", position="ld.global"))
    report = refuse('[p]\nposition = "ld.global"\ndatamodel = "thread:8"\nbefore = "SAVE.u64 {OUT};"\n')
    assert "OUT is only available in `after`" in report


def test_all_problems_are_reported_with_lines():
    text = '''[a]
position = "kernel"
datamodel = "thread:8"
before = """
bra $L0;
mov.u32 %r1, 1;
bar.sync 0;
"""
[b]
position = "ld.global:"
datamodel = "warp:7"
after = "ld.global.u32 %x, [%y];"
'''
    report = refuse(text)
    assert "p.toml:5:1: error: [probe a] branches are not allowed in probes" in report
    assert "p.toml:6:" in report and "undeclared register %r1" in report
    assert "p.toml:7:1: error: [probe a] barriers" in report
    assert "p.toml:10:" in report and "malformed position ''" in report
    assert "p.toml:11:" in report and "malformed datamodel 'warp:7'" not in report and "record size 7" in report
    assert "p.toml:12:" in report and "ld accesses memory" in report
    # a caret under the offending token
    lines = report.splitlines()
    i = lines.index("p.toml:6:10: error: [probe b] undeclared register %r1") if "p.toml:6:10: error: [probe b] undeclared register %r1" in lines else None
    assert any(line.strip() == "^" for line in lines)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[p]\nposition = "kernel"\ndatamodel = "grid:8"\nbefore = "SAVE.u32 {%smid};"\n', "malformed datamodel 'grid:8'"),
        ('[p]\nposition = "kernel"\ndatamodel = "thread:8:0"\nbefore = "SAVE.u32 {%smid};"\n', "cap must be a positive integer"),
        ('[p]\nposition = "kernel"\nbefore = "SAVE.u32 {%smid};"\n', "SAVE needs a datamodel"),
        ('[p]\nposition = "kernel"\n', "needs a `before` or an `after`"),
        ('[p]\nbefore = "mov.u32 %a, 1;"\n', "position is required"),
        ('[p]\nposition = "ld..global"\nbefore = ""\n', "malformed position 'ld..global'"),
        ('[p]\nposition = "kernel"\nlevel = "grid"\nbefore = ""\n', "level must be one of thread, warp, block"),
        ('[p]\nposition = "kernel"\nwhen = 1\nbefore = ""\n', "unknown key 'when'"),
        ("x = 1\n", "unknown top-level key 'x'"),
        ("[p\n", "invalid TOML"),
        ('[p]\nposition = "kernel"\nbefore = ".reg .b32 %a;"\nafter = ".reg .b64 %a;"\n', "register %a declared as .b64 here but as .b32"),
        ('[map.m]\nlevel = "warp"\nfields = ["a:f32"]\n[probe.p]\nposition = "kernel"\nbefore = ""\n', "malformed field 'a:f32'"),
        ('[map.m]\nlevel = "warp"\nfields = ["a:u32"]\n[probe.p]\nposition = "kernel"\nlevel = "thread"\nafter = "SAVE [ m ] {%smid};"\n', "map m is at level warp but the probe runs at level thread"),
        ('[map.m]\nlevel = "warp"\nfields = ["a:u32", "b:u32"]\n[probe.p]\nposition = "kernel"\nlevel = "warp"\nafter = "SAVE [ m ] {%smid};"\n', "gives 1 values but the map has 2 fields"),
    ],
)
def test_malformed_files(text, message):
    assert message in refuse(text)


def test_seed_probe_loads_verbatim():
    from neutrino.probefile import load_probes

    probes = load_probes("block_sched")
    (spec,) = probes.maps.values()
    assert (spec.level, spec.record_bytes, spec.cap) == ("warp", 16, 1)
    assert [(f.name, f.type, f.offset) for f in spec.fields] == [("lstart", "u64", 0), ("elapse", "u32", 8), ("smid", "u32", 12)]
    assert probes.analyze_hook == "block_sched_local.py"


HOSTILE = [
    "bra $L__BB0_1;", "@%p bra $L;", "call.uni foo, (%a);", "ret;", "exit;", "trap;", "brkpt;",
    "bar.sync 0;", "barrier.sync 0;", "bar.warp.sync -1;", "membar.gl;", "fence.sc.gpu;",
    "ld.global.u32 %a, [%b];", "ld.shared.u32 %a, [%b];", "st.global.u32 [%b], %a;", "st.local.u32 [%b], %a;",
    "atom.global.add.u32 %a, [%b], 1;", "red.global.add.u32 [%b], 1;", "cp.async.ca.shared.global [%a], [%b], 4;",
    "prefetch.global.L2 [%b];", "mov.u32 %r1, 0;", "add.u32 %r5, %r5, 1;", "mov.u32 %tid.x, 0;",
    "mov.u32 %a, %r1;", "tex.1d.v4.f32.s32 {%a, %a, %a, %a}, [t, {%a}];", "vote.sync.ballot.b32 %a, %p, -1;",
    "shfl.sync.bfly.b32 %a, %a, 1, 31, -1;", "nanosleep.u32 10;", "setmaxnreg.inc.sync.aligned.u32 240;",
]


@settings(max_examples=120, deadline=None)
@given(
    hostile=st.sampled_from(HOSTILE),
    prefix=st.lists(st.sampled_from(["add.u32 %a, %a, 1;", "mov.u32 %a, %smid;", "setp.eq.u32 %p, %a, 0;"]), max_size=3),
    position=st.sampled_from(["kernel", "ld.global", "st.global:bar"]),
    where=st.sampled_from(["before", "after"]),
)
def test_hostile_snippets_are_always_refused(hostile, prefix, position, where):
    body = ".reg .b32 %a; .reg .b64 %b; .reg .pred %p; " + " ".join(prefix) + " " + hostile
    text = f'[h]\nposition = "{position}"\n{where} = """{body}"""\n'
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "h.toml")
    assert "h.toml:" in str(e.value) and "[probe h]" in str(e.value)
