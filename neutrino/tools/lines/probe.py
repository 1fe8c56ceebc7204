"""lines: instructions executed and time spent per source line (.loc debug lines), per launch.

Needs `.loc` lines in the PTX (Triton always; nvcc `-lineinfo`). Two hist maps,
keyed by the indices of the kernel's line map (neutrino/isa/ptx/lines.py,
rebuilt by the analysis from the trace's original.ptx):

* `lines_blocks`: at each basic block's first unguarded instruction every thread
  records `BLOCK` (the block's index): the threads that ran each block. The
  analysis multiplies by the instructions of each line in the block: exact
  per-line executed instructions, from one record per block execution.
* `lines_time`: at the start of every line region every thread reads `%clock64` and
  counts how many multiples of 2^TICK_BITS cycles passed since the previous region
  OPENED (`ticks`); when some did, it records `(previous line + 1) * 4 + min(ticks, 4) - 1`.
  Then the anchor's other probes run (the block count), and the region opens with a
  second clock read: the probes' own time lies between the two reads of an anchor and is
  kept apart (`probe_ticks`), not charged to the line that ran before (which is where it
  went before: lines of 1 to 5 instructions were ranked by the probes they precede, not by
  their own code; docs/lines.md "Probe time left out"). Summed over threads, ticks x
  2^TICK_BITS estimates the thread-cycles the kernel's own code spent in each line
  (line 0: before the first region). This is in-kernel sampling at a fixed clock period,
  attributed to the region that was running.
* `lines_total` (a sum map): per thread, the ticks from kernel entry to exit
  (`ticks`, exact), the ticks past 4 of the samples that counted as 4
  (`excess`) and the ticks between the two clock reads of every anchor (`probe`),
  added at exit: the analysis keeps the time total exact (lines + entry + probe) and
  shares `excess` among the lines by their clamped samples.

The clock is kept in u32 ticks (`%clock64 >> TICK_BITS`, truncated; differences taken modulo
2^32): exact for intervals and kernels shorter than 2^32 ticks (2^40 cycles, over 9 minutes
at 2 GHz); 32-bit arithmetic is about a quarter fewer machine instructions per region than
u64 (benchmarks/uniform_saves.py). The probes at every region constrain scheduling: `lines_light` counts only
(block-level probes, no clock). Analysis: neutrino/tools/lines/analysis.py.
"""

from neutrino import Map, probe
import neutrino.language as nl

TICK_BITS = 8  # one tick = 256 cycles (spec/tools.md, lines)


@Map(type="hist", buckets="linear:0:254:1", stage="block")
class lines_blocks:
    """threads that executed each basic block, by BLOCK"""


@Map(type="hist", buckets="linear:0:510:1", stage="block")
class lines_time:
    """clock ticks by (line + 1) * 4 + min(ticks, 4) - 1"""


@Map(type="sum", stage="block")
class lines_total:
    ticks: nl.u64
    excess: nl.u64
    probe: nl.u64


last_tick: nl.u32 = 0
first_tick: nl.u32 = 0
current_line: nl.u32 = 0
excess_ticks: nl.u64 = 0
probe_ticks: nl.u32 = 0
closed_tick: nl.u32 = 0  # when the last region was closed (its anchor's first clock read)


@probe(pos="kernel", level="thread", before=True)
def start_ticks():
    last_tick = nl.u32(nl.clock() >> TICK_BITS)
    first_tick = last_tick
    closed_tick = last_tick


# The probes of one anchor run in this file's order: close the region that ran, count the block,
# open the next region. So the block count's cost, like the record of the time sample, falls
# between the two clock reads (probe time) and not into the line that ran before. The opening
# read is all the open does (the previous anchor's probe time is added up at the next close), so
# no probe work sits in the kernel's own interval.
@probe(pos="line", level="thread", before=True)
def close_region():
    now: nl.u32 = nl.u32(nl.clock() >> TICK_BITS)
    ticks: nl.u32 = now - last_tick
    if ticks != 0:
        if ticks > 4:
            excess_ticks += nl.u64(ticks - 4)
            ticks = 4
        lines_time.record(current_line * 4 + ticks - 1)
    probe_ticks += last_tick - closed_tick
    closed_tick = now
    current_line = nl.u32(nl.line + 1)


@probe(pos="block", level="thread", before=True)
def count_block():
    lines_blocks.record(nl.block)


@probe(pos="line", level="thread", before=True)
def open_region():
    last_tick = nl.u32(nl.clock() >> TICK_BITS)


@probe(pos="kernel", level="thread", after=True)
def end_ticks():
    now: nl.u32 = nl.u32(nl.clock() >> TICK_BITS)
    ticks: nl.u32 = now - last_tick
    if ticks != 0:
        if ticks > 4:
            excess_ticks += nl.u64(ticks - 4)
            ticks = 4
        lines_time.record(current_line * 4 + ticks - 1)
    probe_ticks += last_tick - closed_tick
    lines_total.add(nl.u64(now - first_tick), excess_ticks, nl.u64(probe_ticks))
