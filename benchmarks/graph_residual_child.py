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
append module loaded (ring.append_ptx). Whether any of them alone slows graph B's replays.
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


def capture(kernel, x, y, n: int):
    """(graph, outputs): 8 launches of `kernel` captured after one eager launch (Triton's compile)."""
    outs = [torch.empty_like(x) for _ in range(8)]
    grid = (triton.cdiv(n, 1024),)
    kernel[grid](x, y, outs[0], n, BLOCK=1024)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for out in outs:
            kernel[grid](x, y, out, n, BLOCK=1024)
    return graph, outs


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


MiB = 1 << 20
SUSPECTS = ("device", "mapped", "pinned", "stream", "module")


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
        else:
            raise SystemExit(f"graph_residual_child: --suspect: unknown {name!r} (one of {', '.join(SUSPECTS)})")
    torch.cuda.synchronize()
    return kept


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--order", choices=["AB", "BA"], default="AB", help="which graph is captured first")
    ap.add_argument("--replay", choices=["AB", "B"], default="AB", help="the graphs replayed (in turn)")
    ap.add_argument("--suspect", default="", help=f"comma-separated, of {', '.join(SUSPECTS)} (module docstring)")
    args = ap.parse_args()
    os.environ.setdefault("OVERHEAD_GPU_ONLY", "1")
    n = 256 * 1024
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.rand(n, device="cuda", generator=gen)
    y = torch.rand(n, device="cuda", generator=gen)
    kernels = {"A": stream_kernel, "B": stream_kernel_plain}
    captured = {name: capture(kernels[name], x, y, n) for name in args.order}
    kept = make_suspects([w for w in args.suspect.split(",") if w])  # noqa: F841 - alive while B replays
    times = alternate({name: captured[name][0] for name in sorted(args.replay)}, args.iters)
    result = {name: {"us": statistics.median(t), "mean_us": statistics.mean(t), "hash": digest(*captured[name][1])}
              for name, t in times.items()}
    print("RESIDUAL_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
