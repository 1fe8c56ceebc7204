"""A Python stand-in for the CUDA driver calls the runtime makes (neutrino.runtime.driver.RealDriver).

Device memory is host memory (ctypes buffers), so the runtime's memset/copy
code paths run for real; a "kernel launch" calls a Python function the test
supplies, which may write the map buffers like the probed kernel would.
"""

from __future__ import annotations

import ctypes as C
import itertools
import threading

from neutrino.runtime.cudagraphs import chain as graph_chain
from neutrino.runtime.cudagraphs import ring as graph_ring
from neutrino.runtime.driver import CAPTURE_MODE_GLOBAL, CAPTURE_MODE_RELAXED, CaptureInfo, DriverError


class FakeGraph:
    """A graph being captured or captured: nodes in capture order, each with its dependencies."""

    def __init__(self, handle, capture_id):
        self.handle, self.capture_id = handle, capture_id
        self.nodes: list[dict] = []  # {"handle", "kind", "deps", "run", ...}

    def dependents(self, node_handle):
        return [n for n in self.nodes if node_handle in n["deps"]]


class FakeCapture:
    def __init__(self, graph, mode, thread):
        self.graph, self.mode, self.thread = graph, mode, thread
        self.deps: list[int] = []


# The per-SM limits an H100 (sm_90) reports (CUdevice_attribute number -> value): threads, registers per SM
# and per block, shared bytes per SM, blocks per SM, the driver's reserved shared bytes per block, warp size.
H100_SM_LIMITS = {39: 2048, 82: 65536, 12: 65536, 81: 233472, 106: 32, 111: 1024, 10: 32}

CTX0 = 0xC0  # the context of device 0; device d's is ctx_of(d)


def ctx_of(device: int) -> int:
    return CTX0 + 0x100 * device


class FakeDriver:
    """`devices`: the compute capability of each device (default: one device of `cc`). The current
    context is per thread, as in CUDA, and starts as device 0's."""

    def __init__(self, *, cc=(9, 0), sm_count=132, devices=None):
        self.devices = list(devices) if devices else [cc]
        self.cc, self.sm_count = self.devices[0], sm_count
        self._tls = threading.local()
        self.made_in: dict[int, int] = {}  # handle or address -> context current when it was made
        self._ids = itertools.count(0x1000, 0x10)
        self._lock = threading.Lock()
        self.mem: dict[int, object] = {}
        self.functions: dict[int, tuple[int, str]] = {}  # handle -> (module, name)
        self.modules: dict[int, bytes] = {}
        self.attrs: dict[tuple[int, int], int] = {}
        # attributes of the functions it loaded, by (kernel name, probed module?) -> {CUfunction_attribute: value}
        self.resources: dict[tuple[str, bool], dict[int, int]] = {}
        # occupancy_max_blocks answers: ((name, probed) or a program's handle, threads, dynamic bytes) -> blocks
        self.occupancy: dict[tuple, int] = {}
        self.globals: dict[tuple[int, str], object] = {}
        self.launches: list[tuple] = []  # (kind, func, grid, block, params addr)
        self.launch_ctx: list[int] = []  # the context current at each launch
        self.kernel_impl = {}  # name -> fn(driver, req, params_addr, func_name)
        self.program_impl = {}  # name -> fn(driver, req, params_addr): the program's own work
        self.calls: list[str] = []
        self.fail: dict[str, str] = {}  # method -> error name to raise
        self.capturing = False
        # stream capture and graphs: stream -> FakeCapture; graph and exec handles -> FakeGraph / node lists
        self.captures: dict[int, FakeCapture] = {}
        self.graphs: dict[int, FakeGraph] = {}
        self.execs: dict[int, list[dict]] = {}
        self._mode = threading.local()
        self.allocations = 0
        self.frees = 0
        self.launch_rc = 0
        self.links = 0
        self.syncs = 0
        self.host_allocs = 0
        self.unloaded: list[int] = []  # modules of ours unloaded (module_unload)
        self.unloaded_in: list[int] = []  # the context current at each unload
        self.stale_launches = 0  # launches of a function whose module was unloaded: refused

    def _check(self, what):
        with self._lock:
            self.calls.append(what)
        if what in self.fail:
            raise DriverError(what, 2, self.fail[what])

    def _new(self):
        with self._lock:
            return next(self._ids)

    def error_name(self, rc):
        return {0: "CUDA_SUCCESS", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"}.get(rc, "CUresult")

    def ctx_get_current(self):
        return getattr(self._tls, "ctx", CTX0)

    def ctx_set_current(self, ctx):
        assert (ctx - CTX0) % 0x100 == 0 and 0 <= (ctx - CTX0) // 0x100 < len(self.devices), hex(ctx)
        self._tls.ctx = ctx

    def ctx_device(self):
        return (self.ctx_get_current() - CTX0) // 0x100

    def device_attribute(self, device, attr):
        cc = self.devices[device]
        return {75: cc[0], 76: cc[1], 16: self.sm_count, 38: 1 << 20, **H100_SM_LIMITS}[attr]

    def device_attr(self, attr):
        return self.device_attribute(self.ctx_device(), attr)

    def device_pci_bus_id(self, device):
        return f"0000:{0x18 + device:02x}:00.0"

    def _made(self, handle):
        self.made_in[handle] = self.ctx_get_current()
        return handle

    def module_load_data(self, image):
        self._check("module_load_data")
        h = self._made(self._new())
        self.modules[h] = image
        return h

    def module_unload(self, module):
        self._check("module_unload")
        if module not in self.modules:
            raise DriverError("module_unload", 400, "CUDA_ERROR_INVALID_HANDLE")
        del self.modules[module]
        self.unloaded.append(module)
        self.unloaded_in.append(self.ctx_get_current())

    def compile_ptx(self, ptx, arch):
        self._check("compile_ptx")
        self.links += 1
        return b"FAKECUBIN\0" + ptx.encode()

    def module_get_function(self, module, name):
        self._check("module_get_function")
        h = self._made(self._new())
        self.functions[h] = (module, name)
        return h

    def module_get_global(self, module, name, library=False):
        self._check("module_get_global")
        key = (module, name)
        with self._lock:
            if key not in self.globals:
                buf = (C.c_ubyte * 16)()
                self.globals[key] = buf
            return C.addressof(self.globals[key]), 16

    def memcpy_dtod_async(self, dst, src, size, stream):
        if not self._captured(stream, "memcpy", lambda: C.memmove(dst, src, size)):
            C.memmove(dst, src, size)

    def kernel_get_function(self, kernel):
        return kernel

    def func_get_attribute(self, func, attr):
        if (func, attr) in self.attrs:
            return self.attrs[(func, attr)]
        module, name = self.functions.get(func, (None, None))
        if name is None:
            return 0
        probed = b"__nt_buf" in self.modules.get(module, b"")
        return self.resources.get((name, probed), {}).get(attr, 0)

    def occupancy_max_blocks(self, func, threads, dynamic_shared):
        """The answer set in `occupancy` for (function, threads, dynamic bytes), else the driver's refusal."""
        self._check("occupancy_max_blocks")
        module, name = self.functions.get(func, (None, None))
        key = (name, b"__nt_buf" in self.modules.get(module, b"")) if name is not None else func
        got = self.occupancy.get((key, threads, dynamic_shared))
        if got is None:
            raise DriverError("cuOccupancyMaxActiveBlocksPerMultiprocessor", 801, "CUDA_ERROR_NOT_SUPPORTED")
        return got

    def func_set_attribute(self, func, attr, value):
        self.attrs[(func, attr)] = value

    def stream_is_capturing(self, stream):
        return self.capturing or stream in self.captures

    # -- stream capture and graphs (the model the runtime's graphs.py is tested against)
    def begin_capture(self, stream, mode=CAPTURE_MODE_GLOBAL):
        graph = FakeGraph(self._new(), self._new())
        self.graphs[graph.handle] = graph
        self.captures[stream] = FakeCapture(graph, mode, threading.get_ident())

    def end_capture(self, stream):
        return self.captures.pop(stream).graph.handle

    def _captured(self, stream, kind, run, **info):
        """Add a node to the graph `stream` is capturing (True), or say it is not capturing (False)."""
        cap = self.captures.get(stream)
        if cap is None:
            return False
        node = {"handle": self._new(), "kind": kind, "deps": list(cap.deps), "run": run, **info}
        cap.graph.nodes.append(node)
        cap.deps = [node["handle"]]
        return True

    def _unsafe(self, what):
        """Allocation while a capture forbids it (global mode: any thread; thread-local: the capturing one)."""
        if getattr(self._mode, "mode", CAPTURE_MODE_GLOBAL) == CAPTURE_MODE_RELAXED:
            return
        me = threading.get_ident()
        for cap in self.captures.values():
            if cap.mode == CAPTURE_MODE_GLOBAL or (cap.mode != CAPTURE_MODE_RELAXED and cap.thread == me):
                raise DriverError(what, 900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")

    def exchange_capture_mode(self, mode):
        self._check("exchange_capture_mode")
        old = getattr(self._mode, "mode", CAPTURE_MODE_GLOBAL)
        self._mode.mode = mode
        return old

    def stream_capture_info(self, stream):
        self._check("stream_capture_info")
        cap = self.captures[stream]
        return CaptureInfo(cap.graph.capture_id, cap.graph.handle, tuple(cap.deps))

    def update_capture_dependencies(self, stream, nodes):
        self._check("update_capture_dependencies")
        self.captures[stream].deps = list(nodes)

    def ctx_synchronize(self):
        self._check("ctx_synchronize")
        self._unsafe("ctx_synchronize")

    def graph_instantiate(self, graph):
        exe = self._new()
        self.execs[exe] = [dict(n) for n in self.graphs[graph].nodes]  # parameters are copied
        return exe

    def graph_launch(self, exe):
        """Run the nodes in an order their dependencies allow, each as soon as they allow it (the
        last added first among those ready), as a GPU may: a node that waits for no path from
        another may run before it. A chain runs in capture order."""
        pending = list(self.execs[exe])
        handles = {n["handle"] for n in pending}
        done = set()
        while pending:
            node = next(n for n in reversed(pending) if all(d in done or d not in handles for d in n["deps"]))
            pending.remove(node)
            node["run"]()
            done.add(node["handle"])

    def graph_make_edge_ordinary(self, graph, frm, to, port):
        """cuGraphRemoveDependencies_v2 then cuGraphAddDependencies_v2: the edge frm -> to made ordinary."""
        self._check("graph_make_edge_ordinary")
        node = next(n for n in self.graphs[graph].nodes if n["handle"] == to)
        i = node["deps"].index(frm)
        assert node["ports"][i] == port
        node["ports"][i] = 0

    def graph_edges(self, graph):
        """RealDriver.graph_edges: (from, to) for every ordinary dependency of every node (a programmatic
        edge, one with a port, is left out: its `to` may start before its `from` has completed)."""
        self._check("graph_edges")
        return [(d, n["handle"]) for n in self.graphs[graph].nodes
                for d, port in zip(n["deps"], n.get("ports") or [0] * len(n["deps"])) if not port]

    def graph_edges_typed(self, graph):
        """RealDriver.graph_edges_typed: (from, to, data) for every dependency of every node, data its
        CUgraphEdgeData as a u64 (a port: a programmatic edge from that port; 0: an ordinary edge)."""
        self._check("graph_edges")
        from neutrino.runtime.driver import PROGRAMMATIC_EDGE

        return [(d, n["handle"], PROGRAMMATIC_EDGE | port if port else 0) for n in self.graphs[graph].nodes
                for d, port in zip(n["deps"], n.get("ports") or [0] * len(n["deps"]))]

    def capture_programmatic(self, stream, port=1):
        """A kernel of the program's (nothing of ours sees it: cuBLAS's, say) captured into `stream` with
        programmatic stream serialization: its edges from the capture's last nodes are programmatic ones from
        `port` (1: when their blocks trigger or end; 2: once their blocks have begun)."""
        cap = self.captures[stream]
        node = {"handle": self._new(), "kind": "kernel", "deps": list(cap.deps), "run": lambda: None,
                "ports": [port] * len(cap.deps)}
        cap.graph.nodes.append(node)
        cap.deps = [node["handle"]]

    def graph_destroy(self, graph):
        del self.graphs[graph]

    def exec_destroy(self, exe):
        del self.execs[exe]

    def func_param_size(self, func, index):
        """cuFuncGetParamInfo's size: the fake's kernels take u64 and pointer arguments (8 bytes each)."""
        self._check("func_param_size")
        return 8

    def graph_kernel_node_set_params(self, node_handle, func, grid, block, shared_bytes, params):
        """cuGraphKernelNodeSetParams_v2 on a graph's node (executable graphs instantiated later copy it)."""
        self._check("graph_kernel_node_set_params")
        for graph in self.graphs.values():
            for node in graph.nodes:
                if node["handle"] == node_handle:
                    req = _OwnLaunch(tuple(grid), tuple(block), shared_bytes, 0)
                    node["func"], node["run"] = func, self._kernel_run(func, req, params)
                    return
        raise DriverError("cuGraphKernelNodeSetParams_v2", 400, "CUDA_ERROR_INVALID_HANDLE")

    def exec_kernel_node_set_params(self, exe, node_handle, func, req, params):
        """cuGraphExecKernelNodeSetParams: the exec's copy of the node runs `func` with `params`."""
        for node in self.execs[exe]:
            if node["handle"] == node_handle:
                node["func"], node["run"] = func, self._kernel_run(func, req, params)

    def _kernel_run(self, func, req, params, kind=0):
        return lambda: self._run_kernel(func, req, params, kind)

    def stream_synchronize(self, stream):
        self.syncs += 1

    def mem_alloc(self, size, stream):
        self._check("mem_alloc")
        self._unsafe("mem_alloc")
        self.allocations += 1
        buf = (C.c_ubyte * max(size, 16))()
        C.memset(buf, 0xAB, len(buf))  # garbage, so a missing memset shows
        addr = self._made(C.addressof(buf))
        with self._lock:
            self.mem[addr] = buf
        return addr, True

    def mem_alloc_sync(self, size):
        addr, _ = self.mem_alloc(size, 0)
        return addr

    def stream_create_nonblocking(self):
        return self._made(self._new())

    def stream_wait_event(self, stream, event):
        pass

    def mem_free(self, ptr, stream):
        self.frees += 1
        with self._lock:
            self.mem.pop(ptr)

    def mem_free_sync(self, ptr):
        self.mem_free(ptr, 0)

    def zero_async(self, ptr, size, stream):
        """RealDriver.zero_async (copies of pinned zeros there): the same effect as the memset here."""
        self.memset_async(ptr, size, stream)

    def memset_async(self, ptr, size, stream):
        self._check("memset_async")
        if not self._captured(stream, "memset", lambda: C.memset(ptr, 0, size)):
            C.memset(ptr, 0, size)

    def memcpy_dtoh_async(self, host, ptr, size, stream):
        self._check("memcpy_dtoh_async")
        if not self._captured(stream, "memcpy", lambda: C.memmove(host, ptr, size)):
            C.memmove(host, ptr, size)

    def host_alloc(self, size):
        self._unsafe("host_alloc")
        self._check("host_alloc")
        self.allocations += 1
        self.host_allocs += 1
        buf = (C.c_ubyte * size)()
        with self._lock:
            self.mem[C.addressof(buf)] = buf
        return C.addressof(buf), memoryview(buf).cast("B")

    def host_alloc_mapped(self, size):
        addr, view = self.host_alloc(size)
        return addr, view, addr  # one address space, as with UVA

    def memcpy_htod_async(self, dst, src, size, stream):
        self._check("memcpy_htod_async")
        C.memmove(dst, src, size)

    def graph_add_kernel_node(self, graph, deps, func, grid, block, params, ports=None):
        """cuGraphAddKernelNode after a capture ended (`ports`: cuGraphAddNode_v2, programmatic edges
        from the dependencies with a port): the node runs after `deps`, here once they have completed
        (appended last, a topological order of the fake's graph)."""
        ports = list(ports or [0] * len(deps))
        self._check("graph_add_kernel_node")
        if any(ports):
            self._check("graph_add_programmatic_node")
        node = {"handle": self._new(), "kind": "kernel", "deps": list(deps), "func": func, "ports": ports,
                "run": self._kernel_run(func, _OwnLaunch(tuple(grid), tuple(block), 0, 0), params)}
        self.graphs[graph].nodes.append(node)
        return node["handle"]

    def host_free(self, addr):
        self.frees += 1
        with self._lock:
            self.mem.pop(addr)

    def event_create(self, timing=True):
        return self._made(self._new())

    def event_record(self, ev, stream):
        pass

    def event_synchronize(self, ev):
        pass

    def event_elapsed_ms(self, a, b):
        return 0.005

    def event_destroy(self, ev):
        pass

    def launch(self, kind, func, req, params):
        self._check("launch")
        if self.launch_rc:
            return self.launch_rc
        if self._captured(req.stream or 1, "kernel", self._kernel_run(func, req, params, kind), func=func):
            return 0
        self._run_kernel(func, req, params, kind)
        return 0

    def _run_kernel(self, func, req, params, kind=0):
        module, _ = self.functions.get(func, (None, None))
        if module is not None and module in self.unloaded:
            self.stale_launches += 1  # the real driver would fault or run another kernel's code
            return
        with self._lock:
            self.launches.append((kind, func, req.grid, req.block, params))
            self.launch_ctx.append(self.ctx_get_current())
        module, name = self.functions.get(func, (None, None))
        if name == graph_ring.APPEND_KERNEL:
            emulate_graph_append(params, req.grid[1])
            return
        probed = b"__nt_buf" in self.modules.get(module, b"")
        impl = self.kernel_impl.get(name)
        if impl is not None and probed:  # only probed code writes maps
            _CHAIN.on, _CHAIN.head = b"%nt_ch_adv" in self.modules.get(module, b""), 0  # the graph_chain variant
            try:
                impl(self, req, params, name)
            finally:
                head, _CHAIN.on = _CHAIN.head, False
            if head:
                emulate_chain_advance(head)
        program = self.program_impl.get(name)
        if program is not None:  # what the kernel computes for the program, probed or not
            program(self, req, params)


class _OwnLaunch:
    """The request fields the fake driver reads for a launch of ours."""

    def __init__(self, grid, block, shared_bytes, stream):
        self.grid, self.block, self.shared_bytes, self.stream = grid, block, shared_bytes, stream


def _params(params_addr: int, struct):
    return struct.from_address((C.c_void_p * 1).from_address(params_addr)[0])


def emulate_graph_append(params_addr: int, nodes: int) -> None:
    """What the append kernel (neutrino/runtime/cudagraphs/ring.py) does, all chunks of a node at once:
    count the replay; copy a selected one into the next device slot unless the ring is full (nothing
    drains concurrently here: waiting would time out), publish its flag; zero the maps."""
    p = _params(params_addr, graph_ring.AppendParams)

    def selected(r):
        return not (r < p.start or r >= p.stop or (r - p.start) % p.every)

    for b in range(nodes):
        d = graph_ring.NodeDesc.from_address(p.desc + b * graph_ring.DESC_BYTES)
        state, mirror = (C.c_uint64 * 3).from_address(d.state), (C.c_uint64 * 3).from_address(d.ring)
        runs, written, consumed = state[0], state[1], C.c_uint64.from_address(d.consumed).value
        replay = runs + p.skip  # the replays the host left out (shim/graphs.c) never ran the append kernel
        state[0], mirror[0] = runs + 1, replay + 1
        gate = C.c_uint32.from_address(d.src - graph_ring.GATE_OFFSET)
        chosen = bool(p.host) or selected(replay)  # a replay the host picked: selected, ran ungated
        ran_gated = 0 if p.host else gate.value
        if not p.host:
            gate.value = 0 if selected(replay + 1) else 1  # the next replay's gate
        if ran_gated and not chosen:
            continue  # the probe wrote nothing: the maps are still zero
        if chosen:
            if written - consumed < d.nslots:
                slot = written % d.nslots
                C.memmove(d.slots + slot * d.stride, d.src, d.bytes)
                C.c_uint64.from_address(d.ring + graph_ring.COUNTERS_BYTES + 8 * slot).value = replay + 1
                state[1] = mirror[1] = written + 1
            else:
                state[2] += 1
                mirror[2] = state[2]
        C.memset(d.src, 0, d.bytes)  # the maps read zero at the next replay


def param_u64(params_addr: int, i: int) -> int:
    """The u64 value of parameter i of a launch's params array."""
    arr = (C.c_void_p * (i + 1)).from_address(params_addr)
    return C.c_uint64.from_address(arr[i]).value


def probe_buffer(params_addr: int, i: int) -> int | None:
    """The map buffer parameter i as the probed kernel's prologue reads it (passes/buffers.py): bit 0
    set means a graph node, whose gate (the u32 8 bytes before the buffer) is 0 when the replay
    probes; None when the probe is gated off. In the graph_chain variant (passes/graph_chain.py) the
    tagged pointer is a head instead: the buffer is its `cur` (None: 0), and the head is noted for the
    advance the kernel's thread 0 of block 0 makes at its exit (emulate_chain_advance)."""
    value = param_u64(params_addr, i)
    buf = value & ~1
    if value & 1 and getattr(_CHAIN, "on", False):
        _CHAIN.head = buf
        return C.c_uint64.from_address(buf + graph_chain.CUR).value or None
    if value & 1 and C.c_uint32.from_address(buf - graph_ring.GATE_OFFSET).value:
        return None
    return buf


_CHAIN = threading.local()  # a graph_chain kernel running: `on`, and the head its first buffer parameter named


def emulate_chain_advance(head: int) -> None:
    """The advance a graph_chain kernel makes at its exit (passes/graph_chain.advance, modelled by
    neutrino.runtime.cudagraphs.chain.device_advance): the head at `adv` published and given its next slot (words
    0, 4 and 5 stored, as the PTX stores them, and the slot's tag)."""
    adv = C.c_uint64.from_address(head + graph_chain.ADV).value
    if not adv:
        return
    words, tag = graph_chain.device_advance(graph_chain.unpack(C.string_at(adv, 8 * graph_chain.WORDS)))
    if tag is not None:
        C.c_uint64.from_address(tag[0]).value = tag[1]
    for w in (graph_chain.CUR, graph_chain.WRITTEN, graph_chain.DROPPED):
        C.c_uint64.from_address(adv + w).value = words[w // 8]


def param_u32(params_addr: int, i: int) -> int:
    arr = (C.c_void_p * (i + 1)).from_address(params_addr)
    return C.c_uint32.from_address(arr[i]).value


class FakeShim:
    def __init__(self):
        self.probed: set[int] = set()
        self.removed: list[int] = []
        self.forgotten: list[int] = []

    def probe_add(self, h):
        self.probed.add(h)

    def probe_remove(self, h):
        self.probed.discard(h)
        self.removed.append(h)

    def forget(self, h):
        self.probed.discard(h)
        self.forgotten.append(h)
