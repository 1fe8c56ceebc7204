"""Does one driver memset leave a process's later CUDA-graph replays slower? (issue 24, the decode residual)

    OVERHEAD_GPU_ONLY=1500000 python benchmarks/memset_residual.py [--workload graph_decode|graph8] [--iters 200]

No Neutrino: one process replays the workload's graph in phases (GPU alone, CUDA-event medians, as
overhead_workloads.timed_loop) and between phases does one thing on a stream of its own, synchronised:

    base, base again   nothing (the drift between phases)
    copy               cuMemcpyHtoDAsync of 8 MiB of pinned zeros into device memory (a copy engine)
    memset             cuMemsetD8Async of 8 MiB (the driver runs it as a kernel of its own)
    after              nothing: does the memset's effect last?

Session 11 found that the memset Neutrino ran after a capture's end slowed every later replay of the process's
graphs by ~9% (docs/overhead.md); the decode step under Neutrino with its capture left unprobed still costs
~6% (session 14), and the runtime's eager launches zero their rings with memsets. Prints one line per phase and
`MEMSET_RESIDUAL {json}`.
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

import overhead_workloads as ow  # noqa: E402

MIB8 = 8 << 20


def driver():
    cuda = C.CDLL("libcuda.so.1")
    cuda.cuMemsetD8Async.argtypes = [C.c_uint64, C.c_ubyte, C.c_size_t, C.c_void_p]
    cuda.cuMemcpyHtoDAsync_v2.argtypes = [C.c_uint64, C.c_void_p, C.c_size_t, C.c_void_p]
    return cuda


def workload(name: str):
    """(replay, keep): a callable that runs one step of the workload's graph, and what must stay alive."""
    if name == "graph8":
        g, outs, inputs = ow.capture_graph8()
        return g.replay, (g, outs, inputs)
    d = 1024
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[ow.Block(d) for _ in range(8)]).cuda().half().eval()
    x = torch.randn(8, d, device="cuda", dtype=torch.float16)
    step = torch.compile(model, mode="reduce-overhead")
    torch.no_grad().__enter__()
    return (lambda: step(x)), (model, x, step)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="graph_decode", choices=["graph_decode", "graph8"])
    ap.add_argument("--iters", type=int, default=200)
    a = ap.parse_args(argv)
    cuda = driver()
    replay, keep = workload(a.workload)
    dev = torch.empty(MIB8, dtype=torch.uint8, device="cuda")
    zeros = torch.zeros(MIB8, dtype=torch.uint8).pin_memory()
    side = torch.cuda.Stream()

    def copy():
        assert cuda.cuMemcpyHtoDAsync_v2(dev.data_ptr(), zeros.data_ptr(), MIB8, C.c_void_p(side.cuda_stream)) == 0

    def memset():
        assert cuda.cuMemsetD8Async(dev.data_ptr(), 0, MIB8, C.c_void_p(side.cuda_stream)) == 0

    phases = [("base", None), ("base again", None), ("copy", copy), ("memset", memset), ("after", None)]
    out = {}
    for name, action in phases:
        if action is not None:
            action()
            torch.cuda.synchronize()
        times, _ = ow.timed_loop(replay, a.iters, 10)
        out[name] = statistics.median(times)
        print(f"{name:12s} {out[name]:8.2f} µs per step ({out[name] / out['base']:.3f} x base)", flush=True)
    print("MEMSET_RESIDUAL " + json.dumps({"workload": a.workload, **out}))
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
