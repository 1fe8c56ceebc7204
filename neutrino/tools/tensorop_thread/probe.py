"""tensorop_thread: tensor-core instructions (mma, wmma.mma, wgmma.mma_async), one record per thread.

A per-thread counter is bumped before every `mma*`, `wmma.mma` and
`wgmma.mma_async` instruction the thread executes (warp-synchronous instructions: every lane
counts its own execution) and saved when the thread leaves the kernel.
Analysis: neutrino/tools/tensorop/analysis.py. The per-thread form of `tensorop`
(which sums on the device).
"""

from neutrino import Map, probe
import neutrino.language as nl


@Map(level="thread", type="array", size=8, cap=1)
class tensorop_thread:
    count: nl.u64


count: nl.u64 = 0


# The semantics table's tensor-core class: its rows marked tensor_core (spec/probe-toml.md, "Selectors").
@probe(pos="#tensor_core", level="thread", before=True)
def count_mma():
    count += 1


@probe(pos="kernel", level="thread", after=True)
def save_count():
    tensorop_thread.save(count)
