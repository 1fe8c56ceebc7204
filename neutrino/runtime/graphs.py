"""Probing kernels captured into CUDA graphs, and every replay of them.

One job: when a probed kernel is launched into a stream that is being captured
(`torch.cuda.graphs`, `torch.compile(mode="reduce-overhead")`, any stream
capture), capture the probed kernel instead, with what gets its results out
on every replay:

    memset node (zero the map buffers) → probed kernel node → the program's next nodes
                                                       └→ D2H copy node → host node   (leaves)

The map buffers and the pinned staging frame belong to that graph node. They
are allocated at capture time with the thread's capture mode switched to
relaxed for the allocation (`cuThreadExchangeStreamCaptureMode`), so every
capture mode PyTorch uses (global, its default; thread-local; relaxed) allows
it, and freed when the graph, its clones and every executable graph
instantiated from them are destroyed. The copy and the host node are leaves
(`cuStreamUpdateCaptureDependencies` puts the stream's dependency set back):
the program's later nodes wait for the kernel only, never for our host
function. The host function (`neutrino_graph_host_fn` in shim/graphs.c; a
Python function with the fake drivers of the tests) counts the replay, and
for a replay that `--launches` selects copies the staging frame out and hands
it to the writer; it never calls CUDA. Replays outside the selection cost the
device its memset, kernel and copy, and the host one counter increment.

`cap = "count"` maps are refused inside graphs (a counting run per replay would
need the host between two kernels of the replay): a `fallback` event with
stage `graph`, and the node runs unprobed.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import threading

import attrs

from neutrino import trace as tracefmt
from neutrino.runtime.driver import CAPTURE_MODE_RELAXED, DriverError
from neutrino.runtime.pool import Slot
from neutrino.runtime.probed import Fallback, copy_globals_in, copy_globals_out

# what the shim's graph hooks report (shim/graphs.c, enum graph_event)
G_INSTANTIATE, G_CLONE, G_EXEC_UPDATE, G_GRAPH_DESTROY, G_EXEC_DESTROY, G_ADD_KERNEL_NODE, G_SET_PARAMS = range(7)


@contextlib.contextmanager
def relaxed_capture(drv):
    """This thread may make calls stream capture forbids (allocation, module loads) while
    another capture, or its own, is under way: the documented escape hatch of CUDA."""
    old = drv.exchange_capture_mode(CAPTURE_MODE_RELAXED)
    try:
        yield
    finally:
        drv.exchange_capture_mode(old)


@attrs.define(eq=False)
class GraphNode:
    """One probed kernel node of a captured graph, and the memory it owns."""

    id: int
    group: "GraphGroup"
    kernel: str
    kernel_dir: str
    func: int  # the original function (what the program launched)
    probed_func: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    stream: int
    layouts: tuple
    n_params: int
    header: bytes
    offsets: tuple[int, ...]
    frame_bytes: int
    buffers: list[int] = attrs.Factory(list)
    staging: tuple | None = None  # (address, memoryview) of pinned memory: the frame of one replay
    record: object = None  # the sink's per-node record (host function argument)
    node: int = 0  # the kernel node's CUgraphNode handle
    active: bool = False
    reserved: bool = False  # its bytes are held against the graphs' budget
    keep: object = None  # parameter arrays the driver may read again (fake drivers; set-params rewrites)
    frame: str | None = None

    @property
    def held(self) -> int:
        return sum(lay.size for lay in self.layouts) + self.frame_bytes


@attrs.define(eq=False)
class GraphGroup:
    """A captured graph, with its clones and the executable graphs made from them: they
    share the nodes' buffers, which live until the last of them is destroyed."""

    id: int
    ctx: int
    capture_id: int
    handles: set = attrs.Factory(set)  # CUgraph handles (the captured one, clones)
    execs: set = attrs.Factory(set)
    nodes: list = attrs.Factory(list)

    @property
    def refs(self) -> int:
        return len(self.handles) + len(self.execs)


class GraphProbes:
    """Capture-time probing and the graphs' lifetimes (the shim reports instantiate/destroy)."""

    def __init__(self, drv, trace, sink, budget, enqueuer, attribution=None):
        self.drv, self.trace, self.sink, self.budget, self.enqueuer = drv, trace, sink, budget, enqueuer
        self.attribution = attribution
        self._lock = threading.RLock()
        self._by_graph: dict[int, GraphGroup] = {}
        self._by_exec: dict[int, GraphGroup] = {}
        self._by_capture: dict[int, GraphGroup] = {}
        self._by_node: dict[int, GraphNode] = {}
        self._retired: list[GraphGroup] = []  # unreferenced, not yet freed (the device was busy)
        self._next_group = 1
        self._next_node = 1
        self.nodes_probed = 0
        self.freed_groups = 0
        self._finished: list[dict] = []  # the summary rows of nodes already freed

    # ------------------------------------------------------------ capture
    def capture(self, rec, pk, req, ctx: int, stream: int) -> int:
        """Capture the probed kernel of launch `req` into the graph `stream` is building.

        Raises Fallback while the original could still be captured instead; once the
        probed kernel node is in the graph, never raises (returns 0)."""
        if pk.count_sized:
            raise Fallback("graph", 'cap = "count" maps are not supported inside CUDA graphs (spec/runtime.md)')
        if pk.baseline is not None:
            raise Fallback("graph", "--benchmark does not time launches captured into CUDA graphs")
        if req.extra and not req.params:
            raise Fallback("params", "kernel arguments passed through 'extra' are not supported", permanent=True)
        info = self.drv.stream_capture_info(stream)
        shape = pk.shape(req.grid, req.block)
        node = self._new_node(rec, pk, req, ctx, stream, info, shape)
        if not self.budget.reserve(node.held):
            self._forget_node(node)
            raise Fallback("graph", f"the buffer budget of {self.budget.limit} bytes is held by other graphs' "
                                    "nodes; this node runs unprobed")
        node.reserved = True
        try:
            self._allocate(node, ctx)
        except DriverError as e:
            self._free_node_memory(node)
            self._forget_node(node)
            raise Fallback("graph-alloc", f"{node.held} bytes for a graph node: {e}") from None
        # From here on nodes of ours may be in the graph (a memset captured before a failed
        # launch): the node's memory stays with the graph whatever happens.
        self._capture_kernel(node, pk, req, stream, info.dependencies)
        self._capture_copy_out(node, pk, stream)
        return 0

    def _new_node(self, rec, pk, req, ctx, stream, info, shape) -> GraphNode:
        with self._lock:
            group = self._by_capture.get(info.capture_id)
            if group is None:
                group = GraphGroup(self._next_group, ctx, info.capture_id)
                self._next_group += 1
                self._by_capture[info.capture_id] = group
            if info.graph:
                group.handles.add(info.graph)
                self._by_graph[info.graph] = group
            nid = self._next_node
            self._next_node += 1
        header, offsets = _encode_header(req.grid, req.block, req.shared_bytes, shape.layouts)
        frame = self.attribution.frame() if self.attribution is not None else None
        node = GraphNode(nid, group, pk.name, pk.kernel_dir, req.func, pk.func, req.grid, req.block,
                         req.shared_bytes, stream, shape.layouts, pk.n_params, header, tuple(offsets),
                         shape.frame_bytes, frame=frame)
        with self._lock:
            group.nodes.append(node)
        return node

    def _allocate(self, node: GraphNode, ctx: int) -> None:
        with relaxed_capture(self.drv):
            for lay in node.layouts:
                node.buffers.append(self.drv.mem_alloc_sync(lay.size))
            node.staging = self.drv.host_alloc(node.frame_bytes)

    def _capture_kernel(self, node: GraphNode, pk, req, stream: int, before: tuple[int, ...]) -> None:
        """Memset nodes, then the probed kernel node. A failure before the kernel node: the
        stream's dependencies go back to what they were, so the original can be captured."""
        slots = [Slot(node.group.ctx, lay.size, dev) for lay, dev in zip(node.layouts, node.buffers)]
        params = self.enqueuer.params(pk, req, node.layouts, slots)
        try:
            for lay, dev in zip(node.layouts, node.buffers):
                self.drv.memset_async(dev, lay.zero_bytes, stream)
            copy_globals_in(self.drv, pk.globals, stream)
            rc = self.drv.launch(req.kind, pk.func, req, C.addressof(params))
            if rc != 0:
                raise Fallback("graph", f"capturing the probed kernel failed: {self.drv.error_name(rc)}")
        except BaseException:
            with contextlib.suppress(DriverError):
                self.drv.update_capture_dependencies(stream, before)
            raise
        node.keep = params
        node.active = True

    def _capture_copy_out(self, node: GraphNode, pk, stream: int) -> None:
        """After the kernel node: the copy to pinned memory and the host node, as leaves.
        The kernel is in the graph: a failure here loses this node's results, never the kernel."""
        view = node.staging[1]
        view[: node.frame_bytes] = bytes(node.frame_bytes)  # pinned memory comes uninitialised: no garbage padding
        view[: len(node.header)] = node.header
        with self._lock:
            self.nodes_probed += 1
        try:
            node.node = self.drv.stream_capture_info(stream).dependencies[0]
            copy_globals_out(self.drv, pk.globals, stream)
            main = self.drv.stream_capture_info(stream).dependencies
            with self._lock:
                self._by_node[node.node] = node
            for lay, dev, off in zip(node.layouts, node.buffers, node.offsets):
                self.drv.memcpy_dtoh_async(node.staging[0] + off, dev, lay.size, stream)
            fn, arg, node.record = self.sink.new_record(node)
            self.drv.launch_host_func(stream, fn, arg)
            self.drv.update_capture_dependencies(stream, main)
        except Exception as e:  # noqa: BLE001 - the kernel node stays; its results are lost
            node.active = False
            if node.record is not None:
                self.sink.set_active(node.record, False)
            self.trace.event("result_error", kernel=node.kernel, graph=node.group.id, graph_node=node.id,
                             reason=f"graph copy-out: {type(e).__name__}: {e}")
            return
        self.trace.event("graph_node", kernel=node.kernel, graph=node.group.id, graph_node=node.id,
                         capture_id=node.group.capture_id, grid=list(node.grid), block=list(node.block),
                         stream=hex(node.stream), frame_bytes=node.frame_bytes, buffer_bytes=node.held,
                         frame=node.frame)

    # ------------------------------------------------------------ what the shim reports
    def on_graph_event(self, kind: int, a: int, b: int, c: int = 0, version: int = 2) -> int:
        """A graph API call seen by the shim; returns replacement kernel-node parameters (G_SET_PARAMS) or 0."""
        if kind == G_SET_PARAMS:
            return self.set_params(a, b, c, version)
        with self._lock:
            if kind == G_INSTANTIATE:
                self._add_exec(self._by_graph.get(a), b)
            elif kind == G_CLONE:
                group = self._by_graph.get(a)
                if group is not None:
                    group.handles.add(b)
                    self._by_graph[b] = group
            elif kind == G_EXEC_UPDATE:  # the executable graph now runs the nodes of graph b
                old = self._by_exec.pop(a, None)
                self._add_exec(self._by_graph.get(b), a)
                if old is not None:
                    old.execs.discard(a)
                    self._release(old)
            elif kind == G_GRAPH_DESTROY:
                group = self._by_graph.pop(a, None)
                if group is not None:
                    group.handles.discard(a)
                    self._release(group)
            elif kind == G_EXEC_DESTROY:
                group = self._by_exec.pop(a, None)
                if group is not None:
                    group.execs.discard(a)
                    self._release(group)
        return 0

    def _add_exec(self, group: GraphGroup | None, exe: int) -> None:
        if group is not None:
            group.execs.add(exe)
            self._by_exec[exe] = group

    def unprobed_node(self, kernel: str, reason: str, **fields) -> None:
        """A kernel node of a probed kernel that runs unprobed: one event per node."""
        self.trace.event("graph_unprobed", kernel=kernel, reason=reason, **fields)

    def set_params(self, exe: int, node_handle: int, params_addr: int, version: int) -> int:
        """New parameters for one of our kernel nodes: keep it probed when they launch the same
        kernel with the same shape (our buffers appended again); otherwise let them through and
        stop producing results for the node (one `graph_unprobed` event)."""
        node = self._by_node.get(node_handle)
        if node is None or not params_addr:
            return 0
        struct_type = KernelNodeParamsV2 if version >= 2 else KernelNodeParams
        p = struct_type.from_address(params_addr)
        same = (p.func in (node.func, node.probed_func) and (p.gridDimX, p.gridDimY, p.gridDimZ) == node.grid
                and (p.blockDimX, p.blockDimY, p.blockDimZ) == node.block and not p.extra)
        if not same or not node.active or node.keep is None:
            if node.active:
                node.active = False
                self.sink.set_active(node.record, False)
                self.unprobed_node(node.kernel, "kernel node parameters set to another kernel or launch shape; "
                                   "the node runs as set, unprobed", graph=node.group.id, graph_node=node.id)
            return 0
        n = node.n_params
        if n and p.kernelParams:
            node.keep[:n] = (C.c_void_p * n).from_address(C.cast(p.kernelParams, C.c_void_p).value)
        new = struct_type.from_buffer_copy(p)
        new.func = node.probed_func
        if version >= 2:
            new.kern = None
        new.kernelParams = C.cast(node.keep, C.POINTER(C.c_void_p))
        node.keep._node_params = new  # noqa: SLF001 - alive as long as the node
        return C.addressof(new)

    # ------------------------------------------------------------ teardown
    def _release(self, group: GraphGroup) -> None:
        """Called with the lock held when a graph or executable graph of `group` is destroyed."""
        if group.refs:
            return
        self._by_capture.pop(group.capture_id, None)
        self._retired.append(group)
        self._free_retired()

    def _free_retired(self) -> None:
        """Free retired groups' memory once the device has finished with it. Executable graphs
        destroyed while in flight are freed by CUDA on completion: ours waits for that too."""
        if not self._retired:
            return
        try:
            with relaxed_capture(self.drv):
                self.drv.ctx_synchronize()
        except DriverError as e:
            self.trace.event("graph_free_deferred", graphs=len(self._retired), reason=str(e))
            return
        retired, self._retired = self._retired, []
        for group in retired:
            # over a copy: _forget_node removes the node from group.nodes, and removing while
            # iterating skipped every other node (the second kernel node of a graph was never
            # freed, and its replays were missing from the exit summary)
            for node in list(group.nodes):
                self._free_node_memory(node)
                self._forget_node(node)
            self.freed_groups += 1

    def _free_node_memory(self, node: GraphNode) -> None:
        with contextlib.suppress(DriverError), relaxed_capture(self.drv):
            for dev in node.buffers:
                self.drv.mem_free_sync(dev)
            if node.staging is not None:
                self.drv.host_free(node.staging[0])
        if node.reserved:
            self.budget.give_back(node.held)
            node.reserved = False
        node.buffers, node.staging = [], None
        if node.record is not None:
            self._finished.append(self._summary_row(node))
            self.sink.free_record(node.record)
            node.record = None

    def _forget_node(self, node: GraphNode) -> None:
        with self._lock:
            self._by_node.pop(node.node, None)
            if node in node.group.nodes:
                node.group.nodes.remove(node)

    def forget_all(self) -> None:
        """A context is going away: its graphs' memory goes with it. Host-function records stay
        (a replay may still run one); nothing is freed later under a stale address."""
        with self._lock:
            live = {id(g): g for g in self._unfreed_groups()}
            self._finished += [self._summary_row(n) for g in live.values() for n in g.nodes if n.record is not None]
            self._by_graph.clear()
            self._by_exec.clear()
            self._by_capture.clear()
            self._by_node.clear()
            self._retired.clear()

    # ------------------------------------------------------------ exit
    def summary(self) -> list[dict]:
        """Per probed graph node: replays seen, written, dropped (by reason)."""
        with self._lock:
            out = list(self._finished)
            groups = {id(g): g for g in self._unfreed_groups()}
            for group in groups.values():
                out += [self._summary_row(node) for node in group.nodes if node.record is not None]
        return out

    def _unfreed_groups(self) -> list[GraphGroup]:
        """Groups whose nodes still hold their records: the live ones, and the retired ones whose
        freeing was deferred (graph_free_deferred), which no handle map reaches any more."""
        return [*self._by_graph.values(), *self._by_exec.values(), *self._by_capture.values(), *self._retired]

    def _summary_row(self, node: GraphNode) -> dict:
        return {"kernel": node.kernel, "graph": node.group.id, "graph_node": node.id, **self.sink.stats(node.record)}


def _encode_header(grid, block, shared_bytes: int, layouts) -> tuple[bytes, list[int]]:
    """A node's frame header: fixed for the graph's life (its shape cannot change while probed)."""
    sections = [tracefmt.MapSection.of(lay.map, lay.units, lay.cap, bytes(lay.size)) for lay in layouts]
    return tracefmt.encode_header(grid=grid, block=block, shared_bytes=shared_bytes, maps=sections)


class KernelNodeParams(C.Structure):
    """CUDA_KERNEL_NODE_PARAMS (v1)."""

    _fields_ = [("func", C.c_void_p), ("gridDimX", C.c_uint), ("gridDimY", C.c_uint), ("gridDimZ", C.c_uint),
                ("blockDimX", C.c_uint), ("blockDimY", C.c_uint), ("blockDimZ", C.c_uint),
                ("sharedMemBytes", C.c_uint), ("kernelParams", C.POINTER(C.c_void_p)),
                ("extra", C.POINTER(C.c_void_p))]


class KernelNodeParamsV2(C.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2: v1 and the CUkernel and context."""

    _fields_ = [*KernelNodeParams._fields_, ("kern", C.c_void_p), ("ctx", C.c_void_p)]


# ------------------------------------------------------------ sinks: where a replay's frame goes


@attrs.define(eq=False)
class PyRecord:
    node: GraphNode
    active: bool = True
    replays: int = 0
    written: int = 0
    dropped_trace: int = 0
    dropped_behind: int = 0
    errors: int = 0


class PythonGraphSink:
    """Host functions in Python (the fake drivers of the tests): each selected replay's frame is
    appended to its kernel's result file with a `launch` event carrying `graph` and `graph_node`."""

    def __init__(self, trace, trace_budget, launch_filter):
        self.trace, self.trace_budget, self.filter = trace, trace_budget, launch_filter

    def new_record(self, node: GraphNode):
        rec = PyRecord(node)
        return self.host_fn, rec, rec

    def host_fn(self, rec: PyRecord) -> None:
        r = rec.replays
        rec.replays += 1
        if not rec.active or not self.filter.selects(r):
            return
        node = rec.node
        if not self.trace_budget.reserve(node.frame_bytes):
            rec.dropped_trace += 1
            return
        view = node.staging[1]
        datas = [bytes(view[off: off + lay.size]) for off, lay in zip(node.offsets, node.layouts)]
        index, rel, offset = self.trace.append_result(node.kernel_dir, node.header, node.offsets, datas)
        self.trace.event("launch", index=index, kernel=node.kernel, grid=list(node.grid), block=list(node.block),
                         shared_bytes=node.shared_bytes, stream=hex(node.stream), result=rel, result_offset=offset,
                         frame=node.frame, duration_ns=None, kernel_launch=r, graph=node.group.id,
                         graph_node=node.id, replay=r)
        rec.written += 1

    def set_active(self, rec: PyRecord, active: bool) -> None:
        rec.active = active

    def free_record(self, rec: PyRecord) -> None:
        rec.active = False

    def stats(self, rec: PyRecord) -> dict:
        return {"replays": rec.replays, "written": rec.written, "dropped_trace": rec.dropped_trace,
                "dropped_behind": rec.dropped_behind, "errors": rec.errors}


class NtGraphDesc(C.Structure):
    """`nt_graph_desc` of shim/graphs.c."""

    _fields_ = [("graph_id", C.c_uint32), ("node_id", C.c_uint32), ("kernel_id", C.c_uint32), ("fd", C.c_int32),
                ("staging", C.c_void_p), ("frame_size", C.c_uint64), ("stream", C.c_uint64),
                ("grid", C.c_uint32 * 3), ("block", C.c_uint32 * 3), ("shared_bytes", C.c_uint32),
                ("frame_id", C.c_uint32)]


class NativeGraphSink:
    """Host functions in C (shim/graphs.c): a selected replay's frame is copied out of the staging
    memory and queued for shim/writer.c, which records it in result/index.bin with its graph and node."""

    STATS = ("replays", "written", "dropped_trace", "dropped_behind", "errors")

    def __init__(self, shim_path: str, writer, launch_filter, pending_limit: int):
        lib = C.PyDLL(shim_path)  # none of these waits: keep the GIL
        self._new = lib.neutrino_graph_node_new
        self._new.argtypes = [C.POINTER(NtGraphDesc)]
        self._new.restype = C.c_void_p
        self._free = lib.neutrino_graph_node_free
        self._free.argtypes = [C.c_void_p]
        self._active = lib.neutrino_graph_node_set_active
        self._active.argtypes = [C.c_void_p, C.c_int]
        self._stats = lib.neutrino_graph_node_stats
        self._stats.argtypes = [C.c_void_p, C.c_uint64 * 5]
        self.host_fn = C.cast(lib.neutrino_graph_host_fn, C.c_void_p).value
        f = launch_filter
        lib.neutrino_graph_set_filter.argtypes = [C.c_uint64] * 4
        lib.neutrino_graph_set_filter(f.start, min(f.stop, 2**64 - 1), f.every, pending_limit)
        self.writer = writer

    def new_record(self, node: GraphNode):
        kernel_id, fd = self.writer.kernel_file(node.kernel_dir)
        desc = NtGraphDesc(graph_id=node.group.id, node_id=node.id, kernel_id=kernel_id, fd=fd,
                           staging=node.staging[0], frame_size=node.frame_bytes, stream=node.stream,
                           shared_bytes=node.shared_bytes, frame_id=self.writer.frame_id(node.frame))
        desc.grid[:] = node.grid
        desc.block[:] = node.block
        rec = self._new(C.byref(desc))
        if not rec:
            raise MemoryError("no memory for a graph node record")
        return self.host_fn, rec, rec

    def set_active(self, rec: int, active: bool) -> None:
        self._active(rec, int(active))

    def free_record(self, rec: int) -> None:
        self._free(rec)

    def stats(self, rec: int) -> dict:
        out = (C.c_uint64 * 5)()
        self._stats(rec, out)
        return dict(zip(self.STATS, (int(v) for v in out)))
