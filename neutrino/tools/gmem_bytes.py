"""gmem_bytes: bytes moved by global loads, stores, atomics and async copies, per launch.

Every matched instruction adds the bytes it moves for this thread (the PTX
semantics table: vector width x element size, or the cp.async copy size) to a
per-thread register; when a thread leaves the kernel its total is added to the
launch's counters, summed over the warp on the device first (a sum map: one
atomic per warp, 16 bytes of result per launch). `active_threads` counts the
threads that moved any byte. Shared-memory traffic is not counted. Analysis:
neutrino/analysis/gmem_bytes.py. gmem_bytes_thread keeps one record per thread.
"""

from neutrino import Map, probe
import neutrino.language as nl


@Map(type="sum")
class gmem_bytes:
    bytes: nl.u64
    active_threads: nl.u64


total: nl.u64 = 0


@probe(pos="ld.global:st.global:atom.global:red.global:cp.async.ca.shared.global:cp.async.cg.shared.global",
       level="thread", before=True)
def count_bytes():
    total += nl.bytes


@probe(pos="kernel", level="thread", after=True)
def save_bytes():
    active: nl.u64 = 0
    if total != 0:
        active = 1
    gmem_bytes.add(total, active)
