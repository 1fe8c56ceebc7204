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


@probe(pos=(
       "ld.global:ld.volatile.global:ld.weak.global:ld.relaxed.cta.global:ld.relaxed.cluster.global:ld.relaxed.gpu.global:ld.relaxed.sys.global:ld.acquire.cta.global:ld.acquire.cluster.global:ld.acquire.gpu.global:ld.acquire.sys.global:ld.mmio.relaxed.sys.global:ldu.global:"
       "st.global:st.volatile.global:st.weak.global:st.relaxed.cta.global:st.relaxed.cluster.global:st.relaxed.gpu.global:st.relaxed.sys.global:st.release.cta.global:st.release.cluster.global:st.release.gpu.global:st.release.sys.global:st.mmio.relaxed.sys.global:"
       "atom.global:atom.cta.global:atom.cluster.global:atom.gpu.global:atom.sys.global:atom.relaxed.global:atom.acquire.global:atom.release.global:atom.acq_rel.global:atom.relaxed.cta.global:atom.relaxed.cluster.global:atom.relaxed.gpu.global:atom.relaxed.sys.global:atom.acquire.cta.global:atom.acquire.cluster.global:atom.acquire.gpu.global:atom.acquire.sys.global:atom.release.cta.global:atom.release.cluster.global:atom.release.gpu.global:atom.release.sys.global:atom.acq_rel.cta.global:atom.acq_rel.cluster.global:atom.acq_rel.gpu.global:atom.acq_rel.sys.global:"
       "red.global:red.cta.global:red.cluster.global:red.gpu.global:red.sys.global:red.relaxed.global:red.release.global:red.relaxed.cta.global:red.relaxed.cluster.global:red.relaxed.gpu.global:red.relaxed.sys.global:red.release.cta.global:red.release.cluster.global:red.release.gpu.global:red.release.sys.global:"
       "cp.async.ca.shared.global:cp.async.ca.shared::cta.global:cp.async.cg.shared.global:cp.async.cg.shared::cta.global:"
       "cp.async.bulk.shared::cluster.global:cp.async.bulk.shared::cta.global:cp.async.bulk.global.shared::cta:cp.reduce.async.bulk.global.shared::cta:"
       "cp.async.bulk.tensor.1d.shared::cluster.global:cp.async.bulk.tensor.1d.shared::cta.global:cp.async.bulk.tensor.1d.global.shared::cta:cp.async.bulk.tensor.2d.shared::cluster.global:cp.async.bulk.tensor.2d.shared::cta.global:cp.async.bulk.tensor.2d.global.shared::cta:cp.async.bulk.tensor.3d.shared::cluster.global:cp.async.bulk.tensor.3d.shared::cta.global:cp.async.bulk.tensor.3d.global.shared::cta:cp.async.bulk.tensor.4d.shared::cluster.global:cp.async.bulk.tensor.4d.shared::cta.global:cp.async.bulk.tensor.4d.global.shared::cta:cp.async.bulk.tensor.5d.shared::cluster.global:cp.async.bulk.tensor.5d.shared::cta.global:cp.async.bulk.tensor.5d.global.shared::cta:cp.reduce.async.bulk.tensor.1d.global.shared::cta:cp.reduce.async.bulk.tensor.2d.global.shared::cta:cp.reduce.async.bulk.tensor.3d.global.shared::cta:cp.reduce.async.bulk.tensor.4d.global.shared::cta:cp.reduce.async.bulk.tensor.5d.global.shared::cta:"
       "wmma.load.a.sync.aligned.row.m16n16k16.global:wmma.load.a.sync.aligned.row.m32n8k16.global:wmma.load.a.sync.aligned.row.m8n32k16.global:wmma.load.a.sync.aligned.row.m16n16k8.global:wmma.load.a.sync.aligned.row.m8n8k4.global:wmma.load.a.sync.aligned.row.m8n8k32.global:wmma.load.a.sync.aligned.row.m8n8k128.global:wmma.load.a.sync.aligned.col.m16n16k16.global:wmma.load.a.sync.aligned.col.m32n8k16.global:wmma.load.a.sync.aligned.col.m8n32k16.global:wmma.load.a.sync.aligned.col.m16n16k8.global:wmma.load.a.sync.aligned.col.m8n8k4.global:wmma.load.a.sync.aligned.col.m8n8k32.global:wmma.load.a.sync.aligned.col.m8n8k128.global:"
       "wmma.load.b.sync.aligned.row.m16n16k16.global:wmma.load.b.sync.aligned.row.m32n8k16.global:wmma.load.b.sync.aligned.row.m8n32k16.global:wmma.load.b.sync.aligned.row.m16n16k8.global:wmma.load.b.sync.aligned.row.m8n8k4.global:wmma.load.b.sync.aligned.row.m8n8k32.global:wmma.load.b.sync.aligned.row.m8n8k128.global:wmma.load.b.sync.aligned.col.m16n16k16.global:wmma.load.b.sync.aligned.col.m32n8k16.global:wmma.load.b.sync.aligned.col.m8n32k16.global:wmma.load.b.sync.aligned.col.m16n16k8.global:wmma.load.b.sync.aligned.col.m8n8k4.global:wmma.load.b.sync.aligned.col.m8n8k32.global:wmma.load.b.sync.aligned.col.m8n8k128.global:"
       "wmma.load.c.sync.aligned.row.m16n16k16.global:wmma.load.c.sync.aligned.row.m32n8k16.global:wmma.load.c.sync.aligned.row.m8n32k16.global:wmma.load.c.sync.aligned.row.m16n16k8.global:wmma.load.c.sync.aligned.row.m8n8k4.global:wmma.load.c.sync.aligned.row.m8n8k32.global:wmma.load.c.sync.aligned.row.m8n8k128.global:wmma.load.c.sync.aligned.col.m16n16k16.global:wmma.load.c.sync.aligned.col.m32n8k16.global:wmma.load.c.sync.aligned.col.m8n32k16.global:wmma.load.c.sync.aligned.col.m16n16k8.global:wmma.load.c.sync.aligned.col.m8n8k4.global:wmma.load.c.sync.aligned.col.m8n8k32.global:wmma.load.c.sync.aligned.col.m8n8k128.global:"
       "wmma.store.d.sync.aligned.row.m16n16k16.global:wmma.store.d.sync.aligned.row.m32n8k16.global:wmma.store.d.sync.aligned.row.m8n32k16.global:wmma.store.d.sync.aligned.row.m16n16k8.global:wmma.store.d.sync.aligned.row.m8n8k4.global:wmma.store.d.sync.aligned.row.m8n8k32.global:wmma.store.d.sync.aligned.row.m8n8k128.global:wmma.store.d.sync.aligned.col.m16n16k16.global:wmma.store.d.sync.aligned.col.m32n8k16.global:wmma.store.d.sync.aligned.col.m8n32k16.global:wmma.store.d.sync.aligned.col.m16n16k8.global:wmma.store.d.sync.aligned.col.m8n8k4.global:wmma.store.d.sync.aligned.col.m8n8k32.global:wmma.store.d.sync.aligned.col.m8n8k128.global"
       ), level="thread", before=True)
def count_bytes():
    total += nl.bytes


@probe(pos="kernel", level="thread", after=True)
def save_bytes():
    gmem_bytes_thread.save(total)
