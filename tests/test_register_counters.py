"""Hist buckets counted in registers inside loops (neutrino/passes/register_counters.py).

The exit flush is run on simulated warps (the straight-line simulator of tests/test_uniform_saves.py):
it adds, per bucket, the sum of the leaving lanes' counters, as the per-site adds it replaces did.
Which sites are taken is checked on loop spans; the per-block offsets of the lines tools on the
corpus are checked in tests/test_uniform_saves.py (misplaced_block_counts), with ptxas.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from neutrino.engine import instrument
from neutrino.isa.ptx import ir, parse_module
from neutrino.maps import Buckets
from neutrino.passes import lower_save, register_counters
from neutrino.passes.state import KernelState
from neutrino.probefile import MapSpec, parse_probes
from neutrino.toolbox import load_probes

from helpers import HAVE_PTXAS, ptxas
from test_uniform_saves import block_count_offsets, run_warp

LOOP = Path(__file__).parent / "data" / "lines" / "loop.ptx"
TOP32 = 2**32 - 1


def flush_code(sm: int, classes: list[list[int]], guard):
    """The exit flush of one counter per class, each standing for the sites of those buckets of map `h`."""
    spec = MapSpec.aggregate("h", "thread", "hist", [], Buckets.parse("linear:0:254:1"))
    state = KernelState(ir.Function("k", ""), prefix="%nt_")
    lowerer = lower_save._Lowerer(state, SimpleNamespace(maps={"h": spec}), sm)
    counters = tuple(register_counters.Counter(state.temp(f"rc{k}", "b32"), tuple(("h", b) for b in buckets))
                     for k, buckets in enumerate(classes))
    return register_counters.exit_code(lowerer, counters, guard)


@pytest.mark.parametrize("sm", [20, 52, 75, 80, 90])
def test_exit_flush_adds_the_leaving_lanes_counts_at_each_bucket(sm):
    rng = random.Random(sm)
    classes = [[3], [7, 254]]  # the second counter stands for two sites (one class of equal counts)
    for guard in (None, ir.Guard(ir.Register("%g")), ir.Guard(ir.Register("%g"), True)):
        code = flush_code(sm, classes, guard)
        assert not any(i.opcode.base in ("ld", "st") for i in code)
        for trial in range(30):
            active = sorted(rng.sample(range(32), 32 if trial % 3 == 0 else rng.randint(1, 32)))
            flags = [rng.randint(0, 1) for _ in range(32)]
            counts = [[rng.choice([0, 1, 37, 65535, 65536, rng.randint(0, TOP32), TOP32]) for _ in range(32)] for _ in classes]
            leaving = [k for k in active if guard is None or flags[k] != guard.negated]
            registers = {"%g": flags, **{f"%nt_rc{c}": counts[c] for c in range(len(classes))}}
            want = {8 * b: sum(counts[c][k] for k in leaving) for c, buckets in enumerate(classes) for b in buckets}
            got = run_warp(code, active, registers)
            assert {o: n for o, n in got.items() if n} == {o: n for o, n in want.items() if n}, (sm, guard, active)
            assert run_warp(code, active, dict(registers, **{"%nt_on": [0] * 32})) == {}  # the gate


@pytest.mark.parametrize("sm", [80, 90])
def test_a_counter_zero_in_every_lane_adds_nothing(sm):
    """From sm_80 a counter's sum is taken only where some lane counted: the total of the counter before
    it must not reach its buckets (a mutation that drops the ballot's condition is caught)."""
    code = flush_code(sm, [[3], [7, 254]], None)
    registers = {"%nt_rc0": [5] * 32, "%nt_rc1": [0] * 32}
    assert run_warp(code, list(range(32)), registers) == {24: 160}
    # mutation: the adds no longer wait for the ballot (rc_go = lead): rc0's stale total reaches rc1's buckets
    broken = [lower_save.insn("mov.pred", i.operands[0], i.operands[2], origin=None)
              if i.opcode.text == "and.pred" and "rc_go" in str(i.operands[0]) else i for i in code]
    assert run_warp(broken, list(range(32)), registers) == {24: 160, 56: 160, 2032: 160}


def test_a_flush_that_drops_the_high_half_is_caught():
    """Mutation: counters summed as 16-bit values lose counts past 65535; the check above sees it."""
    code = flush_code(90, [[5]], None)
    broken = [i for i in code if not (i.opcode.text == "shr.u32" and "agg_b" in str(i.operands[0]))]
    registers = {"%nt_rc0": [70000] * 32}
    assert run_warp(code, list(range(32)), registers) == {40: 32 * 70000}
    assert run_warp(broken, list(range(32)), registers) != {40: 32 * 70000}


def test_loop_depths_follow_backward_branches():
    module = parse_module(LOOP.read_text())
    body = module.entries()[0].body
    depths = register_counters.loop_depths(body)
    insns = ir.instructions(body)
    inside = [i.opcode.text for i in insns if id(i) in depths]
    # the loop's block, from its label to the backward branch, and nothing else
    assert inside == ["add.s32", "mul.lo.s32", "xor.b32", "add.s32", "setp.lt.s32", "bra"]
    assert set(depths.values()) == {1}


NESTED = """.version 8.0
.target sm_80
.address_size 64
.visible .entry nest(.param .u32 n)
{
.reg .pred %p<4>; .reg .b32 %r<8>;
ld.param.u32 %r1, [n];
mov.u32 %r2, 0;
OUTER:
mov.u32 %r3, 0;
INNER:
add.u32 %r3, %r3, 1;
setp.lt.u32 %p1, %r3, %r1;
@%p1 bra INNER;
add.u32 %r2, %r2, 1;
setp.lt.u32 %p2, %r2, %r1;
@%p2 bra OUTER;
ret;
}
"""


def flushed_offsets(ptx: str) -> dict[str, set[int]]:
    """counter → the lines_blocks offsets its flushes add to (straight-line flush code, as written)."""
    out: dict[str, set[int]] = {}
    start = r"(?:cvt\.u64\.u32 \t%nt_rc_value, |and\.b32 \t%nt_agg_a, |selp\.b32 \t%nt_rc_leaving, (?:0, )?)"
    for counter, code in re.findall(start + r"(%nt_rc\d+)\b(.*?)(?=" + start + r"%nt_rc\d|ret;|exit;)", ptx, re.S):
        out.setdefault(counter, set()).update(int(o or 0) for o in re.findall(
            r"(?:atom\.shared\.add\.u32 \t%nt_stg_old, |red\.global\.add\.u64 \t)\[%nt_buf_lines_blocks(?:\+(\d+))?\]", code))
    return out


def test_nesting_orders_the_counters_and_the_cap_holds(monkeypatch):
    probes = load_probes("lines_light")
    ptx = instrument(NESTED, probes, source="nest.ptx").ptx
    # blocks: entry (once), OUTER (depth 1), INNER (depth 2), the outer latch (depth 1), the exit block;
    # OUTER and its latch run equally often (passes/flow_classes.py): one counter, flushed into both buckets
    assert re.findall(r"add\.u32 \t(%nt_rc\d+), \1, 1;", ptx) == ["%nt_rc1", "%nt_rc0"]
    assert flushed_offsets(ptx) == {"%nt_rc0": {24}, "%nt_rc1": {16, 32}}
    assert ptx.count("red.global.add.u64 \t[%nt_hoff_lines_blocks") == 2  # the blocks outside loops (global rows)
    assert block_count_offsets(ptx) == [8, 16, 24, 32, 40]
    monkeypatch.setattr(register_counters, "MAX_REGISTER_COUNTERS", 1)
    capped = instrument(NESTED, probes, source="nest.ptx").ptx
    assert re.findall(r"add\.u32 \t(%nt_rc\d+), \1, 1;", capped) == ["%nt_rc0"]  # the inner loop's block
    assert capped.count("red.global.add.u64 \t[%nt_hoff_lines_blocks") == 4
    if HAVE_PTXAS:
        ptxas(ptx)
        ptxas(capped)


def test_maps_with_values_known_only_at_run_time_keep_their_adds():
    """A hist map that some SAVE adds to with a run-time value: none of its buckets goes to registers."""
    probe = '''
[map.h]
type = "hist"
buckets = "linear:0:64:1"
stage = "block"
[probe.blocks]
position = "block"
before = """SAVE [ h ] {BLOCK};"""
[probe.clock]
position = "kernel"
before = """.reg .b64 %c; mov.u64 %c, %clock64; SAVE [ h ] {%c};"""
'''
    ptx = instrument(NESTED, parse_probes(probe, "p.toml"), source="nest.ptx").ptx
    assert "%nt_rc" not in ptx


def test_a_func_with_exit_keeps_the_adds():
    text = NESTED.replace(".visible .entry nest", ".func leave()\n{\nexit;\n}\n.visible .entry nest")
    assert "%nt_rc" not in instrument(text, load_probes("lines_light"), source="nest.ptx").ptx


def test_guarded_exit_flushes_under_its_guard():
    text = NESTED.replace("@%p2 bra OUTER;\nret;", "@%p2 bra OUTER;\nsetp.eq.u32 %p3, %r2, 7;\n@%p3 exit;\nret;")
    ptx = instrument(text, load_probes("lines_light"), source="nest.ptx").ptx
    # each exit flushes the two counters (one stands for two buckets: its warp sum is taken once, sm_80);
    # at the guarded exit the lanes that stay add 0
    assert len(re.findall(r"selp\.b32 \t%nt_rc_leaving, %nt_rc\d+, 0, %p3;", ptx)) == 2
    assert len(re.findall(r"and\.b32 \t%nt_agg_a, %nt_rc\d+, 65535;", ptx)) == 2
    assert ptx.count("and.b32 \t%nt_agg_a, %nt_rc_leaving, 65535;") == 2
    if HAVE_PTXAS:
        ptxas(ptx)


def test_kernel_description_and_probe_cost_name_the_register_counters():
    from neutrino.runtime.instrument.probe_cost import instruction_counts

    text = (Path(__file__).parent / "data" / "lines" / "nested.ptx").read_text()
    info = instrument(text, load_probes("lines_light"), source="nested.ptx").kernels["nestk"]
    # the outer loop's three blocks and the inner one; the outer header and the block after the inner
    # loop run equally often (the guarded exit comes after both): three counters
    assert info["instructions"]["register_counters"] == 3
    assert instruction_counts(info)["register_counters"] == 3
    plain = instrument(LOOP.read_text().replace("@%p1 bra", "// "), load_probes("lines_light"), source="l.ptx")
    assert "register_counters" not in plain.kernels["loopk"]["instructions"]  # no loop: none
