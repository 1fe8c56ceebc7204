"""The few CUDA driver calls the runtime makes itself, through ctypes.

The pointers come from the shim (`neutrino_real_sym`), never from `dlsym` on
libcuda (which the shim interposes), so the runtime's own calls are never seen
as the program's. Tests use `tests/fakedriver.py`, a Python object with the
same methods.
"""

from __future__ import annotations

import ctypes as C

import attrs

from neutrino.errors import NeutrinoError

CUDA_SUCCESS = 0

# CUfunction_attribute values that are settable and matter for launching.
FUNC_ATTR_MAX_DYNAMIC_SHARED = 8
FUNC_ATTR_CARVEOUT = 9
FUNC_ATTR_NON_PORTABLE_CLUSTER = 14
FUNC_ATTR_CLUSTER_SCHED_POLICY = 15
COPIED_FUNC_ATTRS = (FUNC_ATTR_MAX_DYNAMIC_SHARED, FUNC_ATTR_CARVEOUT, FUNC_ATTR_NON_PORTABLE_CLUSTER, FUNC_ATTR_CLUSTER_SCHED_POLICY)

DEV_ATTR_SM_COUNT = 16
DEV_ATTR_L2_SIZE = 38
DEV_ATTR_CC_MAJOR = 75
DEV_ATTR_CC_MINOR = 76

CU_STREAM_LEGACY = 0x1
CU_STREAM_PER_THREAD = 0x2
CU_EVENT_DISABLE_TIMING = 0x2
CAPTURE_MODE_GLOBAL, CAPTURE_MODE_THREAD_LOCAL, CAPTURE_MODE_RELAXED = range(3)  # CUstreamCaptureMode
CAPTURE_STATUS_ACTIVE = 1
SET_CAPTURE_DEPENDENCIES = 1  # CU_STREAM_SET_CAPTURE_DEPENDENCIES

# Launch kinds, shared with shim/preload.c.
LAUNCH_KERNEL, LAUNCH_KERNEL_PTSZ, LAUNCH_EX, LAUNCH_EX_PTSZ, LAUNCH_COOP, LAUNCH_COOP_PTSZ = range(6)
LAUNCH_SYMBOLS = (
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz",
)


class DriverError(NeutrinoError):
    def __init__(self, call: str, code: int, name: str = ""):
        self.call, self.code, self.name = call, code, name
        super().__init__(f"{call} failed: {name or 'CUresult'} ({code})")


def function_of(drv, handle: int) -> int:
    """A CUfunction for a launched `handle`: programs built by nvcc 12+ launch a CUkernel
    (cuLibraryGetKernel), which cuLaunchKernel takes but cuFuncGetAttribute refuses
    (CUDA_ERROR_INVALID_HANDLE, seen on an H200): its function in the current context
    (cuKernelGetFunction) answers for it."""
    try:
        drv.func_get_attribute(handle, 4)  # CU_FUNC_ATTRIBUTE_NUM_REGS: does it take the handle?
        return handle
    except DriverError:
        return drv.kernel_get_function(handle)


class CUlaunchConfig(C.Structure):
    _fields_ = [
        ("gridDimX", C.c_uint), ("gridDimY", C.c_uint), ("gridDimZ", C.c_uint),
        ("blockDimX", C.c_uint), ("blockDimY", C.c_uint), ("blockDimZ", C.c_uint),
        ("sharedMemBytes", C.c_uint), ("hStream", C.c_void_p),
        ("attrs", C.c_void_p), ("numAttrs", C.c_uint),
    ]


CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP = 0x01, 0x02

class KernelNodeParams(C.Structure):
    """CUDA_KERNEL_NODE_PARAMS (v1)."""

    _fields_ = [("func", C.c_void_p), ("gridDimX", C.c_uint), ("gridDimY", C.c_uint), ("gridDimZ", C.c_uint),
                ("blockDimX", C.c_uint), ("blockDimY", C.c_uint), ("blockDimZ", C.c_uint),
                ("sharedMemBytes", C.c_uint), ("kernelParams", C.POINTER(C.c_void_p)),
                ("extra", C.POINTER(C.c_void_p))]


class KernelNodeParamsV2(C.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2: v1 and the CUkernel and context."""

    _fields_ = [*KernelNodeParams._fields_, ("kern", C.c_void_p), ("ctx", C.c_void_p)]


class GraphNodeParams(C.Structure):
    """CUgraphNodeParams of a kernel node (cuGraphAddNode_v2): the type (0: kernel), the union of 232
    bytes whose start is the kernel's parameters, 8 reserved bytes."""

    _fields_ = [("type", C.c_int), ("reserved0", C.c_int * 3), ("kernel", KernelNodeParamsV2),
                ("rest", C.c_ubyte * (232 - C.sizeof(KernelNodeParamsV2))), ("reserved2", C.c_longlong)]


PROGRAMMATIC_EDGE = 1 << 16  # CUgraphEdgeData as a u64: byte 0 from_port, byte 1 to_port, byte 2 type (1: programmatic)
P = C.c_void_p
U = C.c_uint
SZ = C.c_size_t
PP = C.POINTER(C.c_void_p)

# exported name -> argtypes (all return CUresult = int)
_SIGNATURES = {
    "cuGetErrorName": [C.c_int, C.POINTER(C.c_char_p)],
    "cuCtxGetCurrent": [PP],
    "cuCtxSetCurrent": [P],
    "cuCtxGetDevice": [C.POINTER(C.c_int)],
    "cuDeviceGetAttribute": [C.POINTER(C.c_int), C.c_int, C.c_int],
    "cuDeviceGetPCIBusId": [C.c_char_p, C.c_int, C.c_int],
    "cuModuleLoadDataEx": [PP, P, U, P, P],
    "cuModuleGetFunction": [PP, P, C.c_char_p],
    "cuModuleUnload": [P],
    "cuKernelGetFunction": [PP, P],
    "cuModuleGetGlobal_v2": [C.POINTER(C.c_uint64), C.POINTER(SZ), P, C.c_char_p],
    "cuLibraryGetGlobal": [C.POINTER(C.c_uint64), C.POINTER(SZ), P, C.c_char_p],
    "cuMemcpyDtoDAsync_v2": [C.c_uint64, C.c_uint64, SZ, P],
    "cuFuncGetAttribute": [C.POINTER(C.c_int), C.c_int, P],
    "cuFuncGetParamInfo": [P, SZ, C.POINTER(SZ), C.POINTER(SZ)],
    "cuFuncSetAttribute": [P, C.c_int, C.c_int],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [C.POINTER(C.c_int), P, C.c_int, SZ],
    "cuStreamIsCapturing": [P, C.POINTER(C.c_int)],
    "cuMemAllocAsync": [C.POINTER(C.c_uint64), SZ, P],
    "cuMemFreeAsync": [C.c_uint64, P],
    "cuMemAlloc_v2": [C.POINTER(C.c_uint64), SZ],
    "cuMemFree_v2": [C.c_uint64],
    "cuMemsetD8Async": [C.c_uint64, C.c_ubyte, SZ, P],
    "cuMemcpyDtoHAsync_v2": [P, C.c_uint64, SZ, P],
    "cuMemHostAlloc": [PP, SZ, U],
    "cuMemFreeHost": [P],
    "cuMemHostGetDevicePointer_v2": [C.POINTER(C.c_uint64), P, U],
    "cuMemcpyHtoDAsync_v2": [C.c_uint64, P, SZ, P],
    "cuGraphAddKernelNode_v2": [PP, P, P, SZ, P],
    "cuGraphKernelNodeSetParams_v2": [P, P],
    "cuGraphGetEdges_v2": [P, P, P, P, C.POINTER(SZ)],
    "cuGraphAddNode_v2": [PP, P, P, P, SZ, P],
    "cuGraphRemoveDependencies_v2": [P, P, P, P, SZ],
    "cuGraphAddDependencies_v2": [P, P, P, P, SZ],
    "cuGraphGetEdges": [P, P, P, C.POINTER(SZ)],
    "cuGraphNodeFindInClone": [PP, P, P],
    "cuEventCreate": [PP, U],
    "cuEventRecord": [P, P],
    "cuEventSynchronize": [P],
    "cuEventElapsedTime": [C.POINTER(C.c_float), P, P],
    "cuEventDestroy_v2": [P],
    "cuStreamSynchronize": [P],
    "cuStreamCreate": [PP, U],
    "cuStreamWaitEvent": [P, P, U],
    "cuLaunchKernel": [P, U, U, U, U, U, U, U, P, P, P],
    "cuLaunchKernel_ptsz": [P, U, U, U, U, U, U, U, P, P, P],
    "cuLaunchKernelEx": [P, P, P, P],
    "cuLaunchKernelEx_ptsz": [P, P, P, P],
    "cuLaunchCooperativeKernel": [P, U, U, U, U, U, U, U, P, P],
    "cuLaunchCooperativeKernel_ptsz": [P, U, U, U, U, U, U, U, P, P],
    # stream capture (CUDA graphs: cudagraphs/capture.py)
    "cuThreadExchangeStreamCaptureMode": [C.POINTER(C.c_int)],
    "cuStreamGetCaptureInfo_v2": [P, C.POINTER(C.c_int), C.POINTER(C.c_uint64), PP, C.POINTER(PP), C.POINTER(SZ)],
    "cuStreamGetCaptureInfo_v3": [P, C.POINTER(C.c_int), C.POINTER(C.c_uint64), PP, C.POINTER(PP), PP, C.POINTER(SZ)],
    "cuStreamUpdateCaptureDependencies": [P, P, SZ, U],
    "cuStreamUpdateCaptureDependencies_v2": [P, P, P, SZ, U],
    "cuCtxSynchronize": [],
}
_FALLBACK_NAMES = {"cuEventElapsedTime": ("cuEventElapsedTime_v2",)}

# Calls of the launch path that only enqueue work: made WITHOUT releasing the GIL.
# ctypes releases the GIL around every foreign call; a thread that gives it up a
# dozen times per launch waits each time for our writer thread to hand it back
# (a convoy: up to the interpreter's switch interval per call). Calls that can
# block (synchronisation, allocation, loading, the launch itself) still release it.
_KEEP_GIL = frozenset({
    "cuCtxGetCurrent", "cuStreamIsCapturing", "cuFuncGetAttribute", "cuMemsetD8Async",
    "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuEventRecord", "cuStreamWaitEvent", "cuGetErrorName",
})


@attrs.frozen
class CaptureInfo:
    """What cuStreamGetCaptureInfo says about a capturing stream."""

    capture_id: int
    graph: int  # the CUgraph being built
    dependencies: tuple[int, ...]  # the nodes the next captured node will depend on


# Calls that put work on a stream: each is told to the shim (`note_stream_work`), which counts those made while a
# capture of the program is open (issue 24; the exit event's `stream_work_in_capture`).
_STREAM_WORK = frozenset(("cuMemsetD8Async", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpyHtoDAsync_v2",
                          "cuEventRecord", "cuStreamWaitEvent", "cuMemcpy2DAsync_v2"))
NT_WORK_RUNTIME = 4  # shim/writer.h


class RealDriver:
    """ctypes bindings resolved through `resolve(name) -> address or 0`."""

    def __init__(self, resolve):
        self._resolve = resolve
        self._fns: dict[str, object] = {}
        self.note_stream_work = None  # the shim's neutrino_note_stream_work, once bootstrap has the shim
        self.zero_with = None  # the shim's neutrino_zero_async (its pinned chunk: one per process), likewise
        self._ptxas: tuple[str, ...] | None = None  # found at the first compile (empty: none)

    def _fn(self, name: str):
        fn = self._fns.get(name)
        if fn is not None:
            return fn
        addr = self._resolve(name)
        for alt in _FALLBACK_NAMES.get(name, ()):
            addr = addr or self._resolve(alt)
        if not addr:
            raise DriverError(name, -1, "symbol not found in libcuda")
        proto = C.PYFUNCTYPE if name in _KEEP_GIL else C.CFUNCTYPE
        fn = proto(C.c_int, *_SIGNATURES[name])(addr)
        self._fns[name] = fn
        return fn

    def _call(self, name: str, *args) -> None:
        if name in _STREAM_WORK and self.note_stream_work is not None:
            self.note_stream_work(NT_WORK_RUNTIME)
        rc = self._fn(name)(*args)
        if rc != CUDA_SUCCESS:
            raise DriverError(name, rc, self.error_name(rc))

    def error_name(self, rc: int) -> str:
        s = C.c_char_p()
        try:
            if self._fn("cuGetErrorName")(rc, C.byref(s)) == 0 and s.value:
                return s.value.decode()
        except DriverError:
            pass
        return "CUresult"

    # -- context / device
    def ctx_get_current(self) -> int:
        c = C.c_void_p()
        self._call("cuCtxGetCurrent", C.byref(c))
        return c.value or 0

    def ctx_set_current(self, ctx: int) -> None:
        self._call("cuCtxSetCurrent", ctx)

    def device_attr(self, attr: int) -> int:
        """An attribute of the current context's device."""
        return self.device_attribute(self.ctx_device(), attr)

    def ctx_device(self) -> int:
        """The ordinal of the current context's device."""
        dev = C.c_int()
        self._call("cuCtxGetDevice", C.byref(dev))
        return dev.value

    def device_attribute(self, device: int, attr: int) -> int:
        v = C.c_int()
        self._call("cuDeviceGetAttribute", C.byref(v), attr, device)
        return v.value

    def device_pci_bus_id(self, device: int) -> str:
        """`domain:bus:device.function`, the name nvidia-smi and NCCL print."""
        buf = C.create_string_buffer(32)
        self._call("cuDeviceGetPCIBusId", buf, len(buf), device)
        return buf.value.decode(errors="replace")

    # -- modules and functions
    def module_load_data(self, image: bytes) -> int:
        m = C.c_void_p()
        self._call("cuModuleLoadDataEx", C.byref(m), C.c_char_p(image), 0, None, None)
        return m.value

    def module_unload(self, module: int) -> None:
        self._call("cuModuleUnload", module)

    def compile_ptx(self, ptx: str, arch: tuple[int, int]) -> bytes:
        """Probed PTX compiled to a cubin as a whole program by ptxas (instrument/ptxas.py: the driver's
        linker would compile it as relocatable code, with more registers), kept in the disk cache so
        later runs skip the compile. DriverError where no ptxas is found or it fails: the caller then
        loads the PTX itself (the driver's JIT)."""
        from neutrino.runtime.instrument import ptxas

        if self._ptxas is None:
            self._ptxas = tuple(ptxas.find_ptxases())
        if not self._ptxas:
            raise DriverError("ptxas", -1, "no ptxas found (the driver's JIT compiles the PTX)")
        refusals = []
        for path in self._ptxas:
            try:
                cubin = ptxas.compile_whole(path, ptx, arch)
            except ptxas.PtxasError as e:
                refusals.append(str(e))
                if ptxas.too_old(refusals[-1]):
                    continue  # a newer ptxas further on may take this PTX ISA version
                break
            if path != self._ptxas[0]:  # this one first from now on: the older ones would refuse again
                self._ptxas = (path, *(p for p in self._ptxas if p != path))  # one assignment: threads may compile
            return cubin
        raise DriverError("ptxas", -1, "; ".join(refusals))

    def module_get_function(self, module: int, name: str) -> int:
        f = C.c_void_p()
        self._call("cuModuleGetFunction", C.byref(f), module, name.encode())
        return f.value

    def kernel_get_function(self, kernel: int) -> int:
        f = C.c_void_p()
        self._call("cuKernelGetFunction", C.byref(f), kernel)
        return f.value

    def module_get_global(self, module: int, name: str, library: bool = False) -> tuple[int, int]:
        """(address, bytes) of a module-scope variable of a module (or, with library=True, a CUlibrary)."""
        p, n = C.c_uint64(), C.c_size_t()
        call = "cuLibraryGetGlobal" if library else "cuModuleGetGlobal_v2"
        self._call(call, C.byref(p), C.byref(n), module, name.encode())
        return p.value, n.value

    def memcpy_dtod_async(self, dst: int, src: int, size: int, stream: int) -> None:
        self._call("cuMemcpyDtoDAsync_v2", dst, src, size, stream)

    def func_get_attribute(self, func: int, attr: int) -> int:
        v = C.c_int()
        self._call("cuFuncGetAttribute", C.byref(v), attr, func)
        return v.value

    def func_set_attribute(self, func: int, attr: int, value: int) -> None:
        self._call("cuFuncSetAttribute", func, attr, value)

    def occupancy_max_blocks(self, func: int, threads: int, dynamic_shared: int) -> int:
        """Resident blocks per SM of `func` for a block of `threads` and `dynamic_shared` bytes
        (the driver's own occupancy calculation; probe cost, spec/tools.md)."""
        n = C.c_int()
        self._call("cuOccupancyMaxActiveBlocksPerMultiprocessor", C.byref(n), func, threads, dynamic_shared)
        return n.value

    # -- streams, memory, events
    def stream_is_capturing(self, stream: int) -> bool:
        st = C.c_int()
        self._call("cuStreamIsCapturing", stream, C.byref(st))
        return st.value != 0

    def stream_synchronize(self, stream: int) -> None:
        self._call("cuStreamSynchronize", stream)

    def mem_alloc(self, size: int, stream: int) -> tuple[int, bool]:
        """Device memory for one buffer: (address, stream_ordered). Stream-ordered
        allocations are freed with `mem_free`; others with `mem_free_sync` once
        the launch has finished."""
        p = C.c_uint64()
        try:
            self._call("cuMemAllocAsync", C.byref(p), max(size, 16), stream)
            return p.value, True
        except DriverError as e:
            if e.name == "CUDA_ERROR_OUT_OF_MEMORY":
                raise
        self._call("cuMemAlloc_v2", C.byref(p), max(size, 16))
        return p.value, False

    def mem_alloc_sync(self, size: int) -> int:
        """Device memory kept by our buffer pool for the process's life (cuMemAlloc: usable on any stream)."""
        p = C.c_uint64()
        self._call("cuMemAlloc_v2", C.byref(p), max(size, 16))
        return p.value

    def stream_create_nonblocking(self) -> int:
        """A stream of ours that does not synchronise with the legacy default stream."""
        s = C.c_void_p()
        self._call("cuStreamCreate", C.byref(s), 1)  # CU_STREAM_NON_BLOCKING
        return s.value

    def stream_wait_event(self, stream: int, event: int) -> None:
        self._call("cuStreamWaitEvent", stream, event, 0)

    def mem_free(self, ptr: int, stream: int) -> None:
        self._call("cuMemFreeAsync", ptr, stream)

    def mem_free_sync(self, ptr: int) -> None:
        self._call("cuMemFree_v2", ptr)

    def memset_async(self, ptr: int, size: int, stream: int) -> None:
        """A driver memset (a kernel of the driver's): only where speed matters more than the process's later
        graph replays (--benchmark's L2 flush, a benchmark's knob); zero_async otherwise."""
        self._call("cuMemsetD8Async", ptr, 0, size, stream)

    def zero_async(self, ptr: int, size: int, stream: int) -> None:
        """Zero `size` bytes at `ptr` on `stream` through the shim's neutrino_zero_async (`zero_with`): copies of its
        pinned zeroes (a copy engine), never a driver memset where it can help it: one memset in a process left a
        torch.compile decode graph's later replays 12% slower for the rest of the process (docs/overhead.md,
        "Session 14"). Without the shim's function (a driver made outside bootstrap), the driver's memset."""
        if self.zero_with is None:
            self.memset_async(ptr, size, stream)
            return
        if self.note_stream_work is not None:
            self.note_stream_work(NT_WORK_RUNTIME)
        rc = self.zero_with(ptr, size, stream)
        if rc != CUDA_SUCCESS:
            raise DriverError("neutrino_zero_async", rc, self.error_name(rc))

    def memcpy_dtoh_async(self, host: int, ptr: int, size: int, stream: int) -> None:
        self._call("cuMemcpyDtoHAsync_v2", host, ptr, size, stream)

    def host_alloc(self, size: int):
        """Pinned host memory: (address, writable memoryview over it)."""
        p = C.c_void_p()
        self._call("cuMemHostAlloc", C.byref(p), max(size, 16), 0)
        view = memoryview((C.c_ubyte * max(size, 16)).from_address(p.value)).cast("B")
        return p.value, view

    def host_alloc_mapped(self, size: int):
        """Pinned host memory the device reads and writes too: (address, memoryview, device address)."""
        p = C.c_void_p()
        self._call("cuMemHostAlloc", C.byref(p), max(size, 16), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)
        view = memoryview((C.c_ubyte * max(size, 16)).from_address(p.value)).cast("B")
        dev = C.c_uint64()
        try:
            self._call("cuMemHostGetDevicePointer_v2", C.byref(dev), p, 0)
        except DriverError:
            self._call("cuMemFreeHost", p)
            raise
        return p.value, view, dev.value

    def memcpy_htod_async(self, dst: int, src: int, size: int, stream: int) -> None:
        self._call("cuMemcpyHtoDAsync_v2", dst, src, size, stream)

    def graph_add_kernel_node(self, graph: int, deps, func: int, grid, block, params: int, ports=None) -> int:
        """A kernel node of ours added to a graph (after its capture ended), after `deps`; its handle.
        `ports` (CUDA 12.3+), one per dependency: 0 an ordinary edge, else a programmatic edge from
        that kernel-node port (1: the node may start once the dependency's blocks have all exited,
        2: once they have all started)."""
        p = KernelNodeParamsV2(func=func, gridDimX=grid[0], gridDimY=grid[1], gridDimZ=grid[2], blockDimX=block[0],
                               blockDimY=block[1], blockDimZ=block[2], sharedMemBytes=0,
                               kernelParams=C.cast(params, C.POINTER(C.c_void_p)))
        arr = (C.c_void_p * max(1, len(deps)))(*deps)
        node = C.c_void_p()
        if ports and any(ports):
            edges = (C.c_uint64 * len(deps))(*[PROGRAMMATIC_EDGE | p if p else 0 for p in ports])
            self._call("cuGraphAddNode_v2", C.byref(node), graph, arr, edges, len(deps),
                       C.byref(GraphNodeParams(type=0, kernel=p)))
        else:
            self._call("cuGraphAddKernelNode_v2", C.byref(node), graph, arr, len(deps), C.byref(p))
        return node.value

    def func_param_size(self, func: int, index: int) -> int:
        """Bytes of parameter `index` of `func` (cuFuncGetParamInfo, CUDA 12.4+)."""
        offset, size = C.c_size_t(), C.c_size_t()
        self._call("cuFuncGetParamInfo", func, index, C.byref(offset), C.byref(size))
        return size.value

    def graph_kernel_node_set_params(self, node: int, func: int, grid, block, shared_bytes: int, params: int) -> None:
        """cuGraphKernelNodeSetParams_v2 on a kernel node of a graph (not yet instantiated): it runs `func` with the
        parameters at `params` (copied by the driver), in the launch shape given."""
        p = KernelNodeParamsV2(func=func, gridDimX=grid[0], gridDimY=grid[1], gridDimZ=grid[2], blockDimX=block[0],
                               blockDimY=block[1], blockDimZ=block[2], sharedMemBytes=shared_bytes,
                               kernelParams=C.cast(params, C.POINTER(C.c_void_p)))
        self._call("cuGraphKernelNodeSetParams_v2", node, C.byref(p))

    def graph_edges(self, graph: int) -> list[tuple[int, int]]:
        """The graph's edges (from, to) along which `to` starts only once `from` has completed: those
        with default edge data (CUDA 12.3+ edges may be programmatic, `to` starting before `from`
        ends: left out). Before 12.3 every edge is such an edge."""
        return [(a, b) for a, b, data in self.graph_edges_typed(graph) if not data]

    def graph_edges_typed(self, graph: int) -> list[tuple[int, int, int]]:
        """Every edge of the graph as (from, to, data): data is its CUgraphEdgeData as a u64 (byte 0 the
        from_port, byte 1 the to_port, byte 2 the type; 0 an ordinary edge). Before CUDA 12.3 (no
        cuGraphGetEdges_v2) every edge is ordinary."""
        n = C.c_size_t()
        try:
            self._call("cuGraphGetEdges_v2", graph, None, None, None, C.byref(n))
            v2 = True
        except DriverError as e:
            if e.code != -1:
                raise
            self._call("cuGraphGetEdges", graph, None, None, C.byref(n))
            v2 = False
        if not n.value:
            return []
        count = n.value
        src, dst = (C.c_void_p * count)(), (C.c_void_p * count)()
        data = (C.c_uint64 * count)()  # CUgraphEdgeData: 8 bytes, all zero for a default edge
        if v2:
            self._call("cuGraphGetEdges_v2", graph, src, dst, data, C.byref(n))
        else:
            self._call("cuGraphGetEdges", graph, src, dst, C.byref(n))
        return [(src[i] or 0, dst[i] or 0, data[i]) for i in range(min(n.value, count))]

    def graph_node_find_in_clone(self, node: int, clone: int) -> int:
        """The node of graph `clone` (a cuGraphClone of the graph holding `node`) that `node` became."""
        out = C.c_void_p()
        self._call("cuGraphNodeFindInClone", C.byref(out), node, clone)
        return out.value or 0

    def graph_make_edge_ordinary(self, graph: int, frm: int, to: int, port: int) -> None:
        """The programmatic edge frm -> to from kernel-node port `port` becomes an ordinary edge."""
        a, b = C.c_void_p(frm), C.c_void_p(to)
        data = C.c_uint64(PROGRAMMATIC_EDGE | port)
        self._call("cuGraphRemoveDependencies_v2", graph, C.byref(a), C.byref(b), C.byref(data), 1)
        try:
            self._call("cuGraphAddDependencies_v2", graph, C.byref(a), C.byref(b), None, 1)
        except DriverError:  # never leave `to` without its dependency on `frm`
            self._call("cuGraphAddDependencies_v2", graph, C.byref(a), C.byref(b), C.byref(data), 1)
            raise

    def host_free(self, addr: int) -> None:
        self._call("cuMemFreeHost", addr)

    def event_create(self, timing: bool = True) -> int:
        e = C.c_void_p()
        self._call("cuEventCreate", C.byref(e), 0 if timing else CU_EVENT_DISABLE_TIMING)
        return e.value

    def event_record(self, event: int, stream: int) -> None:
        self._call("cuEventRecord", event, stream)

    def event_synchronize(self, event: int) -> None:
        self._call("cuEventSynchronize", event)

    def event_elapsed_ms(self, start: int, end: int) -> float:
        v = C.c_float()
        self._call("cuEventElapsedTime", C.byref(v), start, end)
        return v.value

    def event_destroy(self, event: int) -> None:
        self._call("cuEventDestroy_v2", event)

    # -- stream capture (cudagraphs/capture.py)
    def exchange_capture_mode(self, mode: int) -> int:
        """Set this thread's capture mode (cuThreadExchangeStreamCaptureMode); returns the previous one."""
        m = C.c_int(mode)
        self._call("cuThreadExchangeStreamCaptureMode", C.byref(m))
        return m.value

    def stream_capture_info(self, stream: int) -> CaptureInfo:
        status, cid, graph = C.c_int(), C.c_uint64(), C.c_void_p()
        deps, n = PP(), C.c_size_t()
        try:
            self._call("cuStreamGetCaptureInfo_v2", stream, C.byref(status), C.byref(cid), C.byref(graph),
                       C.byref(deps), C.byref(n))
        except DriverError as e:
            if e.code != -1:  # the call failed (not missing): say so
                raise
            edges = C.c_void_p()
            self._call("cuStreamGetCaptureInfo_v3", stream, C.byref(status), C.byref(cid), C.byref(graph),
                       C.byref(deps), C.byref(edges), C.byref(n))
        if status.value != CAPTURE_STATUS_ACTIVE:
            raise DriverError("cuStreamGetCaptureInfo", -2, f"capture status {status.value}, not active")
        return CaptureInfo(cid.value, graph.value or 0, tuple(deps[i] or 0 for i in range(n.value)))

    def update_capture_dependencies(self, stream: int, nodes: tuple[int, ...]) -> None:
        """Make `nodes` the capturing stream's dependency set (what the next captured work waits for)."""
        arr = (C.c_void_p * max(len(nodes), 1))(*nodes)
        try:
            self._call("cuStreamUpdateCaptureDependencies", stream, arr, len(nodes), SET_CAPTURE_DEPENDENCIES)
        except DriverError as e:
            if e.code != -1:
                raise
            self._call("cuStreamUpdateCaptureDependencies_v2", stream, arr, None, len(nodes),
                       SET_CAPTURE_DEPENDENCIES)

    def ctx_synchronize(self) -> None:
        self._call("cuCtxSynchronize")

    # -- launches
    def launch(self, kind: int, func: int, req, params: int) -> int:
        """Launch `func` like request `req` did, with the given params array; returns the CUresult."""
        name = LAUNCH_SYMBOLS[kind]
        fn = self._fn(name)
        if kind in (LAUNCH_EX, LAUNCH_EX_PTSZ):
            return fn(req.config, func, params, None)
        g, b = req.grid, req.block
        if kind in (LAUNCH_COOP, LAUNCH_COOP_PTSZ):
            return fn(func, *g, *b, req.shared_bytes, req.stream, params)
        return fn(func, *g, *b, req.shared_bytes, req.stream, params, None)
