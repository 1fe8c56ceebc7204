"""Helpers take the type of what they stand for at each site (spec/probe-toml.md, "Helpers").

OUT/IN1-3 are the matched instruction's operands with their declared types,
BYTES a constant of every integer width or a run-time count; every use of a
helper is checked at every site, and a use that cannot take the helper's
type there is a located error naming the site (and an earlier site where the
helper had another type). Whatever is accepted must assemble.
"""

from __future__ import annotations

import itertools
import re

import pytest

from neutrino.engine import instrument
from neutrino.errors import ProbeError
from neutrino.probefile import parse_probes

from helpers import HAVE_PTXAS, ptxas

KERNEL = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
	.reg .pred %p<4>;
	.reg .b16 %h<4>;
	.reg .b32 %r<8>;
	.reg .f32 %f<6>;
	.reg .b64 %rd<8>;
	.reg .f64 %fd<4>;
	ld.param.u64 %rd1, [p];
	cvta.to.global.u64 %rd2, %rd1;
	ld.global.f32 %f1, [%rd2];
	fma.rn.f32 %f2, %f1, %f1, %f1;
	fma.rn.f64 %fd2, %fd1, %fd1, %fd1;
	add.u16 %h2, %h1, %h1;
	add.u32 %r2, %r1, 7;
	setp.lt.u32 %p1, %r2, 4;
	mov.u32 %r3, %tid.x;
	add.f32 %f3, %f2, 0f3F800000;
	mul.wide.u32 %rd3, %r2, %r3;
	cp.async.ca.shared.global [%r4], [%rd2], 16, %r5;
	cp.async.ca.shared.global [%r4], [%rd2], 8, %p2;
	st.global.f32 [%rd2], %f3;
	ret;
}
"""
LINE: dict[str, int] = {}  # opcode → line of its first instruction
for number, line_text in enumerate(KERNEL.splitlines(), 1):
    LINE.setdefault(line_text.strip().split(" ")[0], number)

# (position, helper, when, the helper's width there: bits, "pred", None = an integer constant, "count" = a run-time byte count)
SITES = [
    ("fma.rn.f32", "IN1", "before", 32),
    ("fma.rn.f64", "IN1", "before", 64),
    ("add.u16", "IN1", "before", 16),
    ("add.u32", "IN2", "before", None),
    ("setp.lt.u32", "OUT", "after", "pred"),
    ("mov.u32", "IN1", "before", 32),
    ("add.f32", "IN2", "before", 32),
    ("mul.wide.u32", "OUT", "after", 64),
    ("ld.global.f32", "OUT", "after", 32),
    ("ld.global.f32", "BYTES", "before", None),
    ("st.global.f32", "BYTES", "before", None),
    ("cp.async.ca.shared.global", "BYTES", "before", "count"),
]
# (use, the width it expects)
USES = [
    ("mov.b16 %x16, H;", 16),
    ("mov.b32 %x32, H;", 32),
    ("mov.b64 %x64, H;", 64),
    ("add.u32 %x32, %x32, H;", 32),
    ("add.u64 %x64, %x64, H;", 64),
    ("cvt.u64.u32 %x64, H;", 32),
    ("setp.ne.u32 %q, H, 0;", 32),
    ("and.pred %q, %q, H;", "pred"),
    ("SAVE.u64 {H};", None),
    ("SAVE.u32 {H, %x32};", None),
]
DECLS = ".reg .b16 %x16; .reg .b32 %x32; .reg .b64 %x64; .reg .pred %q;"


def accepts(want, have) -> bool:
    """The rule of spec/probe-toml.md: own width; integer constants fit all; wider integer uses zero-extend
    (a predicate becomes 0/1); a byte count converts to any integer width; SAVE takes anything."""
    if want is None or have is None or want == have:
        return True
    if want == "pred":
        return False
    return have in ("count", "pred") or want > have


def probe(name, position, when, use):
    datamodel = 'datamodel = "thread:8"\n' if "SAVE" in use else ""
    return f'[{name}]\nposition = "{position}"\n{datamodel}{when} = "{DECLS} {use}"\n'


CASES = [(site, use) for site, use in itertools.product(SITES, USES)]


def case_id(case):
    (position, helper, when, _), (use, _) = case
    return f"{position}-{helper}-{use.split(' ')[0]}"


def test_every_accepted_use_assembles():
    """All accepted (site, use) pairs in one probe file: one engine run, one ptxas run."""
    text = ""
    count = 0
    for n, ((position, helper, when, have), (use, want)) in enumerate(CASES):
        if accepts(want, have):
            text += probe(f"p{n}", position, when, use.replace("H", helper))
            count += sum(line.strip().startswith(position + " ") for line in KERNEL.splitlines())
    assert count > len(CASES) // 2
    result = instrument(KERNEL, parse_probes(text, "p.toml"), source="k.ptx")
    assert result.kernels["k"]["skipped"] == []
    assert result.kernels["k"]["sites"] == count
    if HAVE_PTXAS:
        ptxas(result.ptx)


@pytest.mark.parametrize("case", [c for c in CASES if not accepts(c[1][1], c[0][3])], ids=case_id)
def test_every_refused_use_is_a_located_error(case):
    (position, helper, when, have), (use, want) = case
    text = probe("p", position, when, use.replace("H", helper))
    with pytest.raises(ProbeError) as info:
        instrument(KERNEL, parse_probes(text, "p.toml"), source="k.ptx")
    diag = info.value.diagnostics[0]  # the first failing site (cp.async has two, of two types: two problems)
    assert diag.location.line == 3 + ("SAVE" in use) and diag.location.column == diag.location.text.index(helper) + 1
    opcode = use.split(" ")[0]
    assert f"{helper} is " in diag.message and f"but {opcode} expects" in diag.message
    assert f"k.ptx:{LINE[position]} ({position}" in diag.message


def test_fma_f32_operand_is_32_bits():
    """The issue's case: IN1 of fma.rn.f32 is an .f32, so `mov.b32 %a, IN1` is right; its register is .b32."""
    text = '[p]\nposition = "fma.rn.f32"\nbefore = ".reg .b32 %a; mov.b32 %a, IN1;"\n'
    result = instrument(KERNEL, parse_probes(text, "p.toml"), source="k.ptx")
    assert re.search(r"\.reg \.b32 [^;]*%nt_h_in1_b32[,;]", result.ptx)
    assert "mov.b32 \t%nt_h_in1_b32, %f1;" in result.ptx
    assert "mov.b32 \t%nt_p_a, %nt_h_in1_b32;" in result.ptx
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_a_helper_of_two_types_names_both_sites():
    text = '[p]\nposition = "fma.rn"\nbefore = ".reg .b32 %a; mov.b32 %a, IN1;"\n'
    with pytest.raises(ProbeError) as info:
        instrument(KERNEL, parse_probes(text, "p.toml"), source="k.ptx")
    report = str(info.value)
    assert report.startswith("p.toml:3:")
    assert f"IN1 is .f64 at k.ptx:{LINE['fma.rn.f64']} (fma.rn.f64 in k)" in report
    assert f"it is .f32 at k.ptx:{LINE['fma.rn.f32']} (fma.rn.f32 in k)" in report
    assert "mov.b32 expects a 32-bit operand" in report


def test_bytes_is_a_constant_of_any_width():
    """`add.u64 %gbytes, %gbytes, BYTES;` as users write it: the count goes in as an immediate."""
    text = '[p]\nposition = "ld.global:st.global"\nbefore = ".reg .b64 %g; .reg .b32 %h; add.u64 %g, %g, BYTES; add.u32 %h, %h, BYTES;"\n'
    result = instrument(KERNEL, parse_probes(text, "p.toml"), source="k.ptx")
    assert result.ptx.count("add.u64 \t%nt_p_g, %nt_p_g, 4;") == 2
    assert result.ptx.count("add.u32 \t%nt_p_h, %nt_p_h, 4;") == 2
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_bytes_of_cp_async_is_the_source_size_at_run_time():
    text = '[p]\nposition = "cp.async"\nbefore = ".reg .b64 %g; add.u64 %g, %g, BYTES;"\n'
    result = instrument(KERNEL, parse_probes(text, "p.toml"), source="k.ptx")
    # src-size: the register, converted to the width of the use; ignore-src: cp-size unless the predicate is true
    assert "mov.b32 \t%nt_h_bytes_b32, %r5;" in result.ptx
    assert "cvt.u64.u32 \t%nt_h_bytes_b64, %nt_h_bytes_b32;" in result.ptx
    assert "selp.b64 \t%nt_h_bytes_b64, 0, 8, %p2;" in result.ptx
    assert result.ptx.count("add.u64 \t%nt_p_g, %nt_p_g, %nt_h_bytes_b64;") == 2
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_tma_bytes_site_is_skipped_with_the_reason():
    kernel = KERNEL.replace(".target sm_80", ".target sm_90").replace(
        "\tret;", "\tcp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd2, {%r1}], [%r6];\n\tret;")
    text = '[p]\nposition = "cp.async.bulk.tensor"\nbefore = ".reg .b64 %g; add.u64 %g, %g, BYTES;"\n'
    result = instrument(kernel, parse_probes(text, "p.toml"), source="k.ptx")
    (skip,) = result.kernels["k"]["skipped"]
    assert "tensor map" in skip["reason"]


# -- generated: helpers of every type the corpus shows, in every use, at real compiler output

import os  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from neutrino.isa.ptx import ir, parse_module  # noqa: E402

from helpers import CORPUS  # noqa: E402

EXAMPLES = 200 if os.environ.get("NEUTRINO_HYPOTHESIS") == "long" else 20


@st.composite
def corpus_probe(draw):
    """A corpus entry, an opcode of it as the position, a helper and a use of it."""
    path = draw(st.sampled_from(CORPUS))
    module = parse_module(path.read_text())
    entry = draw(st.sampled_from(module.entries()))
    # the first two components of its opcodes, where the position grammar spells them (no `L1::…`)
    opcodes = sorted({".".join(i.opcode.components[:2]) for i in ir.instructions(entry.body)})
    position = draw(st.sampled_from([o for o in opcodes if re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)?", o)]))
    when, helper = draw(st.sampled_from([("before", "IN1"), ("before", "IN2"), ("before", "IN3"), ("after", "OUT"), ("before", "BYTES")]))
    use, want = draw(st.sampled_from(USES))
    return path, entry.name, position, helper, use.replace("H", helper), want, when


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=corpus_probe())
def test_generated_helper_uses_assemble_or_are_refused(case):
    path, _, position, helper, use, want, when = case
    text = probe("p", position, when, use)
    try:
        result = instrument(path.read_text(), parse_probes(text, "p.toml"), source=path.name)
    except ProbeError as error:
        assert want is not None  # SAVE takes every type
        for diag in error.diagnostics:
            assert f"{helper} is " in diag.message and f"expects a {'.pred' if want == 'pred' else f'{want}-bit'} operand" in diag.message
            assert f"{path.name}:" in diag.message
        return
    if HAVE_PTXAS:
        ptxas(result.ptx)
