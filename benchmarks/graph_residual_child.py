"""The program benchmarks/graph_residual.py runs (`--isolate`), plain and under neutrino.

Two CUDA graphs of 8 tiny Triton kernels each (graph8's shape: 256 blocks of 4 warps, ~2 µs a kernel),
identical but for the kernel's name: graph A runs `stream_kernel`, graph B `stream_kernel_plain`. Under
`neutrino ... --filter _plain` graph A is probed (and sampled) while graph B, captured in the same process
with the shim loaded, is the program's own graph, never planned: B is the plain reference measured in
the same process, beside A. The replays alternate A, B, A, B ...; each is timed with CUDA events on the
GPU alone (OVERHEAD_GPU_ONLY's sleep before it: overhead_workloads.timed_loop's protocol). Prints one
line `RESIDUAL_RESULT {json}`: per graph the median and mean µs per replay and the outputs' hash.

    OVERHEAD_GPU_ONLY=1 python benchmarks/graph_residual_child.py [--iters 300] [--order BA] [--replay B]

`--order BA`: graph B is captured (and instantiated) before graph A, so before anything of neutrino's for A
exists (its rings, stream, append module, poller); `--replay B`: both are captured, only B is replayed (A's
figures are left out): whether B's slowdown needs A's replays or only A's capture.

`--suspect LIST` (comma-separated; run without neutrino): after both captures, the process itself makes what
neutrino's `--graphs` makes for graph A's 8 probed nodes, one kind of thing each, through the driver API:
`device` 8 x 16 MiB of device memory (the device rings, cuMemAlloc), `mapped` 8 x 4 MiB of mapped pinned host
memory (the host rings: cuMemHostAlloc, DEVICEMAP | PORTABLE), `pinned` the same without DEVICEMAP (the
control), `stream` a non-blocking stream with a memset on it, synchronised (ours), `module` neutrino's graph
append module loaded (ring.append_ptx), `append-function` the same and its kernel got (cuModuleGetFunction: with
lazy loading, what puts the kernel on the device), `probed-cubin` graph A's probed kernel as neutrino compiled it (the
probed.cubin under $NEUTRINO_CACHE_DIR whose PTX has `.entry stream_kernel(`: an earlier neutrino run of this
command made it) loaded, `ptxas-original` graph A's own PTX (Triton's, under $TRITON_CACHE_DIR) compiled by the
runtime's ptxas invocation (neutrino/runtime/instrument/ptxas.py, compile_whole) and loaded: whether any of them
alone slows graph B's replays. `--suspects-first`: made before the captures instead (so before Triton loads
B's module, as a neutrino process loads A's probed module at A's first launch).

`--during LIST` (comma-separated, no neutrino): what neutrino does inside the program's capture for each probed
node (neutrino/runtime/cudagraphs/capture.py), done by this process inside graph A's capture before each of its 8
launches, under the relaxed capture mode as neutrino does: `relaxed` the mode exchanged and nothing else, `device`
16 MiB of device memory, `mapped` 4 MiB of mapped pinned memory, `stream` a non-blocking stream (made once) with a
memset and a 4-byte copy from pageable memory on it, synchronised, `module` the append module loaded and its
kernel got (once; `module-cubin`: its PTX compiled by our ptxas call instead of the driver's JIT), `probednode`
A's probed kernel (probed-cubin, loaded before the capture) launched into the capture beside each of A's own with
zeroed arguments; at the capture's end, `appendnode` the append kernel launched into it with zeroed arguments (A
is never replayed, so neither runs). The `stream` row split: `stream-create` the stream made inside the capture
and never used, `stream-ops` a stream made before the capture with the memset, copy and wait inside it,
`stream-sync` a stream made before the capture and only waited for inside it.

`--a-addnode` (with `--a-uncompiled`): the append kernel added to A's captured graph through the graph API
(cuGraphAddKernelNode_v2, a root node with zeroed arguments), as neutrino adds its append node once a capture
has ended; what a plain process had not yet done of neutrino's capture (session 10).

`--ops-between` (sixth split): the same memset and copy on a stream of the process's own, made before the
captures, done after the first graph's capture (and instantiation), before the second's: stream work of a
stream other than the program's before a graph is captured, outside any capture.

After the captures, for the third split (graph_residual.py ISOLATE_THIRD): `--eager-a N` launches graph A's
kernel N times eagerly (under neutrino without --graphs: probed, so its instrumented module is loaded and run
outside any graph); `--reset-a` destroys graph A (torch's CUDAGraph.reset: its executable graph and graph,
under neutrino its plan, twin and rings with them) before B's replays; `--a-uncompiled` captures graph A through
the driver API on a stream of its own and never instantiates it (A's probed capture and append node made, no
executable graph, no twin; A cannot be replayed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from overhead_workloads import digest, gpu_only_sleep_cycles, stream_kernel  # noqa: E402


@triton.jit
def stream_kernel_plain(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """stream_kernel under another name (graph B's: `--filter _plain` leaves it unprobed)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2.0 + y, mask=mask)


def capture(kernel, x, y, n: int, during=None):
    """(graph, outputs): 8 launches of `kernel` captured after one eager launch (Triton's compile). `during`
    (a DuringCapture): what it makes before each launch and at the capture's end, inside the capture."""
    outs = [torch.empty_like(x) for _ in range(8)]
    grid = (triton.cdiv(n, 1024),)
    kernel[grid](x, y, outs[0], n, BLOCK=1024)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for out in outs:
            if during is not None:
                during.node(torch.cuda.current_stream().cuda_stream)
            kernel[grid](x, y, out, n, BLOCK=1024)
        if during is not None:
            during.end(torch.cuda.current_stream().cuda_stream)
    return graph, outs


DURING = ("relaxed", "device", "mapped", "stream", "module", "module-cubin", "appendnode", "probednode",
          "stream-create", "stream-ops", "stream-sync")


class DuringCapture:
    """What neutrino's capture of a probed node does inside the program's capture (capture.py, `_new_node` and
    `end_capture`), done by a plain process inside graph A's capture (`--during LIST`, module docstring): each
    thing under the relaxed capture mode, as neutrino does it (`relaxed`: the mode exchanged and nothing else)."""

    def __init__(self, names: list[str]):
        import ctypes as C

        unknown = set(names) - set(DURING)
        if unknown:
            raise SystemExit(f"graph_residual_child: --during: unknown {sorted(unknown)} (of {', '.join(DURING)})")
        self.C, self.cu, self.names, self.kept = C, C.CDLL("libcuda.so.1"), set(names), []
        self.stream = self.append = self.probed = self.created = None
        if self.names & {"stream-ops", "stream-sync"}:  # the stream made before the capture, used inside it
            self._make_stream()
        if "probednode" in self.names:  # loaded before the capture, as the eager launch before it loads it
            self.probed = self._function(_image("probed-cubin"), b"stream_kernel")

    def check(self, rc, what):
        if rc:
            raise SystemExit(f"graph_residual_child: --during {what}: CUDA error {rc}")

    def _function(self, image: bytes, name: bytes):
        C = self.C
        module, func = C.c_void_p(), C.c_void_p()
        self.check(self.cu.cuModuleLoadData(C.byref(module), C.c_char_p(image)), "module")
        self.check(self.cu.cuModuleGetFunction(C.byref(func), module, C.c_char_p(name)), "module")
        self.kept.append(module)
        return func

    def _relaxed(self, fn):
        mode = self.C.c_int(2)  # CU_STREAM_CAPTURE_MODE_RELAXED
        self.check(self.cu.cuThreadExchangeStreamCaptureMode(self.C.byref(mode)), "relaxed")
        try:
            fn()
        finally:
            self.check(self.cu.cuThreadExchangeStreamCaptureMode(self.C.byref(mode)), "relaxed")

    def _launch(self, func, grid, block, stream, params):
        C = self.C
        self.check(self.cu.cuLaunchKernel(func, *map(C.c_uint, grid), *map(C.c_uint, block), C.c_uint(0),
                                          C.c_void_p(stream), params, None), "launch")

    def _zero_params(self, func):
        """A zeroed value per parameter of `func` (cuFuncGetParamInfo), as a launch's pointer array."""
        C = self.C
        values = []
        while True:
            off, size = C.c_size_t(), C.c_size_t()
            if self.cu.cuFuncGetParamInfo(func, C.c_size_t(len(values)), C.byref(off), C.byref(size)):
                break
            values.append((C.c_ubyte * max(8, size.value))())
        arr = (C.c_void_p * max(1, len(values)))(*[C.addressof(v) for v in values])
        self.kept += [values, arr]
        return arr

    def node(self, capturing: int) -> None:
        self._relaxed(lambda: self._node(capturing))

    def _node(self, capturing: int) -> None:
        C, cu = self.C, self.cu
        if "module" in self.names or "module-cubin" in self.names:
            self._load_append()
        if "device" in self.names:
            ptr = C.c_uint64()
            self.check(cu.cuMemAlloc_v2(C.byref(ptr), C.c_size_t(16 * MiB)), "device")
            self.kept.append(ptr)
        if "mapped" in self.names:
            host = C.c_void_p()
            self.check(cu.cuMemHostAlloc(C.byref(host), C.c_size_t(4 * MiB), C.c_uint(3)), "mapped")
            dev = C.c_uint64()  # as ring.allocate_node_memory: its device address, the host writing all of it
            self.check(cu.cuMemHostGetDevicePointer_v2(C.byref(dev), host, C.c_uint(0)), "mapped")
            C.memset(host, 0, 4 * MiB)
            self.kept.append(host)
        if "stream-create" in self.names and self.created is None:  # made inside, never used
            self.created = C.c_void_p()
            self.check(cu.cuStreamCreate(C.byref(self.created), C.c_uint(1)), "stream-create")
        if "stream-sync" in self.names:  # no work on it: only the wait
            self.check(cu.cuStreamSynchronize(self.stream), "stream-sync")
        if "stream" in self.names or "stream-ops" in self.names:
            if self.stream is None:
                self._make_stream()
            self.check(cu.cuMemsetD8Async(self.buf, C.c_ubyte(0), C.c_size_t(MiB), self.stream), "stream")
            closed = C.c_uint32(1)  # the gate's word, from pageable memory, as allocate_node_memory copies it
            self.check(cu.cuMemcpyHtoDAsync_v2(self.buf, C.byref(closed), C.c_size_t(4), self.stream), "stream")
            self.check(cu.cuStreamSynchronize(self.stream), "stream")
        if self.probed is not None:  # the probed kernel captured beside A's own (never run: A is not replayed)
            self._launch(self.probed, (256, 1, 1), (128, 1, 1), capturing, self._zero_params(self.probed))

    def _make_stream(self) -> None:
        C, cu = self.C, self.cu
        self.stream, self.buf = C.c_void_p(), C.c_uint64()
        self.check(cu.cuStreamCreate(C.byref(self.stream), C.c_uint(1)), "stream")  # CU_STREAM_NON_BLOCKING
        self.check(cu.cuMemAlloc_v2(C.byref(self.buf), C.c_size_t(MiB)), "stream")

    def end(self, capturing: int) -> None:
        if "appendnode" in self.names:  # the append kernel as A's last node (never run: A is not replayed)
            self._relaxed(self._load_append)
            self._launch(self.append, (1, 8, 1), (256, 1, 1), capturing, self._zero_params(self.append))

    def _load_append(self) -> None:
        """neutrino's graph append module loaded (the driver's JIT of its PTX) and its kernel got, once."""
        if self.append is None:
            from neutrino.runtime.cudagraphs import ring

            arch = torch.cuda.get_device_capability()
            ptx = ring.append_ptx(arch)
            image = ptx.encode() + b"\0"
            if "module-cubin" in self.names:  # compiled as the probed kernels are (ptxas), not by the driver's JIT
                from neutrino.runtime.instrument import ptxas

                tools = ptxas.find_ptxases()
                if not tools:
                    raise SystemExit("graph_residual_child: --during module-cubin: no ptxas found")
                image = ptxas.compile_whole(tools[0], ptx, arch)
            self.append = self._function(image, ring.APPEND_KERNEL.encode())


def alternate(graphs: dict, iters: int, warmup: int = 5) -> dict[str, list[float]]:
    """µs per replay of each graph, replayed in turn `iters` times each, every replay timed on the GPU alone."""
    for _ in range(warmup):
        for g in graphs.values():
            g.replay()
    torch.cuda.synchronize()
    cycles = gpu_only_sleep_cycles()
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(iters):
        for name, g in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(cycles)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            times[name].append(a.elapsed_time(b) * 1e3)
    return times


def _driver():
    """libcuda's entry points as the process resolves them: under neutrino the shim's (LD_PRELOAD), so a capture
    made here is seen as torch's would be; without neutrino libcuda's own."""
    import ctypes as C

    glob = C.CDLL(None)
    return glob if hasattr(glob, "cuStreamEndCapture") else C.CDLL("libcuda.so.1")


def capture_uninstantiated(kernel, x, y, n: int):
    """(graph handle, outputs): capture()'s 8 launches captured on a stream of their own with the driver API
    (global mode, as torch), the graph kept and never instantiated."""
    import ctypes as C

    cu = _driver()
    outs = [torch.empty_like(x) for _ in range(8)]
    grid = (triton.cdiv(n, 1024),)
    kernel[grid](x, y, outs[0], n, BLOCK=1024)
    torch.cuda.synchronize()
    side, graph = torch.cuda.Stream(), C.c_void_p()
    with torch.cuda.stream(side):
        if cu.cuStreamBeginCapture_v2(C.c_void_p(side.cuda_stream), C.c_int(0)):
            raise SystemExit("graph_residual_child: --a-uncompiled: cuStreamBeginCapture_v2 failed")
        for out in outs:
            kernel[grid](x, y, out, n, BLOCK=1024)
        rc = cu.cuStreamEndCapture(C.c_void_p(side.cuda_stream), C.byref(graph))
    if rc:
        raise SystemExit(f"graph_residual_child: --a-uncompiled: cuStreamEndCapture: CUDA error {rc}")
    return graph, outs


def add_kernel_node(graph) -> None:
    """`--a-addnode`: neutrino's append kernel (loaded as neutrino loads it, zeroed arguments) added to the
    captured, never instantiated graph through the graph API, a root node, as neutrino adds its append node
    after a capture ends (never run: the graph is not instantiated)."""
    import ctypes as C

    from neutrino.runtime.driver import RealDriver

    cu = _driver()
    drv = RealDriver(lambda name: C.cast(getattr(cu, name), C.c_void_p).value if hasattr(cu, name) else 0)
    during = DuringCapture(["module"])
    during._load_append()  # noqa: SLF001 - the module and its kernel, outside any capture
    params = during._zero_params(during.append)  # noqa: SLF001
    drv.graph_add_kernel_node(graph.value, [], during.append.value, (1, 8, 1), (256, 1, 1), C.addressof(params))


MiB = 1 << 20
SUSPECTS = ("device", "mapped", "pinned", "stream", "module", "append-function", "probed-cubin", "ptxas-original")


def _cache_file(env: str, pattern: str, entry: str, beside: str = "") -> Path:
    """The file under $env matching `pattern` whose text (or the PTX beside it) defines kernel `entry` (and, given
    `beside`, with that file beside it: the code cache's kernel.json marks a probed entry, not a pruned baseline)."""
    root = os.environ.get(env)
    for path in sorted(Path(root).rglob(pattern)) if root else []:
        ptx = path.with_name("probed.ptx") if path.suffix != ".ptx" else path
        text = ptx.read_text(errors="replace") if ptx.exists() else ""
        if f".entry {entry}(" in text and (not beside or (path.parent / beside).exists()):
            return path
    raise SystemExit(f"graph_residual_child: --suspect: no {pattern} of {entry} under ${env} ({root})")


def _image(name: str) -> bytes:
    """The image --suspect probed-cubin / ptxas-original loads (module docstring)."""
    if name == "probed-cubin":
        return _cache_file("NEUTRINO_CACHE_DIR", "probed.cubin", "stream_kernel", "kernel.json").read_bytes()
    from neutrino.runtime.instrument import ptxas

    ptx = _cache_file("TRITON_CACHE_DIR", "*.ptx", "stream_kernel").read_text()
    tools = ptxas.find_ptxases()
    if not tools:
        raise SystemExit("graph_residual_child: --suspect ptxas-original: no ptxas found")
    return ptxas.compile_whole(tools[0], ptx, torch.cuda.get_device_capability())


def make_suspects(names: list[str]) -> list:
    """What `--graphs` makes for graph A's 8 nodes, by kind (the module docstring): kept alive by the list."""
    import ctypes as C

    cu = C.CDLL("libcuda.so.1")
    kept: list = []

    def check(rc, what):
        if rc:
            raise SystemExit(f"graph_residual_child: --suspect {what}: CUDA error {rc}")

    for name in names:
        if name == "device":
            for _ in range(8):
                ptr = C.c_uint64()
                check(cu.cuMemAlloc_v2(C.byref(ptr), C.c_size_t(16 * MiB)), name)
                kept.append(ptr)
        elif name in ("mapped", "pinned"):
            for _ in range(8):  # CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
                ptr = C.c_void_p()
                check(cu.cuMemHostAlloc(C.byref(ptr), C.c_size_t(4 * MiB), C.c_uint(3 if name == "mapped" else 1)), name)
                kept.append(ptr)
        elif name == "stream":
            stream, buf = C.c_void_p(), C.c_uint64()
            check(cu.cuStreamCreate(C.byref(stream), C.c_uint(1)), name)  # CU_STREAM_NON_BLOCKING
            check(cu.cuMemAlloc_v2(C.byref(buf), C.c_size_t(MiB)), name)
            check(cu.cuMemsetD8Async(buf, C.c_ubyte(0), C.c_size_t(MiB), stream), name)
            check(cu.cuStreamSynchronize(stream), name)
            kept += [stream, buf]
        elif name == "module":
            from neutrino.runtime.cudagraphs import ring

            major, minor = torch.cuda.get_device_capability()
            module = C.c_void_p()
            check(cu.cuModuleLoadData(C.byref(module), C.c_char_p(ring.append_ptx((major, minor)).encode() + b"\0")),
                  name)
            kept.append(module)
        elif name == "append-function":  # the module and its kernel got (loaded on the device with lazy loading)
            from neutrino.runtime.cudagraphs import ring

            module, func = C.c_void_p(), C.c_void_p()
            ptx = ring.append_ptx(torch.cuda.get_device_capability()).encode() + b"\0"
            check(cu.cuModuleLoadData(C.byref(module), C.c_char_p(ptx)), name)
            check(cu.cuModuleGetFunction(C.byref(func), module, C.c_char_p(ring.APPEND_KERNEL.encode())), name)
            kept += [module, func]
        elif name in ("probed-cubin", "ptxas-original"):
            module = C.c_void_p()
            check(cu.cuModuleLoadData(C.byref(module), C.c_char_p(_image(name))), name)
            kept.append(module)
        else:
            raise SystemExit(f"graph_residual_child: --suspect: unknown {name!r} (one of {', '.join(SUSPECTS)})")
    torch.cuda.synchronize()
    return kept


def context_state() -> dict:
    """The context-wide settings a process of ours could have changed, read after B's replays: the limits
    (CU_LIMIT_STACK_SIZE 0, PRINTF_FIFO_SIZE 1, MALLOC_HEAP_SIZE 2: bytes), the context's flags (0x10:
    CU_CTX_LMEM_RESIZE_TO_MAX) and cache configuration (CUfunc_cache), the device memory free (bytes)."""
    import ctypes as C

    cu = C.CDLL("libcuda.so.1")
    out = {}
    for name, limit in (("stack", 0), ("printf_fifo", 1), ("malloc_heap", 2)):
        v = C.c_size_t()
        out[name] = v.value if cu.cuCtxGetLimit(C.byref(v), C.c_int(limit)) == 0 else None
    flags, cache, free, total = C.c_uint(), C.c_int(), C.c_size_t(), C.c_size_t()
    out["flags"] = flags.value if cu.cuCtxGetFlags(C.byref(flags)) == 0 else None
    out["cache_config"] = cache.value if cu.cuCtxGetCacheConfig(C.byref(cache)) == 0 else None
    out["free"] = free.value if cu.cuMemGetInfo_v2(C.byref(free), C.byref(total)) == 0 else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--order", choices=["AB", "BA"], default="AB", help="which graph is captured first")
    ap.add_argument("--replay", choices=["AB", "B"], default="AB", help="the graphs replayed (in turn)")
    ap.add_argument("--suspect", default="", help=f"comma-separated, of {', '.join(SUSPECTS)} (module docstring)")
    ap.add_argument("--during", default="", help=f"comma-separated, of {', '.join(DURING)} (module docstring)")
    ap.add_argument("--suspects-first", action="store_true",
                    help="make the --suspect things before the captures (B's module then loaded after them)")
    ap.add_argument("--eager-a", type=int, default=0, help="A's kernel launched this many times eagerly after the captures")
    ap.add_argument("--reset-a", action="store_true", help="destroy graph A (CUDAGraph.reset) before B's replays")
    ap.add_argument("--a-uncompiled", action="store_true", help="capture A with the driver API, never instantiate it")
    ap.add_argument("--a-addnode", action="store_true",
                    help="with --a-uncompiled: the append kernel added to A's graph through the graph API after its capture")
    ap.add_argument("--ops-between", action="store_true",
                    help="a memset and a copy on a stream of the process's own (made before the captures) after the "
                         "first graph's capture and instantiation, before the second's (waited for)")
    args = ap.parse_args()
    if args.a_addnode and not args.a_uncompiled:
        ap.error("--a-addnode adds to the graph --a-uncompiled captures: give --a-uncompiled")
    if (args.reset_a or args.a_uncompiled) and args.replay != "B":
        ap.error("--reset-a and --a-uncompiled leave graph A nothing to replay: give --replay B")
    os.environ.setdefault("OVERHEAD_GPU_ONLY", "1")
    n = 256 * 1024
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.rand(n, device="cuda", generator=gen)
    y = torch.rand(n, device="cuda", generator=gen)
    kernels = {"A": stream_kernel, "B": stream_kernel_plain}
    early = make_suspects([w for w in args.suspect.split(",") if w]) if args.suspects_first else []  # noqa: F841
    during = DuringCapture([w for w in args.during.split(",") if w]) if args.during else None
    between = DuringCapture(["stream-ops"]) if args.ops_between else None  # its stream made now
    captured = {}
    for name in args.order:
        captured[name] = capture_uninstantiated(kernels[name], x, y, n) if name == "A" and args.a_uncompiled \
            else capture(kernels[name], x, y, n, during if name == "A" else None)
        if name == "A" and args.a_addnode:
            add_kernel_node(captured[name][0])
        if between is not None and len(captured) == 1:
            between._node(0)  # noqa: SLF001 - the stream-ops step, outside any capture
    for _ in range(args.eager_a):
        stream_kernel[(triton.cdiv(n, 1024),)](x, y, captured["A"][1][0], n, BLOCK=1024)
    if args.reset_a:
        captured["A"][0].reset()
    kept = [] if args.suspects_first else make_suspects([w for w in args.suspect.split(",") if w])  # noqa: F841
    times = alternate({name: captured[name][0] for name in sorted(args.replay)}, args.iters)
    result = {name: {"us": statistics.median(t), "mean_us": statistics.mean(t), "hash": digest(*captured[name][1])}
              for name, t in times.items()}
    result["ctx"] = context_state()
    print("RESIDUAL_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
