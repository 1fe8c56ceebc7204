"""block_sched as main wrote it (the SM read at the warp's exit): benchmarks/probe_tail.py's baseline.

One record per warp: start (SM clock at kernel entry), elapsed (cycles until
the warp's ret/exit) and cuid (the SM it ran on). Analysis:
neutrino/tools/block_sched/analysis.py (per-SM timeline, gaps, tail, imbalance).
"""

from neutrino import Map, probe
import neutrino.language as nl



@Map(level="warp", type="array", size=16, cap=1)
class block_sched:
    start: nl.u64
    elapsed: nl.u32
    cuid: nl.u32


start: nl.u64 = 0


@probe(pos="kernel", level="warp", before=True)
def warp_start():
    start = nl.clock()


@probe(pos="kernel", level="warp", after=True)
def warp_end():
    elapsed = nl.clock() - start
    block_sched.save(start, elapsed, nl.cuid())
