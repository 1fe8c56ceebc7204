"""The PTX semantics table: defs, uses, memory accesses and bytes per instruction."""

import pytest

from neutrino.isa.ptx import ir, parse_module, parse_statements
from neutrino.isa.ptx.semantics import access_bytes, defined_registers, effects

from helpers import CORPUS

R = ir.Register


def fx(text):
    (insn,) = parse_statements(text)
    return effects(insn)


@pytest.mark.parametrize(
    "text, defs, uses, space, access, nbytes",
    [
        ("@%p1 ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1+16];", ["%f1", "%f2", "%f3", "%f4"], ["%rd1", "%p1"], "global", "load", 16),
        ("ld.global.L1::evict_last.L2::cache_hint.v4.b32 {%r1, %r2, %r3, %r4}, [%rd17+0], %rd18;", ["%r1", "%r2", "%r3", "%r4"], ["%rd17", "%rd18"], "global", "load", 16),
        ("st.shared.v2.f32 [%r3], {%f1, %f2};", [], ["%r3", "%f1", "%f2"], "shared", "store", 8),
        ("st.global.u8 [%rd1], %rs1;", [], ["%rd1", "%rs1"], "global", "store", 1),
        ("atom.global.add.u32 %r1, [%rd1], %r2;", ["%r1"], ["%rd1", "%r2"], "global", "atomic", 4),
        ("red.global.add.f32 [%rd1], %f1;", [], ["%rd1", "%f1"], "global", "atomic", 4),
        ("cp.async.cg.shared.global [%r133+0], [%rd61+0], 0x10, %r134;", [], ["%r133", "%rd61", "%r134"], "global", "load", 16),
        ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r5];", ["%r1", "%r2", "%r3", "%r4"], ["%r5"], "shared", "load", 16),
        ("ld.param.b64 %rd7, [vadd_param_0];", ["%rd7"], [], "param", "load", 8),
        ("add.s32 %r1, %r2, 4;", ["%r1"], ["%r2"], None, None, None),
        ("setp.lt.s32 %p1|%p2, %r31, %r27;", ["%p1", "%p2"], ["%r31", "%r27"], None, None, None),
        ("shfl.sync.bfly.b32 %r1|%p1, %r2, 16, 31, -1;", ["%r1", "%p1"], ["%r2"], None, None, None),
    ],
)
def test_effects(text, defs, uses, space, access, nbytes):
    e = fx(text)
    assert [r.name for r in e.defs] == defs
    assert [r.name for r in e.uses] == uses
    mem = e.primary_memory
    assert (mem.space if mem else None, mem.access if mem else None) == (space, access)
    assert e.bytes == nbytes


def test_wgmma_reads_shared_operands_per_thread():
    accum = ", ".join(f"%r{i}" for i in range(64))
    e = fx(f"wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{accum}}}, %rd47, %rd48, %p4, 1, 1, 0, 1;")
    assert len(e.defs) == 64 and R("%r0") in e.uses  # accumulators are read and written
    assert e.bytes == (64 * 16 * 2 + 128 * 16 * 2) // 128


@pytest.mark.parametrize("text, control", [("bra $L1;", "branch"), ("@%p ret;", "return"), ("exit;", "exit"), ("bar.sync 0;", "barrier"), ("trap;", "trap"), ("call.uni f, (p);", "call")])
def test_control(text, control):
    assert fx(text).control == control


def test_cp_async_bulk_global_destination():
    e = fx("cp.async.bulk.global.shared::cta [%rd1], [%r2], 256;")
    assert e.primary_memory.space == "global" and e.primary_memory.access == "store" and e.bytes == 256


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_defined_registers_are_the_defs_of_effects(path):
    module = parse_module(path.read_text())
    for function in module.functions():
        for insn in ir.instructions(function.body or []):
            assert sorted(r.name for r in defined_registers(insn)) == sorted(r.name for r in effects(insn).defs), insn


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_access_bytes_is_the_byte_count_of_effects(path):
    """The shortcut that spares operand parsing gives what the full effects give."""
    module = parse_module(path.read_text())
    counted = 0
    for function in module.functions():
        for insn in ir.instructions(function.body or []):
            assert access_bytes(insn) == effects(insn).bytes, str(insn.opcode)
            counted += access_bytes(insn) is not None
    assert counted, "the corpus has memory instructions"
