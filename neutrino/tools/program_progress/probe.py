"""program_progress: sampled clock at branches, showing how far warps get over time.

Every thread counts the branches (`bra`, `brx`: #branch) it executes; at every SAMPLE-th one
it records the SM clock, its branch count so far (`branch`, a progress index)
and its SM. The map has a dynamic cap. Analysis:
neutrino/tools/program_progress/analysis.py (threads of a warp are merged there).
"""

from neutrino import Map, probe
import neutrino.language as nl

SAMPLE = 16  # record one branch in SAMPLE (a power of two)


@Map(level="thread", type="array", size=16, cap="dynamic")
class program_progress:
    clock: nl.u64
    branch: nl.u32
    cuid: nl.u32


branches: nl.u32 = 0


@probe(pos="#branch", level="thread", before=True)
def branch():
    branches += 1
    if branches & (SAMPLE - 1) == 0:
        program_progress.save(nl.clock(), branches, nl.cuid())
