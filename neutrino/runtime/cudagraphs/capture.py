"""Probing kernels captured into CUDA graphs, and every replay of them.

One job: when a probed kernel is launched into a stream that is being captured
(`torch.cuda.graphs`, `torch.compile(mode="reduce-overhead")`, any stream
capture), capture the probed kernel instead, with what gets its results out
on every replay:

    probed kernel node → the program's next nodes
                     └→ append node (added when the capture ends: one for all the
                                     capture's probed nodes, a leaf)

The append kernel (graph_ring.py) copies each replay's maps into the next free
slot of the node's ring in device memory and zeroes them for the next replay
(they are zeroed once at capture, on a stream of ours, so no memset node sits
on the program's path); a host thread (graph_sinks.py: in C, shim/graphs.c; in
Python with the fake drivers of the tests) copies the filled slots out with
the copy engine on a stream of ours and hands the frames to the writer. No
host node, nothing across PCIe on the replay's path: a replay never waits for
the host. The map buffers and the rings belong to that graph node. They are
allocated at capture time with the thread's capture mode switched to relaxed
for the allocation (`cuThreadExchangeStreamCaptureMode`), so every capture
mode PyTorch uses (global, its default; thread-local; relaxed) allows it, and
freed when the graph, its clones and every executable graph instantiated from
them are destroyed. The append node is added to the graph when its capture
ends (`end_capture`), after the capture's probed kernel nodes, as a leaf: no
node of the program's waits for it. It counts replays and applies `--launches`
to the replay number, and sets the probe gate of the next replay (graph_ring.py,
"Sampling"): a replay outside the selection runs the probed kernel with every
store and atomic of the probe predicated off, and the append kernel's blocks
find the maps still zero and leave them. Where the host can choose (an executable graph
instantiated from the captured graph, for host launch), it does, at each cuGraphLaunch
(replay_select.py, shim/graphpick.c): a replay left out runs the program's own kernels
and no append node; the gate then serves only what the host cannot choose.

`cap = "count"` maps are refused inside graphs (a counting run per replay would
need the host between two kernels of the replay): a `fallback` event with
stage `graph`, and the node runs unprobed.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import os
import threading

import attrs

from neutrino import maps as tracefmt
from neutrino.runtime.cudagraphs import chain_capture, replay_select
from neutrino.runtime.cudagraphs import ring as graph_ring
from neutrino.runtime.driver import CAPTURE_MODE_RELAXED, DriverError, KernelNodeParams, KernelNodeParamsV2
from neutrino.runtime.launch_path.pool import Slot
from neutrino.runtime.instrument.probed import Fallback, copy_globals_in, copy_globals_out

# what the shim's graph hooks report (shim/graphs.c, enum graph_event)
(G_INSTANTIATE, G_CLONE, G_EXEC_UPDATE, G_GRAPH_DESTROY, G_EXEC_DESTROY, G_ADD_KERNEL_NODE, G_SET_PARAMS,
 G_END_CAPTURE, G_PICK_FALLBACK, G_BEGIN_CAPTURE, G_INSTANTIATE_REFUSED) = range(11)
INSTANTIATE_DEVICE_LAUNCH = 4  # CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH: the host never sees its launches
# The captured copy of a written module global back into the program's module follows the probed node: on
# a replay running the program's kernel instead (switched, or the twin) it would undo that kernel's writes.
WRITES_GLOBALS = ("a probed kernel writes module globals (the copy back after its node would undo the program's "
                  "kernel's writes on a replay left out)")

# NEUTRINO_MEASURE_CAPTURE (benchmarks only, never for results: benchmarks/graph_residual.py --isolate bisect,
# spec/runtime.md): a comma list, read once, each word skipping or moving one step of a probed capture, so that a
# benchmark can find which step slows the process's other graphs (issue 24, graph B's residual). Unset: nothing
# changes. Words not in MEASURE_KNOBS are ignored (the benchmark checks its own against this tuple).
MEASURE_KNOBS = (
    "unprobed",        # every launch into a capture falls back at once: the shim captures the original, nothing of ours
    "original",        # the node captured with the program's kernel and arguments; the rest (memory, append node) as usual
    "pool",            # the nodes' memory carved from one device and one mapped host allocation made before the capture
    "warm-append",     # the append module loaded (and its kernel got) before the capture begins, not inside it
    "no-relax",        # no capture-mode exchange of ours (with pool and warm-append nothing of ours needs it)
    "no-zero",         # the nodes' memory not zeroed after the capture ends (no memset, no copy on our stream)
    "zero-by-memset",  # the nodes' memory zeroed by a memset (as before session 11) instead of a copy of zeroes
    "zero-no-gate",    # the closed gate's 4-byte copy left out of the zeroing (the memset kept)
    "no-append",       # no append node, no descriptors (no cuMemAlloc, copy or graph-node call at the capture's end)
    "ordinary-edges",  # the append node's edges ordinary: no cuGraphGetEdges_v2, no launch-order port
    "no-node-query",   # no capture query for the node's handle after its launch (implies no-append: no handle)
    "no-record",       # no sink record for the node: no ring polled, no poller thread (and so no append node)
    "late-stream",     # our stream not made before the capture begins: where first needed, after it ends (A's ring
                       # then copied out on the legacy stream: benchmarks replaying B alone only)
)


def _measure_knobs() -> frozenset[str]:
    words = {w.strip() for w in os.environ.get("NEUTRINO_MEASURE_CAPTURE", "").split(",")}
    return frozenset(words & set(MEASURE_KNOBS))


MEASURE = _measure_knobs()


@contextlib.contextmanager
def relaxed_capture(drv):
    """This thread may make calls stream capture forbids (allocation, module loads) while
    another capture, or its own, is under way: the documented escape hatch of CUDA."""
    if "no-relax" in MEASURE:  # (a benchmark's switch: the calls made here may then be refused)
        yield
        return
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
    ring_layout: graph_ring.RingLayout
    buffers: list[int] = attrs.Factory(list)  # each map's buffer: inside `device`, laid out like the frame
    device: int = 0  # the one device allocation holding the maps
    ring: tuple | None = None  # (host address, memoryview, device address) of the mapped host ring
    drain_stream: int = 0  # the stream of ours the host copies the device slots out on
    record: object = None  # the sink's per-node record (what drains the ring)
    node: int = 0  # the kernel node's CUgraphNode handle
    active: bool = False
    reserved: bool = False  # its bytes are held against the graphs' budget
    keep: object = None  # parameter arrays the driver may read again (fake drivers; set-params rewrites)
    appended: bool = False  # the capture's append node serves it
    gate_closed: bool = False  # the first replay runs with the probe gate set
    zeroed: bool = False  # its device memory made ready (after the capture ended: zero_node_memory)
    pooled: bool = False  # its memory carved from an EarlyPool (NEUTRINO_MEASURE_CAPTURE=pool): never freed
    frame: str | None = None
    pick_args: int = 0  # its arguments copied at capture for the host's choice of replays (replay_select.py)
    writes_globals: bool = False  # the probed kernel's module globals are copied back after it (copy_globals_out)
    chain_src: tuple | None = None  # (ProbedKernel, FuncRec, param plan): what the chain needs (chain_capture.py)
    chain_func: int = 0  # the graph_chain variant it runs (the chain took it), else 0

    @property
    def span(self) -> int:
        """Bytes of the maps' device allocation: the frame from its first section on."""
        return self.frame_bytes - self.offsets[0]

    @property
    def device_layout(self) -> graph_ring.DeviceLayout:
        lay = self.ring_layout
        return graph_ring.DeviceLayout(self.span, lay.nslots if lay.on_device else 0)

    @property
    def held(self) -> int:
        return self.device_layout.total + self.ring_layout.total


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
    descs: list = attrs.Factory(list)  # device memory of the append node's descriptors (one per capture end)
    append_args: list = attrs.Factory(list)  # their arguments (the fake drivers read them at each replay)
    graph: int = 0  # the captured graph (the node handles are its own; a clone's differ)
    appends: list = attrs.Factory(list)  # the append nodes: handle, function, grid, block, arguments
    early: dict = attrs.Factory(dict)  # append node -> the probed node of its launch-order edge (sm_90+)
    ordinary_in: set = attrs.Factory(set)  # `graph` or its clones whose launch-order edges were made ordinary
    pick_group: int = 0  # the host's replay count shared by its executable graphs (replay_select.py)
    pick_off: str = ""  # why the host no longer chooses the replays of new executable graphs
    planned: set = attrs.Factory(set)  # executable graphs whose replays the host chooses (the others: the device gate)
    chain: object = None  # chain.ChainRings: its probed nodes run the chain, no append node (chain_capture.py)
    chain_order: list = attrs.Factory(list)  # the nodes of `chain`, in its order

    @property
    def refs(self) -> int:
        return len(self.handles) + len(self.execs)


class GraphProbes:
    """Capture-time probing and the graphs' lifetimes (the shim reports instantiate/destroy)."""

    def __init__(self, drv, trace, sink, budget, enqueuer, attribution=None, arch_of=None, wait_ns: int = 0):
        self.drv, self.trace, self.sink, self.budget, self.enqueuer = drv, trace, sink, budget, enqueuer
        self.attribution = attribution
        self.arch_of = arch_of  # ctx -> compute capability (for the append kernel's PTX target)
        self.wait_ns = wait_ns  # --when-full=wait: how long a replay waits for a full ring's slot
        self._append: dict[int, int] = {}  # ctx -> the append kernel's function
        self._pdl: dict[int, bool] = {}  # ctx -> it waits for its dependencies itself (graph_ring.append_ptx pdl)
        self._ours: dict[int, int] = {}  # ctx -> a stream of ours: zeroing new nodes' maps, copying slots out
        self._pools: dict[int, graph_ring.EarlyPool] = {}  # ctx -> its pool (NEUTRINO_MEASURE_CAPTURE=pool only)
        self._lock = threading.RLock()
        self._by_graph: dict[int, GraphGroup] = {}
        self._by_exec: dict[int, GraphGroup] = {}
        self._by_capture: dict[int, GraphGroup] = {}
        self._by_node: dict[int, GraphNode] = {}
        self._exec_flags: dict[int, int] = {}  # executable graph -> its instantiation flags (a twin takes them)
        self._retired: list[GraphGroup] = []  # unreferenced, not yet freed (the device was busy)
        self._next_group = 1
        self._next_node = 1
        self.nodes_probed = 0
        self.freed_groups = 0
        self._finished: list[dict] = []  # the summary rows of nodes already freed
        self.picker = replay_select.picker_for(sink)  # None: the device gate alone (ring.py, "Sampling")
        self._zero_host: tuple[int, int] | None = None  # (pinned address, bytes) of zeroes: _zeros
        self.chain_variant = None  # (pk, rec) -> its graph_chain variant: the chain is on (the default)

    # ------------------------------------------------------------ capture
    def capture(self, rec, pk, req, ctx: int, stream: int, shape) -> int:
        """Capture the probed kernel of launch `req` into the graph `stream` is building (`shape`:
        its maps' layouts, probed.py). One way down: the node and its memory (`_new_node`, the
        memory's layout and handling being ring.py's), then the kernel node, then its record.

        Raises Fallback while the original could still be captured instead; once the
        probed kernel node is in the graph, never raises (returns 0)."""
        if pk.count_sized:
            raise Fallback("graph", 'cap = "count" maps are not supported inside CUDA graphs (spec/runtime.md)')
        if pk.baseline is not None:
            raise Fallback("graph", "--benchmark does not time launches captured into CUDA graphs")
        if req.extra and not req.params:
            raise Fallback("params", "kernel arguments passed through 'extra' are not supported", permanent=True)
        if "unprobed" in MEASURE:
            raise Fallback("graph", "NEUTRINO_MEASURE_CAPTURE=unprobed (a benchmark's switch)")
        info = self.drv.stream_capture_info(stream)
        node = self._new_node(pk, req, ctx, stream, info, shape)
        # From here on nodes of ours may be in the graph (a copy of module globals captured
        # before a failed launch): the node's memory stays with the graph whatever happens.
        with self._lock:
            node.group.nodes.append(node)
        # The probed kernel node. A failure before it is in the graph: the stream's dependencies
        # go back to what they were, so the original can be captured.
        slots = [Slot(node.group.ctx, lay.size, dev) for lay, dev in zip(node.layouts, node.buffers)]
        _, plan = pk.param_plan()
        first = next((which for which, is_buffer in plan if is_buffer), None)
        if first is not None:  # bit 0 of the first buffer pointer: read the gate (graph_ring.py, "Sampling")
            slots[first].device |= 1
        params = self.enqueuer.params(pk, req, node.layouts, slots)
        try:
            copy_globals_in(self.drv, pk.globals, stream)
            if "original" in MEASURE:  # (a benchmark's switch: the node runs the program's kernel, its maps stay zero)
                rc = self.drv.launch(req.kind, req.func, req, req.params)
            else:
                rc = self.drv.launch(req.kind, pk.func, req, C.addressof(params))
            if rc != 0:
                raise Fallback("graph", f"capturing the probed kernel failed: {self.drv.error_name(rc)}")
        except BaseException:
            with contextlib.suppress(DriverError):
                self.drv.update_capture_dependencies(stream, info.dependencies)
            raise
        node.keep = params
        node.active = True
        if self.chain_variant is not None and self._own_original_args(params, pk.func, pk.n_params):
            node.chain_src = (pk, rec, plan)
        node.writes_globals = any(g.writable for g in pk.globals)
        if self.picker is not None and first is not None:  # the host's choice of replays (replay_select.py)
            buffer_param = pk.n_params + next(i for i, (_, is_buffer) in enumerate(plan) if is_buffer)
            node.pick_args = self.picker.copy_args(pk.func, C.addressof(params), buffer_param)
        # The kernel is in the graph: a failure from here on loses this node's results, never the kernel.
        with self._lock:
            self.nodes_probed += 1
        try:
            node.node = 0 if "no-node-query" in MEASURE else self.drv.stream_capture_info(stream).dependencies[0]
            copy_globals_out(self.drv, pk.globals, stream)
            with self._lock:
                self._by_node[node.node] = node
            if "no-record" not in MEASURE:  # (a benchmark's switch: without a record the node gets no append node)
                node.record = self.sink.new_record(node)  # what drains its ring, once the capture's end appends
        except Exception as e:  # noqa: BLE001 - the kernel node stays; its results are lost (no record yet)
            node.active = False
            self.trace.event("result_error", kernel=node.kernel, graph=node.group.id, graph_node=node.id,
                             reason=f"graph ring: {type(e).__name__}: {e}")
            return 0
        self.trace.event("graph_node", kernel=node.kernel, graph=node.group.id, graph_node=node.id,
                         capture_id=node.group.capture_id, grid=list(node.grid), block=list(node.block),
                         stream=hex(node.stream), frame_bytes=node.frame_bytes, buffer_bytes=node.held,
                         ring_slots=node.ring_layout.nslots, frame=node.frame)
        return 0

    def _new_node(self, pk, req, ctx, stream, info, shape) -> GraphNode:
        """A node of the capture's graph group (not one of its nodes yet) with its memory: its frame
        header, its ring's layout, its bytes held against the graphs' budget (the smallest ring
        rather than none), its maps and ring allocated and zeroed (ring.py). A failure gives back
        what was taken (memory, budget) and raises Fallback: the original is captured."""
        with self._lock:
            group = self._by_capture.get(info.capture_id)
            if group is None:
                group = GraphGroup(self._next_group, ctx, info.capture_id, graph=info.graph)
                self._next_group += 1
                self._by_capture[info.capture_id] = group
            if info.graph:
                group.handles.add(info.graph)
                self._by_graph[info.graph] = group
            nid = self._next_node
            self._next_node += 1
        on_device = self.wait_ns == 0
        frame = self.attribution.frame() if self.attribution is not None else None
        header, offsets = _encode_header(req.grid, req.block, req.shared_bytes, shape.layouts)
        node = GraphNode(nid, group, pk.name, pk.kernel_dir, req.func, pk.func, req.grid, req.block,
                         req.shared_bytes, stream, shape.layouts, pk.n_params, header, tuple(offsets),
                         shape.frame_bytes, graph_ring.ring_layout(shape.frame_bytes, on_device), frame=frame)
        if not self.budget.reserve(node.held):
            node.ring_layout = graph_ring.ring_layout(node.frame_bytes, on_device, minimal=True)
            if not self.budget.reserve(node.held):
                raise Fallback("graph", f"the buffer budget of {self.budget.limit} bytes is held by other graphs' "
                                        "nodes; this node runs unprobed")
        node.reserved = True
        node.gate_closed = not self.sink.filter.selects(0)
        try:
            with relaxed_capture(self.drv):
                self._append_function(ctx)
                # made before the capture began (G_BEGIN_CAPTURE) where the shim said so; a stream made or
                # used while the program captures slows every later graph replay of the process (issue 24)
                node.drain_stream = self._ours.get(ctx, 0) if "late-stream" in MEASURE else self._our_stream(ctx)
                pool = self._pools.get(ctx)
                carved = pool.take(node.device_layout, node.ring_layout, node.header) if pool else None
                if carved is not None:
                    (node.device, node.ring), node.pooled = carved, True
                else:
                    node.device, node.ring = graph_ring.allocate_node_memory(
                        self.drv, node.device_layout, node.ring_layout, node.header)
        except BaseException as e:
            self.budget.give_back(node.held)
            node.reserved = False
            if isinstance(e, DriverError):
                raise Fallback("graph-alloc", f"{node.held} bytes for a graph node: {e}") from None
            raise
        maps = node.device + node.device_layout.maps
        node.buffers = [maps + off - node.offsets[0] for off in node.offsets]
        return node

    def before_capture(self) -> None:
        """A capture is about to begin on the program's thread (shim: cuStreamBeginCapture*): our stream
        for its context is made now, outside any capture (the context current: the launches captured
        next find it there). Never fails the program's call."""
        try:
            ctx = self.drv.ctx_get_current()
            if ctx and ctx not in self._ours:  # (a host query only, once the stream is made)
                with self._lock, relaxed_capture(self.drv):  # another thread's capture may be open
                    if "late-stream" not in MEASURE:
                        self._our_stream(ctx)
                    self._measure_before_capture(ctx)
        except Exception:  # noqa: BLE001 - made lazily at the first probed node instead
            pass

    def _measure_before_capture(self, ctx: int) -> None:
        """NEUTRINO_MEASURE_CAPTURE's steps moved before the capture (pool, warm-append); nothing when unset."""
        if "warm-append" in MEASURE:
            self._append_function(ctx)
        if "pool" in MEASURE and ctx not in self._pools:
            self._pools[ctx] = graph_ring.EarlyPool(self.drv)

    def _our_stream(self, ctx: int) -> int:
        """A non-blocking stream of ours in `ctx`, for work outside the capture (never in a graph)."""
        stream = self._ours.get(ctx)
        if stream is None:
            stream = self._ours[ctx] = self.drv.stream_create_nonblocking()
        return stream

    def _append_function(self, ctx: int) -> int:
        """The append kernel in context `ctx`, loaded at its first graph node (relaxed capture mode)."""
        func = self._append.get(ctx)
        if func is None:
            arch = self.arch_of(ctx) if self.arch_of is not None else None
            pdl = graph_ring.LAUNCH_ORDER_EDGE and arch is not None and arch >= graph_ring.PDL_ARCH
            ptx = graph_ring.append_ptx(arch, self.wait_ns == 0, lean=graph_ring.LEAN_KERNEL, pdl=pdl)
            module = self.drv.module_load_data(ptx.encode() + b"\0")
            func = self._append[ctx] = self.drv.module_get_function(module, graph_ring.APPEND_KERNEL)
            self._pdl[ctx] = pdl
        return func

    def _lose_results(self, node: GraphNode, reason: str) -> None:
        node.active = False
        if node.record is not None:
            self.sink.set_active(node.record, False)
        self.trace.event("result_error", kernel=node.kernel, graph=node.group.id, graph_node=node.id, reason=reason)

    def end_capture(self, graph: int) -> None:
        """The capture that built `graph` ended: its nodes' device memory is made ready (zeroed, the gate
        set), now that no stream work of ours can land inside the program's capture, and the append node
        (graph_ring.py) is added after all its probed kernel nodes, a leaf. Failing, those nodes' results
        are lost, never a kernel."""
        with self._lock:
            group = self._by_graph.get(graph)
            fresh = [n for n in group.nodes if n.device and not n.zeroed] if group else []
            nodes = [n for n in group.nodes if n.active and n.record is not None and not n.appended] if group else []
        if not self._zero(group, fresh) or not nodes or MEASURE & {"no-append", "no-node-query"}:
            return
        try:
            with relaxed_capture(self.drv):  # another thread may be capturing
                descs = (graph_ring.NodeDesc * len(nodes))(*[
                    graph_ring.node_desc(n.device, n.device_layout, n.ring[2], n.ring_layout, n.offsets[0])
                    for n in nodes])
                desc = self.drv.mem_alloc_sync(C.sizeof(descs))
                group.descs.append(desc)
                stream = self._our_stream(group.ctx)
                self.drv.memcpy_htod_async(desc, C.addressof(descs), C.sizeof(descs), stream)
                self.drv.stream_synchronize(stream)
                args = graph_ring.append_params(desc, self.sink.filter, self.wait_ns).pointers()
                group.append_args.append(args)
                chunks = graph_ring.append_chunks([n.span for n in nodes])
                grid, block = (chunks, len(nodes), 1), (graph_ring.APPEND_THREADS, 1, 1)
                handle, early = self._add_append_node(graph, group.ctx, nodes, grid, block, C.addressof(args))
                values = args._owner  # noqa: SLF001 - the AppendParams the pointers point into
                group.appends.append({"node": handle, "func": self._append[group.ctx], "grid": grid, "block": block,
                                      "args": [getattr(values, f) for f, _ in graph_ring.AppendParams._fields_]})
                if early:  # the probed node its launch-order edge comes from
                    group.early[handle] = early
                self.trace.event("graph_append", graph=group.id, graph_nodes=[n.id for n in nodes],
                                 launch_order=next((n.id for n in nodes if n.node == early), None))
        except Exception as e:  # noqa: BLE001 - the kernels stay; their results are lost
            for n in nodes:
                self._lose_results(n, f"graph append node: {type(e).__name__}: {e}")
            return
        for n in nodes:
            n.appended = True

    def _zero(self, group: GraphGroup | None, nodes: list[GraphNode]) -> bool:
        """Zero `nodes`' device memory (ring.zero_node_memory) on our stream and wait; False (their results
        lost: their probed kernels write into memory not made ready) where that fails."""
        if not nodes or "no-zero" in MEASURE:  # (a benchmark's switch: their memory holds what it held)
            return True
        try:
            with relaxed_capture(self.drv):
                stream = self._our_stream(group.ctx)
                zeros = 0 if "zero-by-memset" in MEASURE else self._zeros(max(n.device_layout.slots for n in nodes))
                for n in nodes:
                    graph_ring.zero_node_memory(self.drv, n.device_layout, n.device, stream,
                                                n.gate_closed and "zero-no-gate" not in MEASURE, zeros)
                self.drv.stream_synchronize(stream)
        except Exception as e:  # noqa: BLE001 - the kernels stay; their results are lost
            for n in nodes:
                if n.active:
                    self._lose_results(n, f"graph node memory: {type(e).__name__}: {e}")
            return False
        for n in nodes:
            n.zeroed = True
        return True

    def _own_original_args(self, params, func: int, n: int) -> bool:
        """Copy the program's argument values behind `params`' first `n` pointers into memory the array keeps
        (the program's live only during its launch call), so that the chain can set the node's parameters again at
        the capture's end (chain_capture.py). False (the capture keeps the append path) where the driver cannot
        say a parameter's size."""
        try:
            sizes = [self.drv.func_param_size(func, i) for i in range(n)]
        except (DriverError, AttributeError):
            return False
        copies = [(C.c_ubyte * max(size, 1)).from_buffer_copy(C.string_at(params[i], size)) for i, size in
                  enumerate(sizes)]
        for i, copy in enumerate(copies):
            params[i] = C.addressof(copy)
        params._keep = [*params._keep, *copies]  # noqa: SLF001 - lifetime of the argument values
        return True

    def _zeros(self, size: int) -> int:
        """Pinned host memory of at least `size` zero bytes, kept for the next capture's end (grown when short):
        what the nodes' memory is zeroed from. A memset there (a kernel of the driver's) slows every later replay
        of the process's graphs by ~9% (docs/overhead.md, "Session 11: graph B's residual"); a copy does not.
        Called with our stream synchronised (no copy from it in flight)."""
        if self._zero_host is None or self._zero_host[1] < size:
            if self._zero_host is not None:
                self.drv.host_free(self._zero_host[0])
                self._zero_host = None
            host, view = self.drv.host_alloc(size)
            view[:] = bytes(len(view))
            self._zero_host = (host, len(view))
        return self._zero_host[0]

    def _add_append_node(self, graph: int, ctx: int, nodes: list[GraphNode], grid, block,
                         params: int) -> tuple[int, int]:
        """The append node, after every probed node of the capture (after the last one only measured
        slower: docs/overhead.md, "Session 9: the append node"). With a kernel built for it (sm_90+)
        and one probed node that no other waits for (the graph's edges say so), the edge from that
        one is a launch-order edge: the append kernel starts once that kernel's blocks have all
        started and reads the maps only once it has completed (griddepcontrol.wait), so its start and
        its decision overlap the probed kernel. A driver that refuses it (before CUDA 12.3), or edges
        that cannot be read: ordinary edges only. Returns (the node, the probed node of its launch-order
        edge or 0)."""
        func, deps = self._append[ctx], [n.node for n in nodes]
        last = self._last_probed(graph, deps) if self._pdl.get(ctx) and "ordinary-edges" not in MEASURE else []
        if len(last) == 1:
            ports = [graph_ring.PDL_PORT if d == last[0] else 0 for d in deps]
            try:
                return self.drv.graph_add_kernel_node(graph, deps, func, grid, block, params, ports=ports), last[0]
            except DriverError:
                pass
        return self.drv.graph_add_kernel_node(graph, deps, func, grid, block, params), 0

    def edges_made_ordinary(self, graph: int, flags: int) -> int:
        """The driver refused to instantiate `graph` (with `flags`), the captured graph or a clone of it: the
        launch-order edges to our append nodes become ordinary edges (a flag such as device launch may not
        take them; the kernel's wait then returns at once). In a clone, the nodes are the clone's own
        (cuGraphNodeFindInClone). 1 when any changed (the shim tries once more), else 0; one
        `graph_edge_ordinary` event per edge."""
        with self._lock:
            group = self._by_graph.get(graph)
            if group is None or graph in group.ordinary_in:
                return 0
            early, clone = dict(group.early), graph != group.graph
        changed = 0
        for append, probed in early.items():
            try:
                ends = [self.drv.graph_node_find_in_clone(n, graph) for n in (probed, append)] if clone else \
                    [probed, append]
                self.drv.graph_make_edge_ordinary(graph, *ends, graph_ring.PDL_PORT)
            except DriverError as e:
                self.trace.event("graph_edge_ordinary", graph=group.id, flags=flags, clone=clone, reason=f"failed: {e}")
                continue
            with self._lock:
                group.ordinary_in.add(graph)
            changed = 1
            self.trace.event("graph_edge_ordinary", graph=group.id, flags=flags, clone=clone,
                             reason="the driver refused to instantiate the graph; the append node's launch-order edge "
                                    "was made ordinary (it waits for the probed kernel to complete) and the "
                                    "instantiation tried again")
        return changed

    def _last_probed(self, graph: int, deps: list[int]) -> list[int]:
        """The probed nodes no other of `deps` waits for, however indirectly (completion is transitive
        along the graph's ordinary edges); none when the edges cannot be read."""
        read_edges = getattr(self.drv, "graph_edges", None)  # (drivers of tests without it)
        try:
            return last_of(deps, read_edges(graph)) if read_edges is not None else []
        except DriverError:
            return []

    # ------------------------------------------------------------ what the shim reports
    def on_graph_event(self, kind: int, a: int, b: int, c: int = 0, version: int = 2) -> int:
        """A graph API call seen by the shim; returns replacement kernel-node parameters (G_SET_PARAMS) or 0."""
        if kind == G_SET_PARAMS:
            return self.set_params(a, b, c, version)
        if kind == G_END_CAPTURE:  # a: the stream, b: the graph it built
            if not self._end_capture_chain(b):
                self.end_capture(b)
            return 0
        if kind == G_BEGIN_CAPTURE:  # a: the stream about to be captured
            self.before_capture()
            return 0
        if kind == G_INSTANTIATE_REFUSED:  # a: the graph, c: the instantiation flags
            return self.edges_made_ordinary(a, c)
        if kind == G_PICK_FALLBACK and c == replay_select.TWIN_LOST:  # the plan stays, switching nodes
            group = self._by_exec.get(a)
            self.trace.event("graph_pick_switching", graph=group.id if group else None, exec=hex(a),
                             reason=replay_select.TWIN_LOST_REASON)
            return 0
        if kind == G_PICK_FALLBACK:  # a: the executable graph, c: why (replay_select.FALLBACK_REASONS)
            self.give_up_picking(a, c)
            return 0
        with self._lock:
            if kind == G_INSTANTIATE:  # c: the instantiation flags
                self._add_exec(self._by_graph.get(a), b)
                if a in self._by_graph:  # (only executable graphs of our graphs: a plan made again takes them)
                    self._exec_flags[b] = c
                self._plan_replays(self._by_graph.get(a), a, b, c)
            elif kind == G_CLONE:
                group = self._by_graph.get(a)
                if group is not None:
                    group.handles.add(b)
                    self._by_graph[b] = group
            elif kind == G_EXEC_UPDATE:  # the executable graph now runs the nodes of graph b
                old = self._by_exec.pop(a, None)
                self._chain_exec(old, a, False)
                self._add_exec(self._by_graph.get(b), a)
                # its plan was given up before the update (shim/graphs.c); updated from the captured graph
                # itself, its nodes are known again: the host picks again, the count goes on
                self._plan_replays(self._by_graph.get(b), b, a, self._exec_flags.get(a, 0))
                if old is not None:
                    old.execs.discard(a)
                    self._release(old)
            elif kind == G_GRAPH_DESTROY:
                group = self._by_graph.pop(a, None)
                if group is not None:
                    group.handles.discard(a)
                    group.ordinary_in.discard(a)
                    self._release(group)
            elif kind == G_EXEC_DESTROY:
                self._exec_flags.pop(a, None)
                if self.picker is not None:
                    self.picker.forget(a)
                group = self._by_exec.pop(a, None)
                self._chain_exec(group, a, False)
                if group is not None:
                    group.execs.discard(a)
                    group.planned.discard(a)
                    self._release(group)
        return 0

    def _end_capture_chain(self, graph: int) -> bool:
        """The chain instead of the append node (chain_capture.py), where it is on and takes the capture (its
        memory made ready on our stream, as end_capture's)."""
        if self.chain_variant is None:
            return False
        with self._lock:
            group = self._by_graph.get(graph)
            nodes = [n for n in group.nodes if n.active and n.record is not None and not n.appended] if group else []
        if not chain_capture.chain_nodes(group, nodes):
            return False
        with relaxed_capture(self.drv):
            stream = self._our_stream(group.ctx)
        return chain_capture.end_capture_chain(self, graph, group, nodes, relaxed_capture, stream)

    def _add_exec(self, group: GraphGroup | None, exe: int) -> None:
        if group is not None:
            group.execs.add(exe)
            self._by_exec[exe] = group
            self._chain_exec(group, exe, True)

    def _chain_exec(self, group: GraphGroup | None, exe: int, add: bool) -> None:
        """The chain's poller told of an executable graph of the group made or gone (it counts their launches)."""
        if group is not None and group.chain is not None and group.chain.sink_handle is not None:
            self.sink.chain_exec(group.chain.sink_handle, exe, add)

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
        if not exe:  # the graph's node: executable graphs made from it later get these arguments, not the capture's
            node.group.pick_off = "the program set new parameters for a probed node of the graph"
        struct_type = KernelNodeParamsV2 if version >= 2 else KernelNodeParams
        p = struct_type.from_address(params_addr)
        same = (p.func in (node.func, node.probed_func, node.chain_func or node.probed_func)
                and (p.gridDimX, p.gridDimY, p.gridDimZ) == node.grid
                and (p.blockDimX, p.blockDimY, p.blockDimZ) == node.block and not p.extra)
        if not same or not node.active or node.keep is None:
            if node.active:
                self.drain()  # replays enqueued before the change ran the probed kernel: their results count
                node.active = False
                self.sink.set_active(node.record, False)
                self.unprobed_node(node.kernel, "kernel node parameters set to another kernel or launch shape; "
                                   "the node runs as set, unprobed", graph=node.group.id, graph_node=node.id)
            return 0
        n = node.n_params
        if n and p.kernelParams:
            node.keep[:n] = (C.c_void_p * n).from_address(C.cast(p.kernelParams, C.c_void_p).value)
        new = struct_type.from_buffer_copy(p)
        new.func = node.chain_func or node.probed_func  # (a chain node's buffers are its head and offsets)
        if version >= 2:
            new.kern = None
        new.kernelParams = C.cast(node.keep, C.POINTER(C.c_void_p))
        node.keep._node_params = new  # noqa: SLF001 - alive as long as the node
        return C.addressof(new)

    # ------------------------------------------------------------ replays chosen on the host
    def _plan_replays(self, group: GraphGroup | None, graph: int, exe: int, flags: int) -> None:
        """The host chooses the replays of `exe` (replay_select.py) when it launches them and knows their
        nodes: instantiated from the captured graph itself, for host launch, every node's arguments copied.
        Otherwise the device gate chooses, as for every executable graph without a plan."""
        if self.picker is None or group is None:
            return
        nodes = [n for n in group.nodes if n.active and n.appended]
        why = ("instantiated for device launch" if flags & INSTANTIATE_DEVICE_LAUNCH else
               "instantiated from a clone of the captured graph" if graph != group.graph else
               group.pick_off or (WRITES_GLOBALS if any(n.writes_globals for n in nodes) else
                                  "a probed node's arguments could not be copied at capture"
                                  if not all(n.pick_args for n in nodes) else ""))
        if not why and group.execs - group.planned - {exe}:  # it counts replays the host never sees
            why = replay_select.FALLBACK_REASONS[replay_select.SHARED_GATE]
        kernels = [{"node": n.node, "probed": n.chain_func or n.probed_func, "original": n.func, "args": n.pick_args,
                    "grid": n.grid, "block": n.block, "shared_bytes": n.shared_bytes}
                   for n in nodes]  # (a chain node's: its variant, its head as the chain set it)
        if nodes and not why:
            if not group.pick_group:
                group.pick_group = self.picker.new_group()
            planned, switching = (self.picker.plan(exe, graph, group.ctx, group.pick_group, kernels, group.appends,
                                                   flags) if group.pick_group else (False, ""))
            if planned:
                group.planned.add(exe)
                if switching:  # the replays left out switch nodes in the program's graph (no twin)
                    self.trace.event("graph_pick_switching", graph=group.id, exec=hex(exe), reason=switching)
                return
            why = "the shim could not plan it (a driver without cuGraphExecKernelNodeSetParams_v2, "
            why += "cuGraphNodeSetEnabled or cuFuncGetParamInfo, or no memory)"
        if nodes:
            self.trace.event("graph_pick_fallback", graph=group.id, exec=hex(exe), reason=why, replay=None)
            group.pick_off = group.pick_off or replay_select.UNCOUNTED
            if group.planned - {exe}:  # this one runs on the device gate: so do the others (one count)
                self.give_up_picking(next(iter(group.planned - {exe})), replay_select.SHARED_GATE)
            if group.chain is not None:  # every launch runs the chain from now on: the host keeps the selected
                self.sink.chain_unpick(group.chain.sink_handle, self.picker.replays(group.pick_group))
            elif group.pick_group and graph == group.graph and all(n.pick_args for n in nodes):
                # its append nodes have the capture's arguments (skip 0) while the host left replays
                # out: a plan given up at once gives them the skip, so the device gate numbers right
                if self.picker.plan(exe, graph, group.ctx, group.pick_group, kernels, group.appends, flags,
                                    twin=False)[0]:
                    self.picker.drop(exe)

    def give_up_picking(self, exe: int, why: int) -> None:
        """The host stops choosing the replays of `exe`: the shim restores the captured nodes and numbers
        the next replay; the gates are set for that number, so the device gate takes over exactly."""
        if self.picker is None:
            return
        with self._lock:
            dropped = self.picker.drop(exe)  # and the plans of the group's other executable graphs
            group = self._by_exec.get(exe)
            if dropped is None or group is None:
                return
            group.planned.clear()
            if why != replay_select.UPDATE:  # planned again right after the update, before any replay
                group.pick_off = group.pick_off or replay_select.UNCOUNTED
            replay, restored = dropped
            if group.chain is not None and why != replay_select.UPDATE:  # (an update: planned again at once)
                self.sink.chain_unpick(group.chain.sink_handle, replay)
            gate = C.c_uint32(0 if self.sink.filter.selects(replay) else 1)
            failed = ""
            try:
                with relaxed_capture(self.drv):
                    stream = self._our_stream(group.ctx)
                    for n in group.nodes:
                        if n.device:
                            self.drv.memcpy_htod_async(n.device + n.device_layout.gate, C.addressof(gate), 4, stream)
                    self.drv.stream_synchronize(stream)
            except DriverError as e:
                failed = f"; setting the probe gates failed: {e}"
        reason = replay_select.FALLBACK_REASONS.get(why, f"reason {why}")
        if restored < 0:
            failed += "; restoring a node failed"
        self.trace.event("graph_pick_fallback", graph=group.id, exec=hex(exe), reason=reason + failed, replay=replay)

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
        chain_capture.drain_chains(self, retired, relaxed_capture, detach=True)
        for group in retired:
            # over a copy: _forget_node removes the node from group.nodes, and removing while
            # iterating skipped every other node (the second kernel node of a graph was never
            # freed, and its replays were missing from the exit summary)
            for node in list(group.nodes):
                self._free_node_memory(node)
                self._forget_node(node)
            chain_capture.free_chain(self, group)  # (after the nodes' summary rows: they read its counts)
            with contextlib.suppress(DriverError), relaxed_capture(self.drv):
                for desc in group.descs:
                    self.drv.mem_free_sync(desc)
            group.descs, group.append_args = [], []
            if self.picker is not None:
                self.picker.free_group(group.pick_group)
                group.pick_group = 0
            self.freed_groups += 1

    def _free_node_memory(self, node: GraphNode) -> None:
        if node.record is not None:  # the ring's last frames and counters, before its memory goes
            self.sink.detach(node.record)
            self._finished.append(self._summary_row(node))
        if not node.pooled:
            with contextlib.suppress(DriverError), relaxed_capture(self.drv):
                graph_ring.free_node_memory(self.drv, node.device, node.ring)
        if node.reserved:
            self.budget.give_back(node.held)
            node.reserved = False
        node.buffers, node.device, node.ring = [], 0, None
        if node.record is not None:
            self.sink.free_record(node.record)
            node.record = None
        if self.picker is not None:
            self.picker.free_args(node.pick_args)
            node.pick_args = 0

    def _forget_node(self, node: GraphNode) -> None:
        with self._lock:
            self._by_node.pop(node.node, None)
            if node in node.group.nodes:
                node.group.nodes.remove(node)

    def forget_all(self) -> None:
        """A context is going away: its graphs' memory goes with it. Each ring is drained and let
        go first (its counters kept); nothing is read or freed later under a stale address. A release of the
        primary context that leaves it alive (a library's retain/release pair) keeps everything: the plans
        and twins, the rings, their polling."""
        self.drain()
        if replay_select.teardown_keeps_context(self.sink):
            return
        with self._lock:
            live = {id(g): g for g in self._unfreed_groups()}
            chain_capture.drain_chains(self, live.values(), relaxed_capture, detach=True)  # (no poll of a dead context)
            for node in [n for g in live.values() for n in g.nodes if n.record is not None]:
                self.sink.detach(node.record)
                self._finished.append(self._summary_row(node))
            if self.picker is not None:  # no plan may switch nodes of an executable graph whose handle comes back
                self.picker.forget_all()
            self._append.clear()
            self._ours.clear()
            self._pools.clear()  # (their memory went with the context)
            self._by_graph.clear()
            self._by_exec.clear()
            self._by_capture.clear()
            self._by_node.clear()
            self._exec_flags.clear()
            self._retired.clear()

    # ------------------------------------------------------------ exit
    def drain(self) -> None:
        """Write what the rings hold, after the replays in flight have finished (the exit, a
        context's teardown)."""
        with self._lock:
            if not self._by_node:
                return
        with contextlib.suppress(DriverError), relaxed_capture(self.drv):
            self.drv.ctx_synchronize()
        self.sink.drain()
        with self._lock:
            groups = {id(g): g for g in self._unfreed_groups()}
        chain_capture.drain_chains(self, groups.values(), relaxed_capture)

    def close(self) -> None:
        """At exit, before the writer stops: the rings' last frames go to it, and nothing after."""
        self.drain()
        self.sink.close()
        if self.picker is not None:  # the host's choice of replays: what it cost (shim/graphpick.c)
            self.trace.event("graph_pick", **self.picker.counts())
        if self._zero_host is not None:
            with contextlib.suppress(DriverError):
                self.drv.host_free(self._zero_host[0])
            self._zero_host = None

    def summary(self) -> list[dict]:
        """Per probed graph node: replays seen, written, dropped (by reason)."""
        with self._lock:
            out = list(self._finished)
            groups = {id(g): g for g in self._unfreed_groups()}
            for group in groups.values():
                out += [self._summary_row(node) for node in group.nodes if node.record is not None]
        return out

    def uses(self, probed_func: int) -> bool:
        """Whether a graph not yet freed may still launch this probed function (its module must
        stay loaded: runtime/core.py, module unloads)."""
        with self._lock:
            return any(node.probed_func == probed_func for g in self._unfreed_groups() for node in g.nodes)

    def _unfreed_groups(self) -> list[GraphGroup]:
        """Groups whose nodes still hold their records: the live ones, and the retired ones whose
        freeing was deferred (graph_free_deferred), which no handle map reaches any more."""
        return [*self._by_graph.values(), *self._by_exec.values(), *self._by_capture.values(), *self._retired]

    def _summary_row(self, node: GraphNode) -> dict:
        row = {"kernel": node.kernel, "graph": node.group.id, "graph_node": node.id, **self.sink.stats(node.record)}
        if node.group.chain is not None and node in node.group.chain_order:
            row.update(chain_capture.chain_stats(self, node.group, node, row))
        if self.picker is not None and node.group.pick_group:  # replays left out on the host never reach the device
            row["replays"] = max(row["replays"], self.picker.replays(node.group.pick_group))
        return row


def last_of(probed: list[int], edges) -> list[int]:
    """The nodes of `probed` from which no other node of `probed` can be reached along `edges`
    ((from, to) pairs), in their order: a walk up from every probed node marks its ancestors."""
    parents: dict[int, list[int]] = {}
    for a, b in edges:
        parents.setdefault(b, []).append(a)
    above: set[int] = set()
    todo = [a for p in probed for a in parents.get(p, ())]
    while todo:
        n = todo.pop()
        if n not in above:
            above.add(n)
            todo.extend(parents.get(n, ()))
    return [p for p in probed if p not in above]


def _encode_header(grid, block, shared_bytes: int, layouts) -> tuple[bytes, list[int]]:
    """A node's frame header: fixed for the graph's life (its shape cannot change while probed)."""
    from neutrino import trace_writer  # numpy: loaded once something is probed (neutrino/maps.py)

    sections = [tracefmt.MapSection.of(lay.map, lay.units, lay.cap, bytes(lay.size)) for lay in layouts]
    return trace_writer.encode_header(grid=grid, block=block, shared_bytes=shared_bytes, maps=sections)
