"""Which probe instructions keep the site's predicate (issue 24: a warp-level probe's code in tiny kernels).

A warp/block-level snippet's register arithmetic runs in every lane when only probes of its level read what it
writes (resolve.leader_free); scratch registers (written before read in every snippet) are written without the
site's predicate at all (resolve.scratch_registers); every SAVE, store and atomic keeps the leader and the
matched instruction's guard. A guarded 64-bit accumulation is a select and an add. What the GPU records with
them is checked in tests/gpu (test_gpu_tools.py, test_gpu_gmem_exact.py, test_gpu_aggregation.py).
"""

from __future__ import annotations

import re

import pytest

from neutrino.engine import instrument
from neutrino.isa.ptx import ir, parse_module
from neutrino.passes.resolve import leader_free, read_registers, register_readers, scratch_registers, site_free
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probe_argument

from helpers import CORPUS, HAVE_PTXAS, ptxas

KERNEL = """.version 8.0
.target sm_80
.address_size 64
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
"""

# A warp-level probe whose start time no other level reads, and a thread-level one that reads a warp-level register.
WARP_PROBES = '''
[map.w]
level = "warp"
cap = 1
fields = ["start:u64", "elapsed:u32", "sm:u32"]

[map.t]
level = "thread"
cap = 1
fields = ["seen:u64"]

[probe.begin]
position = "kernel"
level = "warp"
before = """
.reg .b64 %start, %shared;
mov.u64 %start, %clock64;
mov.u64 %shared, 7;
"""

[probe.end]
position = "kernel"
level = "warp"
after = """
.reg .b64 %now, %d;
.reg .b32 %e, %sm;
mov.u64 %now, %clock64;
sub.u64 %d, %now, %start;
cvt.u32.u64 %e, %d;
mov.u32 %sm, %smid;
SAVE [ w ] {%start, %e, %sm};
"""

[probe.thread_reader]
position = "kernel"
level = "thread"
after = "SAVE [ t ] {%shared};"
'''


def lines_of(ptx: str, pattern: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if re.search(pattern, line)]


def test_warp_level_arithmetic_runs_in_every_lane_and_its_stores_on_the_leader():
    ptx = instrument(KERNEL, parse_probes(WARP_PROBES, "p.toml")).ptx
    assert lines_of(ptx, r"mov\.u64\s+%nt_p_start, %clock64") == ["mov.u64 \t%nt_p_start, %clock64;"]
    for pattern in (r"sub\.u64\s+%nt_p_d,", r"cvt\.u32\.u64\s+%nt_p_e,", r"mov\.u32\s+%nt_p_sm, %smid"):
        found = lines_of(ptx, pattern)
        assert found and all(not line.startswith("@") for line in found), found
    # read by a thread-level probe (in every lane): the warp-level write stays on the leader
    assert lines_of(ptx, r"mov\.u64\s+%nt_p_shared, 7") == ["@%nt_lead_warp mov.u64 \t%nt_p_shared, 7;"]
    # the records: the bounds check ANDs the leader in, so only it stores; its exit count too
    assert lines_of(ptx, r"and\.pred\s+%nt_ok_w, %nt_ok_w, %nt_lead_warp")
    stores = lines_of(ptx, r"st\.global.*\[%nt_ptr_w")
    assert stores and all(line.startswith("@%nt_ok_w ") for line in stores)
    assert lines_of(ptx, r"and\.pred\s+%nt_count_go, %nt_lead_warp, %nt_on")
    if HAVE_PTXAS:
        ptxas(ptx)


def test_a_save_guarded_by_the_leader_alone_counts_its_cursor_in_every_lane():
    ptx = instrument(KERNEL, parse_probes(WARP_PROBES, "p.toml")).ptx
    bumps = lines_of(ptx, r"add\.u32\s+%nt_cur_w, %nt_cur_w, 1")
    # before `@%p1 ret` the SAVE is guarded by %p1 and the leader (exec): the count keeps both; before `ret`, by the
    # leader alone: unguarded
    assert bumps == ["@%nt_exec add.u32 \t%nt_cur_w, %nt_cur_w, 1;", "add.u32 \t%nt_cur_w, %nt_cur_w, 1;"]
    # at an instruction whose own guard is not always true, likewise
    probes = WARP_PROBES.replace('[probe.end]\nposition = "kernel"', '[probe.end]\nposition = "ld.global"')
    ptx = instrument(KERNEL, parse_probes(probes, "p.toml")).ptx
    assert lines_of(ptx, r"add\.u32\s+%nt_cur_w, %nt_cur_w, 1") == ["@%nt_exec add.u32 \t%nt_cur_w, %nt_cur_w, 1;"]
    assert lines_of(ptx, r"and\.pred\s+%nt_exec, %nt_exec, %nt_lead_warp")


def test_registers_read_by_another_level_keep_the_leader():
    probes = parse_probes(WARP_PROBES, "p.toml")
    readers = register_readers(probes.probes)
    assert readers["%start"] == {"warp"} and readers["%shared"] == {"thread"}
    begin = next(p for p in probes.probes if p.name == "begin")
    start, shared = ir.instructions(begin.before.statements)
    assert leader_free(start, "warp", readers) and not leader_free(shared, "warp", readers)
    assert not leader_free(start, "thread", readers)  # thread level has no leader to drop


def test_a_block_level_register_read_at_warp_level_keeps_the_leader():
    probes = parse_probes(WARP_PROBES.replace('[probe.begin]\nposition = "kernel"\nlevel = "warp"',
                                              '[probe.begin]\nposition = "kernel"\nlevel = "block"'), "p.toml")
    readers = register_readers(probes.probes)
    begin = next(p for p in probes.probes if p.name == "begin")
    start = ir.instructions(begin.before.statements)[0]
    assert readers["%start"] == {"warp"} and not leader_free(start, "block", readers)


SCRATCH_PROBES = '''
[map.traffic]
type = "sum"
fields = ["bytes:u64"]

[probe.count]
position = "ld.global:st.global"
before = """
.reg .b64 %total, %tmp, %late;
.reg .pred %big;
cvt.u64.u32 %tmp, BYTES;
setp.gt.u64 %big, %tmp, 4;
@%big mov.u64 %late, 1;
add.u64 %total, %total, %tmp;
@%big add.u64 %total, %total, 1;
"""

[probe.save]
position = "kernel"
after = "SAVE [ traffic ] {%total};"
'''


def test_scratch_registers_are_the_ones_every_snippet_writes_first():
    probes = parse_probes(SCRATCH_PROBES, "p.toml").probes
    scratch = scratch_registers(probes)
    # %tmp and %big: written first, unguarded; %total: read first (an accumulator); %late: first written under a guard
    assert scratch == {"%tmp", "%big"}
    cvt, setp, late, add, _ = ir.instructions(probes[0].before.statements)
    assert site_free(cvt, scratch) and site_free(setp, scratch)
    assert not site_free(late, scratch) and not site_free(add, scratch)
    assert read_registers(late) == {"%big"} and read_registers(add) == {"%total", "%tmp"}


def test_a_scratch_register_read_first_elsewhere_is_not_scratch():
    text = SCRATCH_PROBES.replace('after = "SAVE [ traffic ] {%total};"',
                                  'after = """\nadd.u64 %total, %total, %tmp;\nSAVE [ traffic ] {%total};\n"""')
    assert scratch_registers(parse_probes(text, "p.toml").probes) == {"%big"}


def test_guarded_sites_write_scratch_unguarded_and_accumulate_by_a_select():
    ptx = instrument(KERNEL, parse_probes(SCRATCH_PROBES, "p.toml")).ptx
    cvts = lines_of(ptx, r"cvt\.u64\.u32\s+%nt_p_tmp,")
    assert len(cvts) == 2 and all(not line.startswith("@") for line in cvts)  # ld @%p1, st @!%p1: both unguarded
    # the accumulator keeps the matched instruction's guard, as a select of what it adds
    assert lines_of(ptx, r"selp\.b64\s+%nt_acc,") == ["selp.b64 \t%nt_acc, %nt_p_tmp, 0, %p1;",
                                                      "selp.b64 \t%nt_acc, 0, %nt_p_tmp, %p1;"]
    assert len(lines_of(ptx, r"^\s*add\.u64\s+%nt_p_total, %nt_p_total, %nt_acc;")) == 2
    # a register first written under its own guard keeps the site's guard too
    assert lines_of(ptx, r"mov\.u64\s+%nt_p_late, 1") == ["@%nt_g mov.u64 \t%nt_p_late, 1;"] * 2
    # an accumulation under a guard of the snippet's own stays a predicated add (with the site's guard folded in)
    assert lines_of(ptx, r"add\.u64\s+%nt_p_total, %nt_p_total, 1") == ["@%nt_g add.u64 \t%nt_p_total, %nt_p_total, 1;"] * 2
    if HAVE_PTXAS:
        ptxas(ptx)


def test_an_unguarded_accumulation_stays_one_add():
    ptx = instrument(KERNEL.replace("@%p1 ld.global", "ld.global").replace("@!%p1 st.global", "st.global"),
                     parse_probes(SCRATCH_PROBES, "p.toml")).ptx
    assert not lines_of(ptx, r"selp\.b64\s+%nt_acc")
    assert len(lines_of(ptx, r"^\s*add\.u64\s+%nt_p_total, %nt_p_total, %nt_p_tmp;")) == 2


def _prologue(ptx: str) -> str:
    return "\n".join(line.strip() for line in ptx.splitlines() if "%nt_" in line)


@pytest.mark.parametrize("reqntid, aligned", [(128, True), (96, False), (None, False)])
def test_records_base_folds_the_alignment_only_when_the_block_makes_it_whole(reqntid, aligned):
    """4 warps a block: the counts (4 bytes a warp) end 16-byte aligned, the records start at blocks * 16; 3 warps
    (12 bytes a block) or an unknown block: rounded up as before."""
    kernel = KERNEL.replace("\n{\n", f"\n.reqntid {reqntid}\n{{\n", 1) if reqntid else KERNEL
    ptx = _prologue(instrument(kernel, load_probe_argument("block_sched", None)).ptx)
    assert ("mad.lo.u64 \t%nt_rec_block_sched, %nt_nblocks, 16, %nt_buf_block_sched;" in ptx) == aligned
    assert ("and.b64 \t%nt_rec_block_sched, %nt_rec_block_sched, -16;" in ptx) == (not aligned)
    assert "mad.lo.u64 \t%nt_rec_block_sched, %nt_unit_warp, 16, %nt_rec_block_sched;" in ptx
    # the block linear index and blocks: 32-bit products where CUDA's grid limits allow (y, z below 2^16)
    assert "mad.lo.u32 \t%nt_zy, %nt_ctaid_z, %nt_nctaid_y, %nt_ctaid_y;" in ptx
    assert "mad.wide.u32 \t%nt_blin, %nt_zy, %nt_nctaid_x, %nt_w64;" in ptx
    assert "mul.wide.u32 \t%nt_nblocks, %nt_yz, %nt_nctaid_x;" in ptx
    assert "mul.lo.u64 \t%nt_blin" not in ptx and "mul.lo.u64 \t%nt_nblocks" not in ptx
    if HAVE_PTXAS:
        ptxas(instrument(kernel, load_probe_argument("block_sched", None)).ptx)


def test_geometry_products_fit_where_they_are_computed():
    """The 32-bit products of the prologue at CUDA's largest grid (x < 2^31, y and z < 2^16) and its last block."""
    gx, gy, gz = 2**31 - 1, 65535, 65535
    cx, cy, cz = gx - 1, gy - 1, gz - 1
    zy, yz = cz * gy + cy, gy * gz
    assert zy < 2**32 and yz < 2**32
    assert zy * gx + cx == gx * gy * gz - 1  # the last block's linear index
    assert yz * gx == gx * gy * gz


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("path", [p for p in CORPUS if p.parent.name == "triton"][:2], ids=lambda p: p.name)
def test_block_sched_on_the_corpus_stores_only_under_the_leader(path):
    ptx = instrument(path.read_text(), load_probe_argument("block_sched", None)).ptx
    module = parse_module(ptx)
    for function in module.entries():
        for insn in ir.instructions(function.body):
            if insn.origin is not None and insn.opcode.base in ("st", "red", "atom"):
                assert insn.guard is not None, f"{function.name}: {insn.opcode} unguarded"
    ptxas(ptx)
