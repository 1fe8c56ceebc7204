"""The verifier refuses hostile or malformed probes with located messages, all of them at once;
what it admits assembles (property tests against ptxas over the instruction-format table)."""

import os

import pytest
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st

from helpers import DATA, HAVE_PTXAS, ptxas
from neutrino.engine import instrument
from neutrino.errors import ProbeError
from neutrino.isa.ptx import formats, ir
from neutrino.passes.verify import HELPER_WIDEST as HELPER_TYPES
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
        (".reg .b64 %a; ld.global.u64 %a, [%a];", "ld reads memory: probe code may neither read nor write memory; its results leave only through SAVE"),
        (".reg .b64 %a; st.global.u64 [%a], %a;", "st writes memory: probe code may neither read nor write memory; its results leave only through SAVE"),
        (".reg .b64 %a; atom.global.add.u64 %a, [%a], 1;", "atom reads and writes memory"),
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
    assert "p.toml:12:" in report and "ld reads memory" in report
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


def test_builtin_block_sched_has_the_fields_of_spec_tools():
    from neutrino.toolbox import load_probes

    probes = load_probes("block_sched")
    (spec,) = probes.maps.values()
    assert (spec.level, spec.record_bytes, spec.cap) == ("warp", 16, 1)
    assert [(f.name, f.type, f.offset) for f in spec.fields] == [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)]
    assert probes.analyze_hook == "exit_hook.py"  # beside the probe, in the tool's folder


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


# ---------------------------------------------------------------- the instruction-format table against ptxas
#
# Every snippet the verifier accepts, instrumented into a corpus kernel, assembles. Snippets are drawn
# over the format table (neutrino/isa/ptx/formats.py): well-formed ones, which the verifier must accept,
# and mutated ones (a wrong type, a missing modifier, an operand too many, a constant out of range, a
# register of the wrong type...), which it may refuse but must never admit unless ptxas agrees.
# NEUTRINO_HYPOTHESIS=long runs many more examples.

LONG = os.environ.get("NEUTRINO_HYPOTHESIS") == "long"
KERNEL = (DATA / "corpus" / "nvcc" / "histogram.sm80.ptx").read_text()
OPERAND_TYPES = (DATA / "verifier" / "operand_types.ptx").read_text()
# One probe register of every type a snippet may declare.
REGISTERS = {
    "pred": "%p", "b16": "%h", "u16": "%uh", "s16": "%sh", "b32": "%b", "u32": "%u", "s32": "%s", "f32": "%f",
    "b64": "%bd", "u64": "%ud", "s64": "%sd", "f64": "%fd",
}
DECLARATIONS = " ".join(f".reg .{t} {name};" for t, name in REGISTERS.items())
# (kernel, position, the helpers its sites provide): a corpus kernel (histogram: `atom.global.add.u32`,
# `mad.lo.s32`) and one with an instruction per operand type (u8 loads, u16, s64, f32, f64, pred operands).
ANCHORS = [
    (KERNEL, "atom.global", ("OUT", "IN1", "ADDR", "BYTES")),
    (KERNEL, "mad", ("OUT", "IN1", "IN2", "IN3")),
    (OPERAND_TYPES, "ld.global.u8", ("OUT", "ADDR", "BYTES")),
    (OPERAND_TYPES, "add.u16", ("OUT", "IN1", "IN2")),
    (OPERAND_TYPES, "add.s64", ("OUT", "IN1", "IN2")),
    (OPERAND_TYPES, "fma", ("OUT", "IN1", "IN2", "IN3")),
    (OPERAND_TYPES, "add.f64", ("OUT", "IN1", "IN2")),
    (OPERAND_TYPES, "setp", ("OUT", "IN1", "IN2")),
    (OPERAND_TYPES, "selp", ("OUT", "IN1", "IN2", "IN3")),
    (OPERAND_TYPES, "atom.global", ("OUT", "IN1", "ADDR", "BYTES")),
    (OPERAND_TYPES, "st.global", ("IN1", "ADDR", "BYTES")),
]
SPECIALS = sorted(formats.SPECIAL)


def good_immediate(draw, wanted: str, bounds: tuple[int, int] | None) -> str:
    cls = formats.type_class(wanted)
    if cls == "pred":
        return draw(st.sampled_from(["0", "1"]))
    if cls == "f":
        return draw(st.sampled_from(["0f3F800000", "1.5", "-2.25", "0d3FF0000000000000"]))
    if bounds is not None:
        return str(draw(st.integers(*bounds)))
    width = formats.bits_of(wanted)
    value = draw(st.integers(-(1 << (width - 1)), (1 << width) - 1))
    return draw(st.sampled_from([str(value), hex(value) if value >= 0 else str(value)]))


def bad_immediate(draw, wanted: str) -> str:
    width = formats.bits_of(wanted) if wanted != "pred" else 1
    return draw(st.sampled_from([
        str(1 << width), str(-(1 << width)), "99999999999999999999", "1.5", "0f3F800000", "0d3FF0000000000000", "7", "2",
    ]))


def good_special(draw, wanted: str) -> str | None:
    if formats.type_class(wanted) not in "usb" or wanted == "pred":
        return None
    names = [n for n in SPECIALS if formats.SPECIAL[n].bits == formats.bits_of(wanted)]
    if not names:
        return None
    name = draw(st.sampled_from(names))
    components = formats.SPECIAL[name].components
    return f"{name}.{draw(st.sampled_from(components))}" if components else name


def helper_fits(helper: str, wanted: str) -> bool:
    """Uses of a helper that hold at every site: helpers have their site's type (resolve-operands checks
    each use there), and a wider integer use takes any of them zero-extended; BYTES is an integer
    count, which converts to any integer width."""
    integer = formats.type_class(wanted) in ("u", "s", "b") and wanted != "pred"
    if helper == "BYTES":
        return integer and formats.bits_of(wanted) >= 8
    return integer and formats.bits_of(wanted) == 64 and formats.register_fits(HELPER_TYPES[helper], wanted)


def good_operand(draw, slot, wanted: str, helpers: tuple[str, ...], bounds) -> str:
    if slot.kind == "d":
        key = wanted if wanted in REGISTERS else {"f": "f", "u": "u", "s": "s"}.get(wanted[0], "b") + wanted[1:]
        assume(key in REGISTERS)  # no register of that width is declared here (e.g. b128): another example
        return REGISTERS[key]
    if slot.kind == "i":
        return good_immediate(draw, wanted, bounds)
    choices = ["register", "immediate"]
    fitting = [h for h in helpers if helper_fits(h, wanted)]
    if fitting:
        choices.append("helper")
    special = good_special(draw, wanted)
    if special:
        choices.append("special")
    kind = draw(st.sampled_from(choices))
    if kind == "helper":
        return draw(st.sampled_from(fitting))
    if kind == "special":
        return special
    if kind == "immediate":
        return good_immediate(draw, wanted, bounds)
    fitting_registers = [t for t in REGISTERS if formats.register_fits(t, wanted)]
    assume(fitting_registers)
    register = draw(st.sampled_from(fitting_registers))
    text = REGISTERS[register]
    return f"!{text}" if slot.kind == "n" and draw(st.booleans()) else text


def bad_operand(draw, slot, wanted: str, helpers: tuple[str, ...]) -> str:
    kind = draw(st.sampled_from(["register", "immediate", "special", "helper"]))
    if kind == "register":
        return REGISTERS[draw(st.sampled_from(sorted(REGISTERS)))]
    if kind == "immediate":
        return bad_immediate(draw, wanted)
    if kind == "helper":
        return draw(st.sampled_from(helpers))
    name = draw(st.sampled_from(SPECIALS))
    return draw(st.sampled_from([name, name + ".x", name + ".w"]))


@st.composite
def table_instruction(draw, helpers: tuple[str, ...], mutate: bool) -> str:
    base = draw(st.sampled_from(sorted(formats.FORMATS)))
    forms = formats.FORMATS[base]
    form = draw(st.sampled_from(forms))
    types = draw(st.sampled_from(sorted(form.types)))
    modifiers = []
    for alternatives, required in form.groups:
        if required or draw(st.booleans()):
            modifiers.append(draw(st.sampled_from(sorted(alternatives))))
    bounds = {index: (low, high) for index, low, high in form.immediates}
    mutations = ["type", "modifier", "drop-modifier", "count", "operand"]
    mutation = draw(st.sampled_from([None, *mutations])) if mutate else None
    if mutation == "type":
        types = (draw(st.sampled_from(sorted(REGISTERS))),) + types[1:]
    elif mutation == "modifier":
        everything = sorted({m for f in forms for alts, _ in f.groups for m in alts} | {"rn", "lo", "wide", "ftz", "sat"})
        modifiers.insert(draw(st.integers(0, len(modifiers))), draw(st.sampled_from(everything)))
    elif mutation == "drop-modifier" and modifiers:
        modifiers.pop(draw(st.integers(0, len(modifiers) - 1)))
    opcode = ir.opcode(".".join((base, *modifiers, *types)))
    slots = list(form.operands)
    operands = []
    bad_index = draw(st.integers(0, len(slots) - 1)) if mutation == "operand" else -1
    for index, slot in enumerate(slots):
        try:
            wanted = formats.slot_type(slot, opcode)
            formats.bits_of(wanted)
        except (IndexError, KeyError):  # a mutated type list: any register will do
            wanted = "b32"
        if index == bad_index:
            operands.append(bad_operand(draw, slot, wanted, helpers))
        else:
            operands.append(good_operand(draw, slot, wanted, helpers, bounds.get(index)))
    if mutation == "count":
        if draw(st.booleans()) or len(operands) < 2:
            operands.append(operands[-1].lstrip("!"))
        else:
            operands.pop()
    guard = draw(st.sampled_from(["", "", "@%p ", "@!%p "]))
    return f"{guard}{opcode} {', '.join(operands)};"


@st.composite
def table_snippet(draw, mutate: bool):
    kernel, anchor, provided = draw(st.sampled_from(ANCHORS))
    where = draw(st.sampled_from(["before", "after"]))
    helpers = tuple(h for h in provided if h != "OUT" or where == "after")
    body = draw(st.lists(table_instruction(helpers, mutate), min_size=1, max_size=4))
    return kernel, anchor, where, body


def probed(kernel: str, anchor: str, where: str, body: list[str]) -> str:
    text = f'[fuzz]\nposition = "{anchor}"\n{where} = """{DECLARATIONS}\n' + "\n".join(body) + '\n"""\n'
    result = instrument(kernel, parse_probes(text, "fuzz.toml"))
    (info,) = result.kernels.values()
    assert info["sites"] and not info["skipped"], info["skipped"]  # the snippet really is in the kernel
    return result.ptx


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
@settings(max_examples=300 if LONG else 30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table_snippet(mutate=False))
def test_well_formed_snippets_are_admitted_and_assemble(snippet):
    kernel, anchor, where, body = snippet
    note("\n".join(body))
    ptxas(probed(kernel, anchor, where, body))


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
@settings(max_examples=400 if LONG else 40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(table_snippet(mutate=True))
def test_admitted_snippets_always_assemble(snippet):
    kernel, anchor, where, body = snippet
    note("\n".join(body))
    try:
        ptx = probed(kernel, anchor, where, body)
    except ProbeError as e:
        assert "fuzz.toml:" in str(e) and "[probe fuzz]" in str(e)
        event("refused")
        return
    event("admitted")
    ptxas(ptx)


# What ptxas rejects and the verifier must refuse: each instruction is first shown to fail ptxas on its
# own (so the list cannot rot into things ptxas accepts), then refused with a located message.
KNOWN_BAD = [
    ("mov.u64 %ud, 99999999999999999999;", "constant 99999999999999999999 does not fit 64 bits"),
    ("mov.u64 5, %ud;", "it must be a register, not 5"),
    ("mov.u32 %u;", "mov.u32 takes 2 operands, not 1"),
    ("add.u32 %u, %u, %u, %u;", "add.u32 takes 3 operands, not 4"),
    ("mul.u32 %u, %u, %u;", "mul.u32 needs one of .hi, .lo, .wide"),
    ("mul.wide.u64 %ud, %ud, %ud;", "mul.wide.u64: modifier .wide does not apply to .u64"),
    ("div.f32 %f, %f, %f;", "div.f32 needs one of .approx, .full, .rm, .rn, .rp, .rz"),
    ("div.f64 %fd, %fd, %fd;", "div.f64 needs one of .rm, .rn, .rp, .rz"),
    ("mad.f32 %f, %f, %f, %f;", "mad.f32 needs one of .rm, .rn, .rp, .rz"),
    ("cvt.u32.f32 %u, %f;", "cvt.u32.f32 needs one of .rmi, .rni, .rpi, .rzi"),
    ("cvt.f32.u32 %f, %u;", "cvt.f32.u32 needs one of .rm, .rn, .rp, .rz"),
    ("cvt.rn.u32.u64 %u, %ud;", "cvt.rn.u32.u64: modifier .rn does not apply to .u32.u64"),
    ("cvt.rn.f64.f32 %fd, %f;", "cvt.rn.f64.f32: modifier .rn does not apply to .f64.f32"),
    ("cvt.sat.s64.s32 %sd, %s;", "cvt.sat.s64.s32: modifier .sat does not apply to .s64.s32"),
    ("abs.u32 %u, %u;", "abs does not take type .u32"),
    ("neg.u32 %u, %u;", "neg does not take type .u32"),
    ("abs.b32 %b, %b;", "abs does not take type .b32"),
    ("rem.f32 %f, %f, %f;", "rem does not take type .f32"),
    ("and.u32 %u, %u, %u;", "and does not take type .u32"),
    ("shl.u32 %u, %u, 1;", "shl does not take type .u32"),
    ("add.sat.u32 %u, %u, %u;", "add.sat.u32: modifier .sat does not apply to .u32"),
    ("add.cc.u16 %uh, %uh, %uh;", "add.cc.u16: modifier .cc does not apply to .u16"),
    ("setp.lt.b32 %p, %b, %b;", "setp.lt.b32: modifier .lt does not apply to .b32"),
    ("setp.eq.u32 %p, %u, %u, %p;", "setp.eq.u32 takes 3 operands, not 4"),
    ("setp.eq.ftz.f64 %p, %fd, %fd;", "setp.eq.ftz.f64: modifier .ftz does not apply to .f64"),
    ("mov.u32 %u, %laneid.x;", "special register %laneid has no component .x"),
    ("mov.u32 %u, %tid;", "special register %tid is a vector: name a component"),
    ("mov.u32 %u, %clock64;", "type mismatch: %clock64 is a 64-bit integer but mov.u32 expects a .u32 operand"),
    ("mov.u64 %ud, %smid;", "type mismatch: %smid is a 32-bit integer but mov.u64 expects a .u64 operand"),
    ("mov.f32 %f, %smid;", "type mismatch: %smid is a 32-bit integer but mov.f32 expects a .f32 operand"),
    ("add.f32 %f, %f, 1;", "integer constant 1 where .f32 wants a floating-point one"),
    ("add.u32 %u, %u, 1.5;", "floating-point constant 1.5 where .u32 wants an integer"),
    ("mov.b32 %b, 0d3FF0000000000000;", "floating-point constant 0d3FF0000000000000 where .b32 wants an integer"),
    ("mov.f32 %f, %u;", "type mismatch: %u is .u32 but mov.f32 expects a .f32 operand"),
    ("add.u32 %u, %u, %ud;", "type mismatch: %ud is 64-bit but add.u32 expects a 32-bit operand"),
    ("shl.b64 %bd, %bd, %bd;", "type mismatch: %bd is 64-bit but shl.b64 expects a 32-bit operand"),
    ("selp.u32 %u, %u, %u, %u;", "type mismatch: %u is .u32 but selp.u32 expects a .pred operand"),
    ("popc.b64 %bd, %bd;", "type mismatch: %bd is 64-bit but popc.b64 expects a 32-bit operand"),
    ("bfe.u32 %u, %u, 300, 1;", "constant 300 of bfe.u32 must lie in 0..255"),
    ("bfi.b32 %b, %b, %b, -1, 1;", "constant -1 of bfi.b32 must lie in 0..255"),
    ("setp.eq.pred %p, %p, %p;", "setp does not take type .pred"),
    ("min.b32 %b, %b, %b;", "min does not take type .b32"),
    ("mov %b, %b;", "mov needs a type, e.g. mov.b16"),
    ("cvt.u32 %u, %u;", "cvt.u32 has 1 type, cvt takes 2 (e.g. cvt.s16.s16)"),
    ("mul.u32.lo %u, %u, %u;", "mul.u32.lo: the type must come last (.u32)"),
]


def raw_kernel(instruction: str) -> str:
    """The instruction alone in a kernel declaring the fuzz registers, as ptxas sees probe code."""
    return (
        ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n"
        + "\n".join(f".reg .{t} {name};" for t, name in REGISTERS.items())
        + f"\n{instruction}\nret;\n}}\n"
    )


@pytest.mark.parametrize("instruction, message", KNOWN_BAD)
def test_known_bad_instructions_are_refused(instruction, message):
    if HAVE_PTXAS:
        with pytest.raises(AssertionError, match="ptxas failed"):
            ptxas(raw_kernel(instruction))
    body = DECLARATIONS + "\n" + instruction
    report = refuse(f'[bad]\nposition = "ld.global"\nbefore = """{body}"""\n')
    assert "p.toml:4:" in report and "[probe bad]" in report, report
    assert message in report, report
    assert instruction in report  # the snippet line is shown


def test_refusal_points_at_the_operand_not_its_declaration():
    report = refuse(kernel_probe(".reg .b32 %a; shl.b32 %a, %a, %c; .reg .b64 %c;"))
    first = report.splitlines()[0]
    line = 'before = """.reg .b32 %a; shl.b32 %a, %a, %c; .reg .b64 %c;"""'
    assert first == f"p.toml:4:{line.index('%c;') + 1}: error: [probe p] type mismatch: %c is 64-bit but shl.b32 expects a 32-bit operand", report


def test_phase_two_refuses_malformed_engine_code_in_probe_sites():
    """Helper reads are the engine's code, inserted with the probe's origin: they must fit the table too."""
    from neutrino.errors import InstrumentError
    from neutrino.passes import default_pipeline
    from neutrino.passes.build import insn

    class MalformedHelperRead:
        name = "malformed-helper-read"
        requires = ()

        def run(self, module, ctx):
            (state,) = ctx.kernels.values()
            probe_code = next(i for i in ir.instructions(state.function.body) if i.origin and i.origin.startswith("probe "))
            tmp = state.temp("h_bad", "b32")
            bad = insn("cvt.u32.f32", tmp, tmp, origin=probe_code.origin)  # no rounding: ptxas refuses it
            state.function.body.insert(state.function.body.index(probe_code), bad)

    pipeline = default_pipeline().insert_before("verify", MalformedHelperRead())
    probes = parse_probes('[p]\nposition = "atom.global"\nbefore = """.reg .b64 %a; mov.u64 %a, IN1;"""\n', "p.toml")
    with pytest.raises(InstrumentError, match=r"probe code contains a malformed cvt.u32.f32 \(cvt.u32.f32 needs one of .rmi"):
        instrument(KERNEL, probes, pipeline=pipeline)
