"""lines_blocktime: `lines` with its clock at basic-block starts instead of line-region starts.

Instructions as `lines` (`lines_blocks`, exact). Time: each thread reads `%clock64` once per basic
block (at its first unguarded instruction, where `lines_blocks` already counts), not at every
line region, and credits the 256-cycle ticks since the previous block start to that block:
`(previous block + 1) * 4 + min(ticks, 4) - 1` in `block_time`, its ticks past 4 to
`lines_total.excess`. The analysis (neutrino/tools/lines/analysis.py) shares each block's ticks
among the block's lines by their SASS instructions (spec/tools.md "lines"). No probe sits between
the lines of one block: on Triton's pipelined loops the time ranking agrees with Nsight Compute's
far better than `lines`' (docs/lines.md "Time at block boundaries"); where a loop has many small
blocks it costs more than `lines`.
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
