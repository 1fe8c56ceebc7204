"""lines_blocktime: `lines` with its clock at basic-block starts instead of line-region starts.

Instructions as `lines` (`lines_blocks`, exact). Time: each thread reads `%clock64` at every basic
block's first unguarded instruction (where `lines_blocks` counts), not at every line region, and
credits the 256-cycle ticks since the previous block OPENED to that block:
`(previous block + 1) * 4 + min(ticks, 4) - 1` in `block_time`, its ticks past 4 to
`lines_total.excess`; then it counts the block and reads the clock again, which opens the block:
the probe's own time lies between the two reads and goes to `lines_total.probe`, not to the
block that ran before (as `lines`: docs/lines.md "Probe time left out"). The analysis (neutrino/tools/lines/analysis.py) shares each block's ticks
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
    probe: nl.u64


last_tick: nl.u32 = 0
first_tick: nl.u32 = 0
current_block: nl.u32 = 0
excess_ticks: nl.u64 = 0
probe_ticks: nl.u32 = 0
closed_tick: nl.u32 = 0  # when the last block was closed (its probe's first clock read)


@probe(pos="kernel", level="thread", before=True)
def start_ticks():
    last_tick = nl.u32(nl.clock() >> TICK_BITS)
    first_tick = last_tick
    closed_tick = last_tick


@probe(pos="block", level="thread", before=True)
def count_and_tick_block():
    now: nl.u32 = nl.u32(nl.clock() >> TICK_BITS)  # closes the block that ran: before any record
    ticks: nl.u32 = now - last_tick
    if ticks != 0:
        if ticks > 4:
            excess_ticks += nl.u64(ticks - 4)
            ticks = 4
        block_time.record(current_block * 4 + ticks - 1)
    probe_ticks += last_tick - closed_tick  # the previous probe's own time: from its first read to its last
    closed_tick = now
    current_block = nl.u32(nl.block + 1)
    lines_blocks.record(nl.block)
    last_tick = nl.u32(nl.clock() >> TICK_BITS)  # opens this block: after the records


@probe(pos="kernel", level="thread", after=True)
def end_ticks():
    now: nl.u32 = nl.u32(nl.clock() >> TICK_BITS)
    ticks: nl.u32 = now - last_tick
    if ticks != 0:
        if ticks > 4:
            excess_ticks += nl.u64(ticks - 4)
            ticks = 4
        block_time.record(current_block * 4 + ticks - 1)
    probe_ticks += last_tick - closed_tick
    lines_total.add(nl.u64(now - first_tick), excess_ticks, nl.u64(probe_ticks))
