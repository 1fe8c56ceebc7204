"""tensorop: tensor-core instructions (mma, wmma.mma, wgmma.mma_async) executed, per launch.

A per-thread counter is bumped before every `mma*`, `wmma.mma` and
`wgmma.mma_async` instruction the thread executes; when the thread leaves the kernel, the
launch's counters get (summed over the warp on the device, one atomic per
warp): `count`, the per-thread executions (every lane counts the warp-wide
instruction once); `warp_count`, lane 0's count, which is the number of warp
instructions, as these instructions are `.aligned` (all 32 lanes execute
them); `active_warps`, the warps whose lane 0 executed any. Analysis:
neutrino/tools/tensorop/analysis.py. tensorop_thread keeps one record per thread.
"""

from neutrino import Map, probe
import neutrino.language as nl


@Map(type="sum")
class tensorop:
    count: nl.u64
    warp_count: nl.u64
    active_warps: nl.u64


count: nl.u64 = 0


# The semantics table's tensor-core class: its rows marked tensor_core (spec/probe-toml.md, "Selectors").
@probe(pos="#tensor_core", level="thread", before=True)
def count_mma():
    count += 1


@probe(pos="kernel", level="thread", after=True)
def save_count():
    warp_count: nl.u64 = 0
    active: nl.u64 = 0
    if nl.laneid() == 0:
        warp_count = count
        if count != 0:
            active = 1
    tensorop.add(count, warp_count, active)
