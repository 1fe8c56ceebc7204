"""gmem_bytes: bytes moved by global loads, stores, atomics, async copies and wmma tiles, per launch.

Every matched instruction adds the bytes it moves for this thread (the PTX
semantics table, spec/probe-toml.md "Bytes": vector width x element size, cp.async's
src-size at run time, the cp.async.bulk size, a thread's share of a wmma tile)
to a per-thread register; when a thread leaves the kernel its total is added to
the launch's counters, summed over the warp on the device first (a sum map: one
atomic per warp, 16 bytes of result per launch). `active_threads` counts the
threads that moved any byte. The position is two selectors of the semantics
table: every load, store and atomic of global memory, and every async copy from
or to it (spec/probe-toml.md, "Selectors").
Shared-memory traffic, generic-address accesses and prefetches are not counted;
TMA copies are matched and listed as skipped sites (their size is in the tensor
map). Analysis: neutrino/tools/gmem_bytes/analysis.py. gmem_bytes_thread keeps one
record per thread.
"""

from neutrino import Map, probe
import neutrino.language as nl


@Map(type="sum")
class gmem_bytes:
    bytes: nl.u64
    active_threads: nl.u64


total: nl.u64 = 0


@probe(pos="#memory.global:#async_copy.global", level="thread", before=True)
def count_bytes():
    total += nl.bytes


@probe(pos="kernel", level="thread", after=True)
def save_bytes():
    active: nl.u64 = 0
    if total != 0:
        active = 1
    gmem_bytes.add(total, active)
