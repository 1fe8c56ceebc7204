"""Each pass on a small kernel: input PTX, and the lines expected after it (FileCheck)."""

import pytest

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import parse_module, print_module
from neutrino.isa.ptx.ir import Instruction
from neutrino.passes import (
    BufferAddressing, CountingVariant, OperandResolution, PassManager, Pruning, RegisterVirtualization,
    SaveLowering, TracepointMatching, Verifier, default_pipeline,
)
from neutrino.passes.manager import Context, PassFailed
from neutrino.probefile import parse_probes

from helpers import HAVE_PTXAS, filecheck, ptxas

KERNEL = """.version 8.0
.target sm_80
.address_size 64
.global .align 4 .b8 table[16];
.global .align 4 .b8 unused[16];
.func (.param .b32 r) helper(.param .b32 a)
{
	.reg .b32 %r<2>;
	ld.param.b32 %r1, [a];
	st.param.b32 [r], %r1;
	ret;
}
.visible .entry k(
	.param .u64 k_p0
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_p0];
	cvta.to.global.u64 %rd2, %rd1;
	mov.u32 %r1, %tid.x;
	setp.lt.u32 %p1, %r1, 16;
	@%p1 ld.global.v2.u32 {%r2, %r3}, [%rd2+8];
	add.u32 %r4, %r2, %r3;
	@!%p1 st.global.u32 [%rd2], %r4;
	@%p1 ret;
	ret;
}
.visible .entry other()
{
	.reg .b64 %rd<2>;
	mov.u64 %rd1, table;
	ret;
}
"""

PROBES = '''[mem]
position = "ld.global:st.global"
datamodel = "thread:16:4"
before = "SAVE.u64 {ADDR}; SAVE.u32 {BYTES, %smid};"

[sum]
position = "add"
after = """.reg .b64 %total; add.u64 %total, %total, OUT;"""

[sched]
position = "kernel"
datamodel = "warp:16"
before = ".reg .b64 %t0; mov.u64 %t0, %clock64;"
after = "SAVE.u64 {%t0, %total};"
'''


def run(passes, probes=PROBES, kernel="k", text=KERNEL):
    module = parse_module(text, "k.ptx")
    ctx = Context(parse_probes(probes, "p.toml"), kernel)
    PassManager(passes).run(module, ctx)
    return print_module(module), ctx


def test_match_tracepoints():
    _, ctx = run([TracepointMatching()])
    sites = [(s.probe, s.where, s.kind, str(s.anchor.opcode) if s.anchor else None) for s in ctx.kernels["k"].sites]
    assert sites == [
        ("mem", "before", "instruction", "ld.global.v2.u32"),
        ("mem", "before", "instruction", "st.global.u32"),
        ("sum", "after", "instruction", "add.u32"),
        ("sched", "before", "entry", None),
        ("sched", "after", "exit", "ret"),
        ("sched", "after", "exit", "ret"),
    ]
    assert list(ctx.kernels) == ["k"]


def test_virtualize_registers_avoids_kernel_names():
    text = KERNEL.replace(".reg .b64 %rd<4>;", ".reg .b64 %rd<4>;\n\t.reg .b32 %nt_x;")
    _, ctx = run([TracepointMatching(), RegisterVirtualization()], text=text)
    state = ctx.kernels["k"]
    assert state.prefix == "%nt1_"
    assert state.renames == {"%total": "%nt1_p_total", "%t0": "%nt1_p_t0"}


def test_resolve_operands():
    out, _ = run([TracepointMatching(), RegisterVirtualization(), OperandResolution()])
    filecheck(out, """
CHECK-LABEL: .entry k(
CHECK: mov.u64 %nt_p_t0, %clock64;
CHECK: setp.lt.u32 %p1, %r1, 16;
CHECK-NEXT: mov.b64 %nt_h_addr, %rd2;
CHECK-NEXT: add.u64 %nt_h_addr, %nt_h_addr, 8;
CHECK-NEXT: @%p1 SAVE.u64 {%nt_h_addr};
CHECK-NEXT: @%p1 SAVE.u32 {8, %smid};
CHECK-NEXT: @%p1 ld.global.v2.u32 {%r2, %r3}, [%rd2+8];
CHECK-NEXT: add.u32 %r4, %r2, %r3;
CHECK-NEXT: mov.b32 %nt_h_out_b32, %r4;
CHECK-NEXT: cvt.u64.u32 %nt_h_out_b64, %nt_h_out_b32;
CHECK-NEXT: add.u64 %nt_p_total, %nt_p_total, %nt_h_out_b64;
CHECK: @!%p1 SAVE.u64 {%nt_h_addr};
CHECK: @!%p1 st.global.u32 [%rd2], %r4;
CHECK-NEXT: mov.pred %nt_exec, %p1;
CHECK-NEXT: and.pred %nt_exec, %nt_exec, %nt_lead_warp;
CHECK-NEXT: @%nt_exec SAVE.u64 {%nt_p_t0, %nt_p_total};
CHECK-NEXT: @%p1 ret;
CHECK-NEXT: @%nt_lead_warp SAVE.u64 {%nt_p_t0, %nt_p_total};
CHECK-NEXT: ret;
""")



def test_sites_of_one_snippet_get_their_own_copies():
    """The snippet is renamed once per guard and copied: each site owns its instructions and origin."""
    text = KERNEL.replace("\tadd.u32 %r4, %r2, %r3;\n", "\tadd.u32 %r4, %r2, %r3;\n\t@%p1 ld.global.u32 %r5, [%rd2];\n\tld.global.u32 %r6, [%rd2+4];\n")
    probes = '[c]\nposition = "ld.global"\nbefore = ".reg .b64 %n; add.u64 %n, %n, 1;"\n'
    out, ctx = run([TracepointMatching(), RegisterVirtualization(), OperandResolution()], probes=probes, text=text)
    body = ctx.kernels["k"].function.body
    copies = [s for s in body if isinstance(s, Instruction) and s.origin and s.origin.startswith("probe c#")]
    # a guarded 64-bit accumulation is a select and an unguarded add (resolve._SiteBuilder.guarded)
    assert [c.origin for c in copies] == ["probe c#0", "probe c#0", "probe c#1", "probe c#1", "probe c#2"]
    assert len({id(c) for c in copies}) == 5
    assert [str(c.guard) if c.guard else None for c in copies] == [None] * 5
    filecheck(out, """
CHECK: selp.b64 %nt_acc, 1, 0, %p1;
CHECK-NEXT: add.u64 %nt_p_n, %nt_p_n, %nt_acc;
CHECK-NEXT: @%p1 ld.global.v2.u32 {%r2, %r3}, [%rd2+8];
CHECK: selp.b64 %nt_acc, 1, 0, %p1;
CHECK-NEXT: add.u64 %nt_p_n, %nt_p_n, %nt_acc;
CHECK-NEXT: @%p1 ld.global.u32 %r5, [%rd2];
CHECK-NEXT: add.u64 %nt_p_n, %nt_p_n, 1;
CHECK-NEXT: ld.global.u32 %r6, [%rd2+4];
""")

def test_lower_save():
    out, _ = run([TracepointMatching(), RegisterVirtualization(), OperandResolution(), SaveLowering()])
    filecheck(out, """
CHECK-LABEL: .entry k(
CHECK: mov.b64 %nt_f0_mem, %nt_h_addr;
CHECK-NEXT: mov.b32 %nt_f1_mem, 8;
CHECK-NEXT: mov.u32 %nt_f2_mem, %smid;
CHECK-NEXT: setp.lt.and.u32 %nt_ok_mem, %nt_cur_mem, 4, %nt_on;
CHECK-NEXT: and.pred %nt_ok_mem, %nt_ok_mem, %p1;
CHECK-NEXT: mul.wide.u32 %nt_off_mem, %nt_cur_mem, 16;
CHECK-NEXT: add.u64 %nt_ptr_mem, %nt_rec_mem, %nt_off_mem;
CHECK-NEXT: @%nt_ok_mem st.global.b64 [%nt_ptr_mem], %nt_f0_mem;
CHECK-NEXT: @%nt_ok_mem st.global.v2.b32 [%nt_ptr_mem+8], {%nt_f1_mem, %nt_f2_mem};
CHECK-NEXT: @%p1 add.u32 %nt_cur_mem, %nt_cur_mem, 1;
CHECK-NEXT: @%p1 ld.global.v2.u32
CHECK: @%nt_ok_sched st.global.v2.b64 [%nt_ptr_sched], {%nt_f0_sched, %nt_f1_sched};
CHECK: and.pred %nt_count_go, %p1, %nt_on;
CHECK-NEXT: @%nt_count_go st.global.u32 [%nt_cnt_mem], %nt_cur_mem;
CHECK-NEXT: mov.pred %nt_exit_warp, %p1;
CHECK-NEXT: and.pred %nt_exit_warp, %nt_exit_warp, %nt_lead_warp;
CHECK-NEXT: and.pred %nt_count_go, %nt_exit_warp, %nt_on;
CHECK-NEXT: @%nt_count_go st.global.u32 [%nt_cnt_sched], %nt_cur_sched;
CHECK-NEXT: @%p1 ret;
CHECK: @%nt_on st.global.u32 [%nt_cnt_mem], %nt_cur_mem;
CHECK-NEXT: and.pred %nt_count_go, %nt_lead_warp, %nt_on;
CHECK-NEXT: @%nt_count_go st.global.u32 [%nt_cnt_sched], %nt_cur_sched;
CHECK-NEXT: ret;
""")


def test_buffer_addressing():
    out, ctx = run(default_pipeline().passes)
    filecheck(out, """
CHECK-LABEL: .entry k(
CHECK-NEXT: .param .u64 k_p0,
CHECK-NEXT: .param .u64 k__nt_buf_mem,
CHECK-NEXT: .param .u64 k__nt_buf_sched
CHECK: .reg .b64 {{.*}}%nt_p_total{{[,;]}}
CHECK: .reg .pred %p<2>;
CHECK: mov.b64 %nt_p_total, 0;
CHECK: mad.lo.u32 %nt_tlin, %nt_tid_z, %nt_ntid_y, %nt_tid_y;
CHECK: and.b32 %nt_lane, %nt_tlin, 31;
CHECK-NEXT: setp.eq.u32 %nt_lead_warp, %nt_lane, 0;
CHECK: ld.param.u64 %nt_buf_mem, [k__nt_buf_mem];
CHECK-NEXT: cvt.u32.u64 %nt_gate_tag, %nt_buf_mem;
CHECK-NEXT: and.b32 %nt_gate_tag, %nt_gate_tag, 1;
CHECK-NEXT: setp.ne.u32 %nt_gated, %nt_gate_tag, 0;
CHECK-NEXT: and.b64 %nt_buf_mem, %nt_buf_mem, -2;
CHECK-NEXT: cvta.to.global.u64 %nt_buf_mem, %nt_buf_mem;
CHECK-NEXT: mov.u32 %nt_gate, 0;
CHECK-NEXT: @%nt_gated ld.global.u32 %nt_gate, [%nt_buf_mem+-8];
CHECK-NEXT: setp.eq.u32 %nt_on, %nt_gate, 0;
CHECK-NEXT: mad.lo.u64 %nt_cnt_mem, %nt_unit_thread, 4, %nt_buf_mem;
CHECK-NEXT: mov.u32 %nt_cur_mem, 0;
CHECK-NEXT: mad.lo.u64 %nt_rec_mem, %nt_units_thread, 4, 15;
CHECK-NEXT: and.b64 %nt_rec_mem, %nt_rec_mem, -16;
CHECK-NEXT: add.u64 %nt_rec_mem, %nt_rec_mem, %nt_buf_mem;
CHECK-NEXT: mad.lo.u64 %nt_rec_mem, %nt_unit_thread, 64, %nt_rec_mem;
CHECK: shr.u32 %nt_warp, %nt_tlin, 5;
CHECK: ld.param.u64 %nt_buf_sched, [k__nt_buf_sched];
CHECK-NEXT: cvta.to.global.u64 %nt_buf_sched, %nt_buf_sched;
CHECK: mov.u64 %nt_p_t0, %clock64;
CHECK-NEXT: ld.param.u64 %rd1, [k_p0];
""")
    info = ctx.info()["k"]
    assert [p["name"] for p in info["params"]] == ["k__nt_buf_mem", "k__nt_buf_sched"]
    assert info["original_params"] == 1
    if HAVE_PTXAS:
        ptxas(out)


def test_counting_variant():
    """The real kernel writes its count-sized map into the launch's ring (passes/ring.py); the counting
    variant, still built for code of the old protocol, keeps its cursors and counts."""
    probes = PROBES.replace('datamodel = "thread:16:4"', 'datamodel = "thread:16:count"')
    out, ctx = run(default_pipeline().passes, probes=probes)
    filecheck(out, """
CHECK-LABEL: .entry k(
CHECK: .param .u64 k__nt_buf_mem,
CHECK-NEXT: .param .u32 k__nt_cap_mem,
CHECK: ld.param.u32 %nt_cap_mem, [k__nt_cap_mem];
CHECK: vote.sync.ballot.b32 %nt_ring_ballot, %nt_ring_go, %nt_ring_mask;
CHECK: @%nt_ring_lead atom.global.add.u64 %nt_ring_slot, [%nt_buf_mem], %nt_ring_wide;
CHECK: setp.lt.and.u64 %nt_ok_mem, %nt_ring_slot, %nt_ring_cap, %nt_ring_go;
CHECK-NOT: [%nt_cnt_mem]
CHECK-LABEL: .entry k__nt_count(
CHECK: .param .u32 k__nt_cap_mem,
CHECK-NOT: st.global.b64
CHECK-NOT: st.global.u32 [%rd2], %r4;
CHECK: @%p1 add.u32 %nt_cur_mem, %nt_cur_mem, 1;
CHECK: @%nt_on st.global.u32 [%nt_cnt_mem], %nt_cur_mem;
""")
    assert ctx.info()["k"]["count_kernel"] == "k__nt_count"
    assert "k__nt_count" not in ctx.info()
    if HAVE_PTXAS:
        ptxas(out)


def test_pruning_keeps_what_the_entry_uses():
    out, _ = run(default_pipeline().passes, kernel="other")
    assert ".entry other" in out and ".entry k(" not in out
    assert "table[16]" in out and "unused" not in out and "helper" not in out
    text = KERNEL.replace("\tadd.u32 %r4, %r2, %r3;", "\tcall.uni (%r4), helper, (%r2);")
    out, _ = run([Pruning()], probes=PROBES, kernel="k", text=text.replace("(%r4)", "(param0)").replace("(%r2)", "(param1)"))
    assert ") helper(" in out and ".entry other" not in out and "table" not in out


def test_verifier_pass_catches_a_pass_that_drops_an_original():
    class DropFirst:
        name = "drop-first"
        requires = ()

        def run(self, module, ctx):
            body = module.function("k").body
            first = next(i for i, s in enumerate(body) if isinstance(s, Instruction) and s.origin is None)
            del body[first]

    pm = default_pipeline().insert_before("verify", DropFirst())
    with pytest.raises(InstrumentError, match="original instructions were changed"):
        run(pm.passes)


def test_requires_is_enforced_and_bugs_name_the_pass():
    with pytest.raises(PassFailed, match="requires match-tracepoints"):
        run([RegisterVirtualization()])

    class Broken:
        name = "broken"
        requires = ()

        def run(self, module, ctx):
            raise ZeroDivisionError("oops")

    with pytest.raises(PassFailed, match="pass 'broken' failed: ZeroDivisionError: oops"):
        run([Broken()])


def test_custom_pass_and_print_after():
    class CountLoads:
        name = "count-loads"
        requires = ("match-tracepoints",)
        seen = []

        def run(self, module, ctx):
            self.seen.append(len(ctx.kernels["k"].sites))

    pm = default_pipeline().insert_after("match-tracepoints", CountLoads())
    pm.print_after = frozenset({"resolve-operands"})
    module = parse_module(KERNEL)
    pm.run(module, Context(parse_probes(PROBES), "k"))
    assert CountLoads.seen == [6]
    assert pm.dump[0][0] == "resolve-operands" and "SAVE.u64" in pm.dump[0][1]


def test_site_without_helper_is_skipped_and_reported():
    probes = '[p]\nposition = "ld"\ndatamodel = "thread:8:4"\nbefore = "SAVE.u64 {ADDR};"\n'
    _, ctx = run(default_pipeline().passes, probes=probes)
    (skip,) = ctx.info()["k"]["skipped"]
    assert skip["instruction"] == "ld.param.u64" and "parameter-space" in skip["reason"]


def test_counting_variant_leaves_program_memory_alone():
    text = KERNEL.replace("\tadd.u32 %r4, %r2, %r3;", "\tatom.global.add.u32 %r4, [%rd2], %r3;\n\tred.global.add.u32 [%rd2], 1;\n\tst.shared.u32 [%r1], %r4;")
    probes = PROBES.replace('datamodel = "thread:16:4"', 'datamodel = "thread:16:count"')
    out, _ = run(default_pipeline().passes, probes=probes, text=text)
    original, counting = out.split(".entry k__nt_count(")
    assert "\tatom.global.add.u32 %r4, [%rd2], %r3;" in original and "red.global.add.u32" in original  # as written
    assert "ld.global.u32 \t%r4, [%rd2];" in counting
    assert "atom.global" not in counting and "red.global" not in counting
    assert "\tst.shared.u32 [%r1], %r4;" in counting  # shared memory is the kernel's own: kept, as written
    assert "st.global.u32 \t[%rd2], %r4;" not in counting
    if HAVE_PTXAS:
        ptxas(out)


def test_verify_pass_rechecks_a_probe_file_edited_after_loading():
    from neutrino.errors import ProbeError
    from neutrino.isa.ptx import parse_statements

    probes = parse_probes(PROBES, "p.toml")
    assert probes.verified
    probes.probes[0].before.statements = parse_statements("bra $L1;")
    probes.verified = False  # a file changed by hand after verification must be verified again
    with pytest.raises(ProbeError, match="branches are not allowed in probes"):
        PassManager(default_pipeline().passes).run(parse_module(KERNEL), Context(probes, "k"))
