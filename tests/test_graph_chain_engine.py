"""The chain's engine variant (`instrument(..., graph_chain=True)`, neutrino/passes/graph_chain.py) and its host side
without the driver (neutrino/runtime/cudagraphs/chain.py); spec/runtime.md, "The chain".

The variant's own code (the head load and the advance) is run line by line by benchmarks/graph_chain_sim.py's
interpreter on host memory for a graph of 3 probed nodes, with the host's advance and a modelled poller: every
launch's slot published once, with the tag of its launch; a full ring drops and counts, and nothing waits."""

from __future__ import annotations

import ctypes as C
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.errors import InstrumentError
from neutrino.runtime.cudagraphs import chain
from neutrino.toolbox import load_probe_argument

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from graph_chain_sim import Interp  # noqa: E402

CORPUS = Path("/work/shared/corpus/ptx")
PTXAS = shutil.which("ptxas")

GUARDED_EXIT = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_a)
{
\t.reg .pred %p<2>;
\t.reg .b32 %r<3>;
\tmov.u32 %r1, %tid.x;
\tsetp.gt.u32 %p1, %r1, 5;
\t@%p1 ret;
\tret;
}
"""
FUNC_EXIT = """.version 8.0
.target sm_90
.address_size 64
.func quit()
{
\texit;
}
.visible .entry k(.param .u64 k_a)
{
\tcall quit, ();
\tret;
}
"""


def vadd_text() -> str:
    from probe_cost import VADD as path  # (the benchmarks' Triton vector add)

    return path.read_text()


def chain_ptx(text: str, tool: str = "block_sched", late: bool = False) -> str:
    return instrument(text, load_probe_argument(tool, None), graph_chain=True, late_head=late).ptx


# --- the variant's code -----------------------------------------------------------------------------------------

def test_the_variant_loads_the_head_where_the_gate_was_and_advances_before_the_exit():
    plain = instrument(vadd_text(), load_probe_argument("block_sched", None)).ptx
    ours = chain_ptx(vadd_text())
    assert "ch_" not in plain and "+-8]" in plain  # the ordinary variant: the gate's load, nothing of the chain
    assert "+-8]" not in ours  # no gate word: the head's cur is the gate
    assert re.search(r"@%nt_gated ld\.global\.v2\.u64\s+\{%nt_ch_cur, %nt_ch_adv\}, \[%nt_buf_block_sched\];", ours)
    assert re.search(r"setp\.ne\.u64\s+%nt_on, %nt_buf_block_sched, 0;", ours)
    body = ours[ours.index("%nt_L_chain_done0:"):]
    assert re.match(r"%nt_L_chain_done0:\s+ret;", body)  # the advance right before the exit, after the probe's code
    assert ours.count("%nt_L_chain_done") == 3  # one exit: its skip, its prime path's fall-through, its label


def test_other_maps_are_offsets_from_the_slot():
    """`lines` has 3 maps: the 2nd and 3rd buffers are the slot + their parameter when tagged."""
    ours = chain_ptx(vadd_text(), "lines")
    adds = re.findall(r"@%nt_gated add\.u64\s+(%nt_buf_\w+), \1, %nt_buf_lines_blocks;", ours)
    assert sorted(adds) == ["%nt_buf_lines_time", "%nt_buf_lines_total"]
    assert len(re.findall(r"@!%nt_gated cvta\.to\.global\.u64", ours)) == 2  # untagged: absolute, as ever


def test_a_guarded_exit_advances_only_where_the_thread_leaves():
    ours = chain_ptx(GUARDED_EXIT)
    assert re.search(r"and\.pred\s+%nt_ch_at, %nt_ch_go, %p1;\s+@!%nt_ch_at bra\s+%nt_L_chain_done0;", ours)
    assert "%nt_L_chain_done1:" in ours  # the unguarded ret's own copy
    assert ours.count("\tret;") + ours.count("ret;\n") >= 2


def test_refusals():
    with pytest.raises(InstrumentError, match=r"\.func quit has an exit"):
        chain_ptx(FUNC_EXIT)
    from neutrino.isa.gcn.target import GCN

    with pytest.raises(InstrumentError, match="only PTX"):
        instrument("", load_probe_argument("block_sched", None), isa=GCN, graph_chain=True)


CASES = [("triton/" + p.name, tool) for p in sorted((CORPUS / "triton").glob("*.ptx"))[:3]
         for tool in ("block_sched", "gmem_bytes")] + [
    ("nvcc/gemm.sm90.ptx", "block_sched"), ("nvcc/reduce.sm90.ptx", "lines"), ("nvcc/stencil.sm90.ptx", "gmem_bytes"),
    ("inductor/triton_per_fused_native_layer_norm_0.sm90a.ptx", "block_sched")]


@pytest.mark.skipif(PTXAS is None or not CORPUS.is_dir(), reason="ptxas or the corpus missing")
@pytest.mark.parametrize("name,tool", CASES)
def test_ptxas_takes_the_variant(tmp_path, name, tool):
    ptx = tmp_path / "k.ptx"
    ptx.write_text(chain_ptx((CORPUS / name).read_text(), tool))
    done = subprocess.run([PTXAS, "-arch=sm_90a", "-v", str(ptx), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "bytes spill stores" not in done.stderr or re.search(r"\b0 bytes spill stores", done.stderr), done.stderr


@pytest.mark.skipif(PTXAS is None or not CORPUS.is_dir(), reason="ptxas or the corpus missing")
@pytest.mark.parametrize("name,tool", CASES)
def test_ptxas_takes_the_late_head_option(tmp_path, name, tool):
    ptx = tmp_path / "k.ptx"
    ptx.write_text(chain_ptx((CORPUS / name).read_text(), tool, late=True))
    done = subprocess.run([PTXAS, "-arch=sm_90a", "-v", str(ptx), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "bytes spill stores" not in done.stderr or re.search(r"\b0 bytes spill stores", done.stderr), done.stderr


# --- the late_head option: the head's words consumed where the probe needs them (issue 24) ---------------------

def test_late_head_keeps_the_heads_words_out_of_the_entry():
    ours, late = chain_ptx(vadd_text()), chain_ptx(vadd_text(), late=True)
    select = "@%nt_gated mov.u64 \t%nt_buf_block_sched, %nt_ch_cur;"
    assert select in ours and select not in late  # the pointers keep the head's address at entry
    # thread 0 of block 0 alone tests adv, behind a branch around the advanced head's loads
    assert re.search(r"@!%nt_ch_go bra \t%nt_L_chain_head;\s+setp\.ne\.u64 \t%nt_ch_go, %nt_ch_adv, 0;\s+"
                     r"(@%nt_ch_go ld\.relaxed\.gpu\.global[^\n]+\s+){4}%nt_L_chain_head:", late)
    # the head loaded from a per-lane address that is its own (lanemask_lt & lanemask_eq is 0 in every lane)
    assert re.search(r"mov\.u32 \t(%nt_ch_lane), %lanemask_lt;\s+mov\.u32 \t(%nt_ch_zero), %lanemask_eq;\s+"
                     r"and\.b32 \t\1, \1, \2;\s+cvt\.u64\.u32 \t%nt_ch_d, \1;\s+add\.u64 \t%nt_ch_d, %nt_ch_d, "
                     r"%nt_buf_block_sched;\s+@%nt_gated ld\.global\.v2\.u64 \t\{%nt_ch_cur, %nt_ch_adv\}, \[%nt_ch_d\];", late)
    # before the exit's probe code (its clock read): every pointer moved by (cur - head) when tagged, then the gate
    rebase = re.search(r"mov\.u64 \t%nt_ch_d, 0;\s+@%nt_gated sub\.u64 \t%nt_ch_d, %nt_ch_cur, %nt_buf_block_sched;\s+"
                       r"((?:add\.u64 \t(%nt_\w+), \2, %nt_ch_d;\s+)+)setp\.ne\.u64 \t%nt_on, %nt_buf_block_sched, 0;\s+"
                       r"mov\.u64 \t%nt_p__d0, %clock64;", late)
    assert rebase
    assert sorted(re.findall(r"add\.u64 \t(%nt_\w+),", rebase.group(1))) == [
        "%nt_buf_block_sched", "%nt_cnt_block_sched", "%nt_rec_block_sched"]
    assert late.count("\tsetp.ne.u64 \t%nt_on,") == 1  # (not at entry any more)
    assert chain_ptx(vadd_text(), late=False) == ours  # an option: the variant's default output unchanged


def test_late_head_moves_a_pointer_its_prologue_moved_from_its_own_copy_of_the_head():
    """gmem_bytes's sum map: its buffer is moved to this SM's row at entry, so the head's address is kept aside
    (ch_base) to take (cur - head) from, and moved too (a second rebase adds 0)."""
    late = chain_ptx(vadd_text(), "gmem_bytes", late=True)
    assert re.search(r"mov\.u64 \t%nt_ch_base, %nt_buf_gmem_bytes;", late)
    assert re.search(r"@%nt_gated sub\.u64 \t%nt_ch_d, %nt_ch_cur, %nt_ch_base;\s+add\.u64 \t%nt_buf_gmem_bytes, "
                     r"%nt_buf_gmem_bytes, %nt_ch_d;\s+add\.u64 \t%nt_ch_base, %nt_ch_base, %nt_ch_d;\s+"
                     r"setp\.ne\.u64 \t%nt_on, %nt_ch_base, 0;", late)


def test_late_head_keeps_the_entry_form_where_probe_code_reads_the_pointers_before_the_exit():
    """`lines` counts in the body (its maps' pointers read there): no rebase, the buffer set at entry as ever;
    only thread 0 of block 0's branch."""
    late = chain_ptx(vadd_text(), "lines", late=True)
    assert "@%nt_gated mov.u64 \t%nt_buf_lines_blocks, %nt_ch_cur;" in late
    assert "%nt_ch_d" not in late and "%nt_L_chain_head:" in late


def test_late_head_rebases_only_pointers_that_are_the_buffer_plus_an_offset():
    from neutrino.passes.build import insn
    from neutrino.passes.graph_chain import _rebased

    def code(*lines):
        return [insn(op, *ops, origin="t", guard=g) for op, ops, g in lines]

    other_map = code(("cvta.to.global.u64", ("%b2", "%b2"), "!%g"), ("add.u64", ("%b2", "%b2", "%b"), "%g"),
                     ("mad.lo.u64", ("%c", "%u", 4, "%b2"), None), ("mov.u32", ("%n", 0), None))
    assert _rebased(other_map, 0, "%b", "%g") == {"%b", "%b2", "%c"}
    for bad in [("shl.b64", ("%x", "%b", 1), None), ("add.u64", ("%x", "%b", "%b"), None),  # scaled
                ("mad.lo.u64", ("%x", "%b", 4, "%u"), None), ("and.b64", ("%x", "%b", -16), None),  # scaled, masked
                ("add.u64", ("%x", "%b", 8), "%p"), ("mov.u64", ("%b", 0), None),  # another predicate, overwritten
                ("add.u32", ("%x", "%b", 8), None)]:  # (not 64-bit)
        assert _rebased(code(bad), 0, "%b", "%g") is None, bad


def _late_probe_target(drop: str | None) -> tuple[int, int, int]:
    """(where the probe's first map points after the late form's head load and rebase, the head's cur, the head's
    address) for node 0 of a chain of three."""
    g = chain_of_three(16, late=True, drop=drop)
    regs = {"%nt_buf_block_sched": g.heads[0], "%nt_gated": 1, "%nt_tlin": 0, "%nt_blin": 0}
    for sec in (g.load, g.rebase):
        Interp(sec, regs).run()
    return regs["%nt_buf_block_sched"], g.head(0)[0], g.heads[0]


def test_late_head_the_rebase_points_the_probe_at_the_slot_and_its_loss_is_seen():
    target, cur, head = _late_probe_target(None)
    assert target == cur and cur not in (0, head)
    target, cur, head = _late_probe_target("sub.u64 \t%nt_ch_d")  # (the probe would write the head itself)
    assert target == head != cur


@pytest.mark.skipif(PTXAS is None, reason="ptxas missing")
def test_an_old_module_is_raised_to_what_the_head_code_needs(tmp_path):
    """ld/st.relaxed.gpu need PTX 6.0 and sm_70 (formats.ENGINE_REQUIREMENTS): an sm_52, .version 5.0 module is
    raised (the ordinary variant keeps its target), and ptxas takes it."""
    text = next(ROOT.joinpath("tests").rglob("sm52_v50.ptx")).read_text()
    assert ".target sm_52" in instrument(text, load_probe_argument("block_sched", None)).ptx
    ours = chain_ptx(text)
    assert ".target sm_70" in ours and ".version 6.0" in ours
    ptx = tmp_path / "k.ptx"
    ptx.write_text(ours)
    done = subprocess.run([PTXAS, "-arch=sm_75", str(ptx), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(PTXAS is None, reason="ptxas missing")
def test_ptxas_takes_a_guarded_exit(tmp_path):
    ptx = tmp_path / "k.ptx"
    ptx.write_text(chain_ptx(GUARDED_EXIT))
    done = subprocess.run([PTXAS, "-arch=sm_90a", str(ptx), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


# --- who advances whom ------------------------------------------------------------------------------------------

def test_advancers_of_a_chain_of_three():
    got = chain.choose_advancers([0, 1, 2], [(0, 1), (1, 2)], [0, 1, 2])
    assert got == {0: chain.Advancer(1, False), 1: chain.Advancer(2, False), 2: chain.Advancer(0, True)}


def test_advancers_across_unprobed_nodes_and_branches():
    # probed a → x (the program's) → b: b advances a, a advances b in the next replay
    assert chain.choose_advancers(["a", "x", "b"], [("a", "x"), ("x", "b")], "ab") == {
        "a": chain.Advancer("b", False), "b": chain.Advancer("a", True)}
    # a → b, a → c, b → c: b's only candidate is c, so a takes b (augmenting: c was a's nearest but one)
    got = chain.choose_advancers(list("abc"), [("a", "b"), ("a", "c"), ("b", "c")], "abc")
    assert got == {"a": chain.Advancer("b", False), "b": chain.Advancer("c", False), "c": chain.Advancer("a", True)}
    # x → a, a → b, a → c (unprobed x): b and c are sinks whose only probed ancestor is a: no matching
    assert chain.choose_advancers(list("xabc"), [("x", "a"), ("a", "b"), ("a", "c")], "abc") is None


def test_no_chain_for_one_node_joins_or_a_programmatic_only_path():
    assert chain.choose_advancers([0], [], [0]) is None
    assert chain.choose_advancers([0, 1, 2], [(0, 2), (1, 2)], [0, 1, 2]) is None  # two probed sources join
    assert chain.choose_advancers([0, 1], [], [0, 1]) is None  # (no edge given: no path)
    with pytest.raises(ValueError, match="cycle"):
        chain.choose_advancers([0, 1], [(0, 1), (1, 0)], [0, 1])


def test_programmatic_edges_order_an_advancer_after_the_blocks_end():
    """Only the path's first edge must start its target after every block of the advanced node has ended: an
    ordinary edge, or a programmatic one from the programmatic port of a kernel that never triggers early; any
    later edge starts its target no earlier than its source began."""
    from neutrino.runtime.driver import PROGRAMMATIC_EDGE

    after_end, after_start = PROGRAMMATIC_EDGE | 1, PROGRAMMATIC_EDGE | 2
    chained = {0: chain.Advancer(1, False), 1: chain.Advancer(0, True)}
    assert chain.choose_advancers([0, "x", 1], [(0, "x", after_end), ("x", 1, 0)], [0, 1]) == chained
    assert chain.choose_advancers([0, "x", 1], [(0, "x", 0), ("x", 1, after_start)], [0, 1]) == chained
    assert chain.choose_advancers([0, "x", 1], [(0, "x", after_start), ("x", 1, 0)], [0, 1]) is None
    assert chain.choose_advancers([0, "x", 1], [(0, "x", after_end), ("x", 1, 0)], [0, 1], triggers_early=[0]) is None
    # a second path with an ordinary first edge is enough
    assert chain.choose_advancers([0, "x", 1], [(0, "x", after_start), ("x", 1, 0), (0, 1, 0)], [0, 1]) == chained


def test_slot_runs_do_not_wrap():
    assert chain.slot_runs(0, 0, 8) == []
    assert chain.slot_runs(5, 11, 8) == [(5, 3), (0, 3)]
    assert chain.slot_runs(8, 16, 8) == [(0, 8)]
    with pytest.raises(ValueError, match="ring's 8 slots"):
        chain.slot_runs(0, 9, 8)


def test_host_advance_known_answers():
    ring, stride = 0x10000, 0x100
    h = chain.initial_head(ring, 8, stride, adv=0, primed=True)
    h[chain.WRITTEN // 8] = 3
    h2, tag = chain.host_advance(h)  # slot 3 was written: published, slot 4 next for launch 5
    assert (chain.written(h2), h2[chain.CUR // 8], tag) == (4, ring + 4 * stride, (ring + 5 * stride - 16, 5))
    assert not h2[chain.DROPPED // 8] & chain.PRIMED  # the next device advance only primes
    assert chain.host_advance(h2) == (h2, None)
    h[chain.WRITTEN // 8], h[chain.DRAINED // 8] = 8, 1  # 9 published, 1 drained: full
    h3, tag = chain.host_advance(h)
    assert (chain.written(h3), h3[chain.CUR // 8], tag) == (9, 0, None)
    h3[chain.DROPPED // 8] |= chain.PRIMED
    h4, _ = chain.host_advance(h3)  # it wrote nowhere: dropped
    assert (chain.written(h4), chain.dropped(h4)) == (9, 1)
    with pytest.raises(ValueError, match="power of 2"):
        chain.initial_head(ring, 6, stride, 0, True)


# --- the protocol, the engine's code interpreted ----------------------------------------------------------------

def _sections(ptx: str) -> tuple[list[str], list[str]]:
    lines = ptx.splitlines()
    start = next(i for i, ln in enumerate(lines) if "mov.u64 \t%nt_ch_cur, 0;" in ln)
    end = next(i for i, ln in enumerate(lines) if "%nt_ch_t6, [" in ln)
    a = next(i for i, ln in enumerate(lines) if "@!%nt_ch_go bra" in ln)
    b = next(i for i, ln in enumerate(lines) if ln.startswith("%nt_L_chain_done0:"))
    return lines[start:end + 1], lines[a:b + 1]


def _late_sections(ptx: str) -> tuple[list[str], list[str], list[str]]:
    """The late_head option's: the head load (to its branch's label), the rebase before the exit's probe code, and
    the advance."""
    lines = ptx.splitlines()
    start = next(i for i, ln in enumerate(lines) if "mov.u64 \t%nt_ch_cur, 0;" in ln)
    end = next(i for i, ln in enumerate(lines) if ln.startswith("%nt_L_chain_head:"))
    a = next(i for i, ln in enumerate(lines) if "mov.u64 \t%nt_ch_d, 0;" in ln)
    b = next(i for i, ln in enumerate(lines) if "setp.ne.u64 \t%nt_on, %nt_buf_block_sched, 0;" in ln)
    c = next(i for i, ln in enumerate(lines) if "@!%nt_ch_go bra \t%nt_L_chain_done0;" in ln)
    d = next(i for i, ln in enumerate(lines) if ln.startswith("%nt_L_chain_done0:"))
    return lines[start:end + 1], lines[a:b + 1], lines[c:d + 1]


class Graph:
    """Probed nodes in topological order on host memory: heads, rings, the probe modelled as writing its launch's
    true number (the test's count) into its slot; the poller as spec/runtime.md says. `late`: the engine's
    late_head option (its rebase run before the probe, as the exit's probe code runs it); `drop`: lines of the
    variant's code left out (a broken variant the checks must catch)."""

    SPAN = 48

    def __init__(self, n: int, k: int, advancers: dict, late: bool = False, drop: str | None = None):
        self.rebase: list[str] = []
        if late:
            self.load, self.rebase, self.adv = (
                [ln for ln in sec if drop is None or drop not in ln] for sec in _late_sections(chain_ptx(vadd_text(), late=True)))
        else:
            self.load, self.adv = _sections(chain_ptx(vadd_text()))
        self.n, self.k, self.stride = n, k, chain.slot_stride(self.SPAN)
        self.mem = [(C.c_ubyte * (chain.HEAD_BYTES * n + k * self.stride * n + 256))()]
        base = (C.addressof(self.mem[0]) + 255) // 256 * 256
        self.heads = [base + chain.HEAD_BYTES * i for i in range(n)]
        self.rings = [base + chain.HEAD_BYTES * n + k * self.stride * i for i in range(n)]
        self.by = {a.node: p for p, a in advancers.items()}  # advancer → advanced
        self.sinks = [i for i in range(n) if advancers[i].next_replay]
        self.launches = [0] * n  # the truth: launches made per node
        self.frames: list[list[int]] = [[] for _ in range(n)]  # what the poller drained: each frame's tag
        self.drained = [0] * n
        for i in range(n):
            adv = self.heads[self.by[i]] if i in self.by else 0
            self.write_head(i, chain.initial_head(self.rings[i], k, self.stride, adv, not advancers[i].next_replay))
            C.c_uint64.from_address(self.rings[i] + self.stride - chain.TAG_BYTES).value = 1

    def head(self, i: int) -> list[int]:
        return chain.unpack(C.string_at(self.heads[i], 64))

    def write_head(self, i: int, words: list[int]) -> None:
        C.memmove(self.heads[i], chain.pack(words), 64)

    def replay(self) -> None:
        for i in range(self.n):  # (nodes in topological order, each completing before the next starts)
            regs = {"%nt_buf_block_sched": self.heads[i], "%nt_gated": 1, "%nt_tlin": 0, "%nt_blin": 0}
            for sec in (self.load, self.rebase):
                Interp(sec, regs).run()
            self.launches[i] += 1
            if regs.get("%nt_on"):  # the probe: every thread's stores, modelled by the launch's number
                C.memmove(regs["%nt_buf_block_sched"], self.launches[i].to_bytes(8, "little") * (self.SPAN // 8),
                          self.SPAN)
            Interp(self.adv, regs).run()

    def poll(self) -> None:
        for i in range(self.n):
            h = self.head(i)
            for first, count in chain.slot_runs(self.drained[i], chain.written(h), self.k):
                for s in range(first, first + count):
                    at = self.rings[i] + s * self.stride
                    raw = C.string_at(at, self.stride)
                    launch, tag = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[-16:-8], "little")
                    assert raw[:self.SPAN] == launch.to_bytes(8, "little") * (self.SPAN // 8), f"node {i}: torn slot"
                    assert tag == launch, f"node {i} slot {s}: tag {tag}, written by launch {launch}"
                    self.frames[i].append(tag)
                    C.memset(at, 0, self.stride)
                self.drained[i] += count
            C.c_uint64.from_address(self.heads[i] + chain.DRAINED).value = self.drained[i]  # (word 6 only)

    def host_final(self) -> None:
        """The host's advance of the probed sinks (advanced by an ancestor), the context synchronised."""
        for i in self.sinks:  # (a node advanced in its own replay has nothing left to publish)
            words, tag = chain.host_advance(self.head(i))
            if tag:
                C.c_uint64.from_address(tag[0]).value = tag[1]
            self.write_head(i, words)


def chain_of_three(k: int, late: bool = False, drop: str | None = None) -> Graph:
    return Graph(3, k, chain.choose_advancers([0, 1, 2], [(0, 1), (1, 2)], [0, 1, 2]), late, drop)


@pytest.mark.parametrize("late", [False, True])
def test_a_thousand_replays_give_a_thousand_frames_per_node(late):
    g = chain_of_three(16, late)
    for r in range(1000):
        g.replay()
        if r % 4 == 3:
            g.poll()
    g.host_final()
    g.poll()
    for i in range(3):
        h = g.head(i)
        assert (chain.written(h), chain.dropped(h)) == (1000, 0)
        assert g.frames[i] == list(range(1, 1001))


@pytest.mark.parametrize("late", [False, True])
def test_a_full_ring_drops_counts_and_resumes(late):
    g = chain_of_three(8, late)
    for _ in range(40):  # nobody drains: 8 written, 32 dropped, no wait anywhere
        g.replay()
    g.host_final()
    assert [(chain.written(g.head(i)), chain.dropped(g.head(i))) for i in range(3)] == [(8, 32)] * 3
    g.poll()
    assert g.frames == [list(range(1, 9))] * 3
    for _ in range(20):  # drained: the next launches write again, tagged with their own numbers
        g.replay()
        g.poll()
    g.host_final()
    g.poll()
    for i in range(3):
        h = g.head(i)
        assert chain.written(h) + chain.dropped(h) == 60
        assert g.frames[i][:8] == list(range(1, 9)) and g.frames[i][8:] == sorted(set(g.frames[i][8:]))
        assert all(t > 40 for t in g.frames[i][8:]) and g.frames[i][-1] == 60


def test_the_hosts_advance_mid_run_publishes_nothing_twice():
    g = chain_of_three(16)
    for _ in range(5):
        g.replay()
    g.host_final()  # (as at a teardown: the sink's 5th launch published now)
    g.poll()
    for _ in range(5):
        g.replay()
        g.poll()
    g.host_final()
    g.poll()
    assert g.frames == [list(range(1, 11))] * 3


def test_the_benchmarks_dry_run_of_the_engines_kernel_is_exact():
    """benchmarks/graph_chain.py's engine row (the kernel the GPU command times) on its model of the GPU: 8 nodes,
    every slot's result and tag exact; a drained 8-slot ring and a full one counted exactly."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "graph_chain.py"), "--simulate", "--rounds", "1",
                           "--warmup-rounds", "0", "--replays", "20", "--slots", "32", "--drain-replays", "40",
                           "--drain-slots", "8", "--only", "from the engine"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [ln for ln in done.stdout.splitlines() if ln.startswith("| chain from the engine")]
    assert len(rows) == 2 and all(r.rstrip(" |").endswith("ok") for r in rows), done.stdout  # (and late_head's)
    drained = [ln for ln in done.stdout.splitlines() if ln.startswith("drained run, chain_engine")]
    assert len(drained) == 4 and all(ln.endswith(": ok") for ln in drained), done.stdout


# --- the host's side on the fake driver: chain.ChainRings (memory, the poller's pass, the host's last advance) -----

class FakeChain:
    """A graph 0 → x → 1 → 2 (x the program's kernel, 0-2 probed) on tests/fakedriver.py: ChainRings makes the heads and
    rings with the fake's calls; a replay runs each probed node's chain code (the engine's, interpreted) and its
    probe, modelled as writing its launch's number all over its maps."""

    SPANS = [48, 304, 16]  # (a slot of 256 bytes, one of 512, one of 256)

    def __init__(self, k: int):
        from fakedriver import FakeDriver

        self.drv = FakeDriver()
        self.advancers = chain.choose_advancers([0, "x", 1, 2], [(0, "x"), ("x", 1), (1, 2)], [0, 1, 2])
        self.load, self.adv = _sections(chain_ptx(vadd_text()))
        self.rings = chain.ChainRings(self.drv, self.SPANS, self.advancers, k, self.drv.stream_create_nonblocking())
        self.launches = [0, 0, 0]
        self.got: list[list[int]] = [[], [], []]

    def replay(self) -> None:
        for i in range(3):
            param = self.rings.head_param(i)
            regs = {"%nt_buf_block_sched": param & ~1, "%nt_gated": param & 1, "%nt_tlin": 0, "%nt_blin": 0}
            Interp(self.load, regs).run()
            self.launches[i] += 1
            if regs.get("%nt_on"):
                span = self.SPANS[i]
                C.memmove(regs["%nt_buf_block_sched"], self.launches[i].to_bytes(8, "little") * (span // 8), span)
            Interp(self.adv, regs).run()

    def on_frame(self, node: int, launch: int, maps: bytes) -> None:
        assert maps == launch.to_bytes(8, "little") * (self.SPANS[node] // 8), f"node {node}: launch {launch}'s frame"
        self.got[node].append(launch)


def test_fake_driver_advancers_and_memory():
    f = FakeChain(8)
    assert f.advancers == {0: chain.Advancer(1, False), 1: chain.Advancer(2, False), 2: chain.Advancer(0, True)}
    heads = f.rings.read_heads()
    assert [h[chain.ADV // 8] for h in heads] == [f.rings.head(2), f.rings.head(0), f.rings.head(1)]
    assert [bool(h[chain.DROPPED // 8] & chain.PRIMED) for h in heads] == [True, True, False]  # node 2: a sink
    assert [h[chain.CUR // 8] for h in heads] == f.rings.rings
    assert all(p & 1 and p & ~1 == f.rings.head(i) for i, p in enumerate(map(f.rings.head_param, range(3))))
    allocations = f.drv.allocations
    f.rings.free()
    assert f.drv.frees >= allocations  # (heads, 3 rings, the pinned staging)


def test_fake_driver_a_thousand_replays_give_a_thousand_frames_per_node():
    f = FakeChain(16)
    for r in range(1000):
        f.replay()
        if r % 5 == 4:
            f.rings.poll(f.on_frame)
    f.rings.finish(f.on_frame)  # (the fake has nothing in flight: the context is as synchronised)
    assert f.got == [list(range(1, 1001))] * 3
    assert f.rings.counts() == [(1000, 0, 1000)] * 3


def test_fake_driver_a_full_ring_counts_drops_and_never_waits():
    f = FakeChain(8)
    for _ in range(40):  # the host never polls: every launch after the 8th writes nowhere
        f.replay()
    f.rings.finish(f.on_frame)
    assert f.rings.counts() == [(8, 32, 8)] * 3
    assert f.got == [list(range(1, 9))] * 3
    for _ in range(10):  # room again: launch 41 still writes nowhere (its slot was picked while the ring was
        f.replay()       # full), the next ones are written, with their own numbers
        f.rings.poll(f.on_frame)
    f.rings.finish(f.on_frame)
    assert f.rings.counts() == [(17, 33, 17)] * 3
    assert f.got == [list(range(1, 9)) + list(range(42, 51))] * 3


# --- the runtime's build of the variant (KernelBuilder.chain_variant) --------------------------------------------

def test_the_runtime_builds_caches_and_loads_the_variant_once(tmp_path):
    from test_runtime_core import finish, load_saxpy, make_runtime

    rt, drv, _ = make_runtime(tmp_path, cache_root=tmp_path / "cache")
    load_saxpy(rt)
    rec = rt.functions[0x200]
    pk = rt.kernels.get(rec, 0xC0, 0x200)
    calls, modules = rt.kernels.engine.calls, len(pk.modules)
    func = rt.kernels.chain_variant(pk, rec)
    assert rt.kernels.chain_variant(pk, rec) == func and pk.chain_func == func  # built once
    assert rt.kernels.engine.calls == calls + 1 and len(pk.modules) == modules + 1  # its module unloads with pk's
    module, name = drv.functions[func]
    assert name == "saxpy4" and module != drv.functions[pk.func][0]
    text = drv.modules[module].decode(errors="replace")
    assert "%nt_ch_adv" in text and "ch_" not in drv.modules[drv.functions[pk.func][0]].decode(errors="replace")
    finish(rt)
    # a second run finds it in the code cache: no engine call for it
    rt2, drv2, _ = make_runtime(tmp_path / "again", cache_root=tmp_path / "cache")
    load_saxpy(rt2)
    rec2 = rt2.functions[0x200]
    pk2 = rt2.kernels.get(rec2, 0xC0, 0x200)
    calls = rt2.kernels.engine.calls
    rt2.kernels.chain_variant(pk2, rec2)
    assert rt2.kernels.engine.calls == calls
    finish(rt2)


def test_a_refused_variant_is_a_fallback(tmp_path):
    from neutrino.runtime.instrument.probed import Fallback
    from test_runtime_core import finish, load_saxpy, make_runtime

    rt, _, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    rec = rt.functions[0x200]
    pk = rt.kernels.get(rec, 0xC0, 0x200)
    rt.kernels.engine.fail = InstrumentError("graph_chain: .func quit has an exit")
    with pytest.raises(Fallback, match="graph_chain variant: .*quit"):
        rt.kernels.chain_variant(pk, rec)
    assert pk.chain_func is None
    finish(rt)
