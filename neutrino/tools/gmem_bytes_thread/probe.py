"""gmem_bytes_thread: bytes moved by global loads, stores, atomics and async copies, one record per thread.

Every matched instruction adds the bytes it moves for this thread (the PTX
semantics table: vector width x element size, or the cp.async copy size) to a
per-thread counter; each thread saves its total when it leaves the kernel.
Shared-memory traffic is not counted. Analysis: neutrino/tools/gmem_bytes/analysis.py.

The per-thread form of `gmem_bytes` (which sums on the device): a record per
thread, megabytes per launch, for when the spread over threads matters.
"""

from neutrino import Map, probe
import neutrino.language as nl


@Map(level="thread", type="array", size=8, cap=1)
class gmem_bytes_thread:
    bytes: nl.u64


total: nl.u64 = 0


@probe(pos="#memory.global:#async_copy.global", level="thread", before=True)
def count_bytes():
    total += nl.bytes


@probe(pos="kernel", level="thread", after=True)
def save_bytes():
    gmem_bytes_thread.save(total)
