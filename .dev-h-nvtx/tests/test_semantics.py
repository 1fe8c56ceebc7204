"""The PTX semantics table: defs, uses, memory accesses and bytes per instruction."""

import pytest

from neutrino.isa.ptx import ir, parse_module, parse_statements
from neutrino.isa.ptx.semantics import RuntimeBytes, access_bytes, defined_registers, effects, missing_bytes_reason

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
        ("cp.async.cg.shared.global [%r133+0], [%rd61+0], 0x10, %r134;", [], ["%r133", "%rd61", "%r134"], "global", "load", RuntimeBytes(R("%r134"), 16)),
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


# Every memory form the table knows: (instruction, space of the access a probe's ADDR names, access, bytes).
BYTE_FORMS = [
    # ld / st / atom / red: vector width x element size, .b128 included
    ("ld.global.u8 %rs1, [%rd1];", "global", "load", 1),
    ("ld.global.nc.v2.f32 {%f1, %f2}, [%rd1];", "global", "load", 8),
    ("ld.global.v4.b64 {%rd1, %rd2, %rd3, %rd4}, [%rd5];", "global", "load", 32),
    ("ld.global.v8.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd1];", "global", "load", 32),
    ("ld.global.b128 %q1, [%rd1];", "global", "load", 16),
    ("ld.relaxed.gpu.global.u32 %r1, [%rd1];", "global", "load", 4),
    ("ldu.global.v2.f64 {%fd1, %fd2}, [%rd1];", "global", "load", 16),
    ("ld.v2.f32 {%f1, %f2}, [%rd1];", None, "load", 8),  # generic: the space is not in the instruction
    ("ld.shared.v4.u32 {%r1, %r2, %r3, %r4}, [%r5];", "shared", "load", 16),
    ("ld.local.u64 %rd1, [%rd2];", "local", "load", 8),
    ("ld.const.f32 %f1, [c];", "const", "load", 4),
    ("st.global.v4.f32 [%rd1], {%f1, %f2, %f3, %f4};", "global", "store", 16),
    ("st.release.sys.global.b128 [%rd1], %q1;", "global", "store", 16),
    ("st.u16 [%rd1], %rs1;", None, "store", 2),
    ("atom.global.add.u64 %rd1, [%rd2], 1;", "global", "atomic", 8),
    ("atom.global.cas.b32 %r1, [%rd2], %r3, %r4;", "global", "atomic", 4),
    ("atom.global.cas.b128 %q1, [%rd2], %q2, %q3;", "global", "atomic", 16),
    ("atom.global.exch.b128 %q1, [%rd2], %q2;", "global", "atomic", 16),
    ("atom.global.add.noftz.bf16x2 %r1, [%rd2], %r3;", "global", "atomic", 4),
    ("atom.global.v2.f32.add {%f1, %f2}, [%rd1], {%f3, %f4};", "global", "atomic", 8),
    ("atom.global.v8.f16.max.noftz {%h1, %h2, %h3, %h4, %h5, %h6, %h7, %h8}, [%rd1], {%h1, %h2, %h3, %h4, %h5, %h6, %h7, %h8};", "global", "atomic", 16),
    ("atom.shared.inc.u32 %r1, [%r2], 7;", "shared", "atomic", 4),
    ("red.global.add.f64 [%rd1], %fd1;", "global", "atomic", 8),
    ("red.global.v4.bf16x2.add.noftz [%rd1], {%r1, %r2, %r3, %r4};", "global", "atomic", 16),
    # cp.async: cp-size, or src-size bytes (the rest is zero-filled), or none with ignore-src
    ("cp.async.ca.shared.global [%r1], [%rd1], 4;", "global", "load", 4),
    ("cp.async.cg.shared.global [%r1], [%rd1], 16, 8;", "global", "load", 8),
    ("cp.async.cg.shared.global [%r1], [%rd1], 16, %r2;", "global", "load", RuntimeBytes(R("%r2"), 16)),
    ("cp.async.ca.shared::cta.global [%r1], [%rd1], 8, %p1;", "global", "load", RuntimeBytes(R("%p1"), 8)),
    ("cp.async.cg.shared.global.L2::cache_hint [%r1], [%rd1], 16, %rd9;", "global", "load", 16),
    ("cp.async.cg.shared.global.L2::cache_hint [%r1], [%rd1], 16, %r2, %rd9;", "global", "load", RuntimeBytes(R("%r2"), 16)),
    # cp.async.bulk: the size operand
    ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], 1024, [%r2];", "global", "load", 1024),
    ("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r3, [%r2];", "global", "load", RuntimeBytes(R("%r3"))),
    ("cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 256;", "global", "store", 256),
    ("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1], [%r1], 512;", "global", "atomic", 512),
    ("cp.async.bulk.prefetch.L2.global [%rd1], 4096;", "global", "prefetch", 4096),
    # TMA: the box size is in the tensor map (see missing_bytes_reason)
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];", "global", "load", None),
    ("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%rd1, {%r2}], [%r1];", "global", "store", None),
    # wmma: this thread's share of the tile (tile bytes / 32)
    ("wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd1], %r9;", "global", "load", 16 * 16 * 2 // 32),
    ("wmma.load.b.sync.aligned.col.m32n8k16.global.bf16 {%r1, %r2}, [%rd1], %r9;", "global", "load", 16 * 8 * 2 // 32),
    ("wmma.load.a.sync.aligned.row.m8n32k16.global.s8 {%r1}, [%rd1], %r9;", "global", "load", 8 * 16 // 32),
    ("wmma.load.c.sync.aligned.row.m16n16k16.global.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd1], %r9;", "global", "load", 16 * 16 * 4 // 32),
    ("wmma.load.a.sync.aligned.row.m16n16k8.global.tf32 {%r1, %r2, %r3, %r4}, [%rd1], %r9;", "global", "load", 16 * 8 * 4 // 32),
    ("wmma.load.b.sync.aligned.col.m8n8k4.global.f64 {%fd1}, [%rd1], %r9;", "global", "load", 4 * 8 * 8 // 32),
    ("wmma.load.a.sync.aligned.row.m8n8k32.global.s4 {%r1}, [%rd1], %r9;", "global", "load", 8 * 32 // 2 // 32),
    ("wmma.load.b.sync.aligned.col.m8n8k128.global.b1 {%r1}, [%rd1], %r9;", "global", "load", 128 * 8 // 8 // 32),
    ("wmma.store.d.sync.aligned.row.m16n16k16.global.f16 [%rd1], {%r1, %r2, %r3, %r4}, %r9;", "global", "store", 16 * 16 * 2 // 32),
    ("wmma.store.d.sync.aligned.col.m8n8k4.global.f64 [%rd1], {%fd1, %fd2}, %r9;", "global", "store", 8 * 8 * 8 // 32),
    ("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%r10], %r9;", "shared", "load", 16),
    ("wmma.load.a.sync.aligned.row.m16n16k16.f16 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd1];", None, "load", 16),
    # ldmatrix / stmatrix: shared memory only, .xN matrices over the warp
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%r5];", "shared", "load", 8 * 8 * 2 // 32),
    ("ldmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16 {%r1, %r2}, [%r5];", "shared", "load", 2 * 8 * 8 * 2 // 32),
    ("ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8 {%r1, %r2, %r3, %r4}, [%r5];", "shared", "load", 2 * 16 * 16 // 32),
    ("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r5], {%r1, %r2, %r3, %r4};", "shared", "store", 4 * 8 * 8 * 2 // 32),
    ("stmatrix.sync.aligned.m16n8.x1.trans.shared.b8 [%r5], {%r1};", "shared", "store", 16 * 8 // 32),
    # mbarrier objects live in shared memory, whatever the address form
    ("mbarrier.arrive.b64 %rd3, [%rd2];", "shared", "atomic", None),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2;", "shared", "load", None),
]


@pytest.mark.parametrize("text, space, access, nbytes", BYTE_FORMS, ids=[f[0].split(" ")[0] for f in BYTE_FORMS])
def test_bytes_of_every_memory_form(text, space, access, nbytes):
    (insn,) = parse_statements(text)
    e = effects(insn)
    assert (e.primary_memory.space, e.primary_memory.access) == (space, access)
    assert e.bytes == nbytes
    assert access_bytes(insn) == nbytes


def test_tma_bytes_are_marked_unknowable():
    (insn,) = parse_statements(BYTE_FORMS[[f[0].split(" ")[0] for f in BYTE_FORMS].index("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes")][0])
    assert "tensor map" in missing_bytes_reason(insn)
    (plain,) = parse_statements("add.u32 %r1, %r2, %r3;")
    assert "no byte count" in missing_bytes_reason(plain)


def test_wmma_bytes_summed_over_the_warp_are_the_tile():
    for text, _, _, nbytes in BYTE_FORMS:
        if text.startswith("wmma") and ".m16n16k16." in text:
            fragment = text.split(".")[2]
            rows, cols = {"a": (16, 16), "b": (16, 16), "c": (16, 16), "d": (16, 16)}[fragment]
            element = {"f16": 2, "bf16": 2, "f32": 4, "s8": 1}[text.split(" ")[0].split(".")[-1]]
            assert 32 * nbytes == rows * cols * element
