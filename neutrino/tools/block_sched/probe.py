"""block_sched: when each warp starts, how long it runs, and on which SM.

One record per warp: start (SM clock at kernel entry), elapsed (cycles until
the warp's ret/exit) and cuid (the SM it ran on). Analysis:
neutrino/tools/block_sched/analysis.py (per-SM timeline, gaps, tail, imbalance).
"""

from neutrino import Map, probe
import neutrino.language as nl

# One summary line per kernel when the program ends (after harvesting, never on the launch path).
analyze_hook = "exit_hook.py"


@Map(level="warp", type="array", size=16, cap=1)
class block_sched:
    start: nl.u64
    elapsed: nl.u32
    cuid: nl.u32


start: nl.u64 = 0
# The SM is read at entry, with the start clock it belongs to: its read's latency then overlaps the
# warp's body instead of lengthening the exit, which ends the kernel in a tiny one (issue 24).
sm: nl.u32 = 0


@probe(pos="kernel", level="warp", before=True)
def warp_start():
    start = nl.clock()
    sm = nl.cuid()


@probe(pos="kernel", level="warp", after=True)
def warp_end():
    elapsed = nl.clock() - start
    block_sched.save(start, elapsed, sm)
