"""`lines` with its clock at basic-block starts instead of line-region starts: an experiment of
benchmarks/lines_cost.py (`--block-time`, variant `lines@blocktime`) for a less perturbing time
measure (issue 27; docs/lines.md "Time at block boundaries").

As neutrino/tools/lines/probe.py, but the clock is read once per basic block (at its first
unguarded instruction, where `lines_blocks` already counts), not at every line region: each
thread credits the 256-cycle ticks since the previous block start to that block, as
`(previous block + 1) * 4 + min(ticks, 4) - 1` in `block_time`, and its ticks past 4 to
`lines_total.excess`. The benchmark shares each block's ticks among its lines by their SASS
instructions (lines_cost.block_ticks_to_lines). Not a built-in tool.
"""

from neutrino import Map, probe
import neutrino.language as nl

TICK_BITS = 8


@Map(type="hist", buckets="linear:0:254:1", stage="block")
class lines_blocks:
    """threads that executed each basic block, by BLOCK"""


@Map(type="hist", buckets="linear:0:1022:1", stage="block")
class block_time:
    """clock ticks by (block + 1) * 4 + min(ticks, 4) - 1"""


@Map(type="sum", stage="block")
class lines_total:
    ticks: nl.u64
    excess: nl.u64


last_tick: nl.u32 = 0
first_tick: nl.u32 = 0
current_block: nl.u32 = 0
excess_ticks: nl.u64 = 0


@probe(pos="kernel", level="thread", before=True)
def start_ticks():
    last_tick = nl.u32(nl.clock() >> TICK_BITS)
    first_tick = last_tick


@probe(pos="block", level="thread", before=True)
def count_and_tick_block():
    lines_blocks.record(nl.block)
    now: nl.u32 = nl.u32(nl.clock() >> TICK_BITS)
    ticks: nl.u32 = now - last_tick
    if ticks != 0:
        if ticks > 4:
            excess_ticks += nl.u64(ticks - 4)
            ticks = 4
        block_time.record(current_block * 4 + ticks - 1)
    last_tick = now
    current_block = nl.u32(nl.block + 1)


@probe(pos="kernel", level="thread", after=True)
def end_ticks():
    now: nl.u32 = nl.u32(nl.clock() >> TICK_BITS)
    ticks: nl.u32 = now - last_tick
    if ticks != 0:
        if ticks > 4:
            excess_ticks += nl.u64(ticks - 4)
            ticks = 4
        block_time.record(current_block * 4 + ticks - 1)
    lines_total.add(nl.u64(now - first_tick), excess_ticks)
