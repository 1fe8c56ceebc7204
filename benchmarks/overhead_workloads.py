"""The programs `benchmarks/overhead.py` runs, plain and under `neutrino -p TOOL --`.

Each workload is what a user runs: a steady loop of the same work, timed in the
process with CUDA events around every launch (median per launch), or wall time
per training step after warm-up. Prints one line `OVERHEAD_RESULT {json}` with
the timings and a hash of every output, so the driver can check that probing
changed no result.

    python benchmarks/overhead_workloads.py [--iters N] [--only stream,attention,mlp,launch,graph,...]

With OVERHEAD_GPU_ONLY=1 the event loops keep the GPU busy (torch.cuda._sleep, 200,000 cycles;
OVERHEAD_GPU_ONLY=N > 1: N cycles) while the host enqueues each launch and wait for it: the
events then time the kernel alone (what the probe code costs on the GPU), not the host path.
OVERHEAD_SLEEP_GRAPH=1: that sleep is replayed from a CUDA graph, not launched eagerly.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import json
import statistics
import time

import torch
import triton
import triton.language as tl


@triton.jit
def stream_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2.0 + y, mask=mask)


@triton.jit
def attention_kernel(Q, K, V, Out, qk_scale, N_CTX: tl.constexpr, HEAD_DIM: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * N_CTX * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, N_CTX, BLOCK_N):
        k = tl.load(K + base + (start_n + offs_n)[None, :] * HEAD_DIM + offs_d[:, None])
        qk = tl.dot(q, k) * qk_scale
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + base + (start_n + offs_n)[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(tl.float16))


@triton.jit
def tiny_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def digest(*tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def gpu_only_sleep_cycles() -> int:
    """OVERHEAD_GPU_ONLY=1: 200,000 cycles (~110 µs on the H100) of GPU sleep before each timed
    launch; a larger value is the cycles, for work whose host path takes longer to enqueue."""
    value = int(os.environ.get("OVERHEAD_GPU_ONLY", "1") or 1)
    return value if value > 1 else 200000


def sleep_graph(cycles: int):
    """OVERHEAD_SLEEP_GRAPH=1: the GPU-alone loops' sleep captured into a CUDA graph, replayed before each timed
    launch instead of an eager torch.cuda._sleep, so that a loop of graph replays has no eager kernel launch in it
    (under the timeline's quiet replays an eager launch switches kernel records on again: spec/runtime.md)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.cuda._sleep(cycles)
    return graph


def timed_loop(launch, iters: int, warmup: int) -> tuple[list[float], float]:
    """Per-launch GPU time (µs) with CUDA events around every launch; no sync inside the loop.

    Also the host time per iteration (µs): when it exceeds the kernel's time the loop is
    host-bound and the events measure the host path, not the kernel."""
    for _ in range(warmup):
        launch()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    if os.environ.get("OVERHEAD_GPU_ONLY"):  # the kernel's GPU time alone: the GPU is kept busy while the host enqueues
        cycles = gpu_only_sleep_cycles()
        sleep = lambda: torch.cuda._sleep(cycles)  # noqa: E731
        if os.environ.get("OVERHEAD_SLEEP_GRAPH"):  # the sleep replayed from a graph of its own: no eager launch
            sleep = sleep_graph(cycles).replay      # between the timed launches (quiet replays stay quiet)
        for a, b in pairs:
            sleep()
            a.record()
            launch()
            b.record()
            torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1e3 for a, b in pairs], 0.0
    t0 = time.perf_counter()
    for a, b in pairs:
        a.record()
        launch()
        b.record()
    host = (time.perf_counter() - t0) / iters * 1e6
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in pairs], host


def by_parity(times: list[float]) -> dict:
    """Medians of the even and odd iterations: under `--launches every:2` (10 warm-up launches
    before the loop) the even ones are probed and the odd ones not, in the same loop and process."""
    return {"us_even": statistics.median(times[0::2]), "us_odd": statistics.median(times[1::2])}


def stream_workload(iters: int) -> dict:
    n = 16 * 1024 * 1024
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(n, device="cuda", generator=g)
    y = torch.rand(n, device="cuda", generator=g)
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    times, host = timed_loop(lambda: stream_kernel[grid](x, y, out, n, BLOCK=1024, num_warps=4), iters, 10)
    return {"us": statistics.median(times), "host_us": host, "hash": digest(out), **by_parity(times)}


def attention_workload(iters: int) -> dict:
    bh, n_ctx, d = 8, 2048, 64
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(bh, n_ctx, d, device="cuda", generator=g).half() for _ in range(3))
    o = torch.empty_like(q)
    grid = (n_ctx // 128, bh)
    scale = (d ** -0.5) * 1.4426950408889634

    def launch():
        attention_kernel[grid](q, k, v, o, scale, N_CTX=n_ctx, HEAD_DIM=d, BLOCK_M=128, BLOCK_N=64,
                               num_warps=8, num_stages=3)

    times, host = timed_loop(launch, iters, 10)
    return {"us": statistics.median(times), "host_us": host, "hash": digest(o), **by_parity(times)}


def launch_workload(iters: int) -> dict:
    """Host time per launch of a tiny kernel, launched back to back (what the host path costs)."""
    x = torch.zeros(256, device="cuda")
    for _ in range(20):
        tiny_kernel[(1,)](x, 256, BLOCK=256)
    torch.cuda.synchronize()
    n = iters * 20
    t0 = time.perf_counter()
    for _ in range(n):
        tiny_kernel[(1,)](x, 256, BLOCK=256)
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return {"us": host, "hash": digest(x)}


class Block(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def mlp_workload(iters: int) -> dict:
    torch.manual_seed(0)
    d = 1024
    model = torch.nn.Sequential(*[Block(d) for _ in range(4)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(64, 128, d, device="cuda")
    target = torch.randn(64, 128, d, device="cuda")
    compiled = torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(compiled(data), target)
        loss.backward()
        opt.step()
        return loss

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    walls, losses = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e6)
        losses.append(loss.detach())
    return {"us": statistics.median(walls), "hash": digest(torch.stack(losses), *model.parameters())}


def graph_workload(iters: int, n: int = 1 << 20) -> dict:
    """Replays of a captured graph of 4 Triton kernels of `n` elements each (every replay probed:
    spec/runtime.md, "CUDA graphs"). 1M elements: about 4.5 µs per kernel on the H100, the worst case
    for a fixed cost per replay; 16M: about 70 µs per kernel."""
    g = torch.Generator(device="cuda").manual_seed(3)  # inputs that match between processes
    x = torch.rand(n, device="cuda", generator=g)
    y = torch.rand(n, device="cuda", generator=g)
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    stream_kernel[grid](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(4):
            stream_kernel[grid](x, y, out, n, BLOCK=1024)
    times, host = timed_loop(g.replay, iters, 5)
    return {"us": statistics.median(times), "host_us": host, "hash": digest(out)}


def tiny_launches(count: int):
    """(launch(i), the outputs, the inputs): `count` launches of a tiny Triton kernel (256 blocks of 4 warps,
    ~2 µs each on the H100), launch(i) writing output i; inputs that match between processes. The caller keeps
    the tensors alive while the launches (or a graph of them) read and write their memory."""
    n = 256 * 1024
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.rand(n, device="cuda", generator=g)
    y = torch.rand(n, device="cuda", generator=g)
    outs = [torch.empty_like(x) for _ in range(count)]
    grid = (triton.cdiv(n, 1024),)
    return (lambda i: stream_kernel[grid](x, y, outs[i], n, BLOCK=1024)), outs, (x, y)


def capture_graph8():
    """(graph, its 8 outputs, its 2 inputs): a CUDA graph of tiny_launches' 8 kernels, captured after one eager
    launch (Triton's compile)."""
    launch, outs, inputs = tiny_launches(8)
    launch(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(8):
            launch(i)
    return graph, outs, inputs


def graph8_workload(iters: int) -> dict:
    """Replays of capture_graph8's graph: the decode-loop shape where a fixed cost per kernel or per
    replay shows most (issue 24)."""
    g, outs, inputs = capture_graph8()  # inputs: held while the graph reads them
    times, host = timed_loop(g.replay, iters, 5)
    ab = timeline_ab(g.replay) if os.environ.get("OVERHEAD_TIMELINE_AB") else {}
    # the mean too: under --launches every:N the median is a replay left out, the mean counts the others
    return {"us": statistics.median(times), "mean_us": statistics.mean(times), "host_us": host,
            "hash": digest(*outs), **ab}


def eager1_workload(iters: int) -> dict:
    """One of graph8's tiny Triton kernels (256 blocks x 4 warps, ~2 µs) launched eagerly, CUDA events around
    each launch: the per-launch median as users time a kernel in a steady loop (issue 24's eager tiny kernels;
    OVERHEAD_GPU_ONLY for the GPU's time alone)."""
    launch, (out,), inputs = tiny_launches(1)  # inputs: held while the kernel reads them
    times, host = timed_loop(lambda: launch(0), iters, 5)
    return {"us": statistics.median(times), "mean_us": statistics.mean(times), "host_us": host, "hash": digest(out)}


def eager8_workload(iters: int) -> dict:
    """capture_graph8's 8 tiny Triton kernels (256 blocks x 4 warps, ~2 µs each) launched eagerly, back to back,
    timed as one span on the GPU alone (OVERHEAD_GPU_ONLY; its sleep must outlast the 8 launches' host path:
    1500000 cycles with a probe): issue 24's eager tiny kernels. `us` is the span of 8; `us_per_launch` the
    span / 8, so a probe's GPU time per launch is the difference of two runs' `us_per_launch`."""
    launch, outs, inputs = tiny_launches(8)  # inputs: held while the kernels read them

    def eight():
        for i in range(8):
            launch(i)

    times, host = timed_loop(eight, iters, 5)
    span = statistics.median(times)
    return {"us": span, "us_per_launch": span / 8, "mean_us": statistics.mean(times), "host_us": host,
            "hash": digest(*outs)}


def timeline_ab(launch) -> dict:
    """OVERHEAD_TIMELINE_AB=STEPS:CYCLES (under neutrino): after the timed loop, phases of STEPS launches
    with the CUPTI timeline paused, then on (the shim's neutrino_timeline_pause), CYCLES times after one
    cycle of warm-up, in this one process: the medians per phase (`ab_paused_us`, `ab_on_us`), timed
    like the loop (OVERHEAD_GPU_ONLY applies)."""
    import ctypes

    steps, cycles = (int(v) for v in os.environ["OVERHEAD_TIMELINE_AB"].split(":"))
    try:
        pause = ctypes.CDLL(None).neutrino_timeline_pause
    except AttributeError:
        return {"ab_error": "no shim in this process"}
    pause.argtypes = [ctypes.c_int]
    if pause(0) < 0:
        return {"ab_error": "the timeline is not recording"}
    phases = {"ab_paused_us": [], "ab_on_us": []}
    for cycle in range(cycles + 1):
        for name, paused in (("ab_paused_us", 1), ("ab_on_us", 0)):
            pause(paused)
            times, _ = timed_loop(launch, steps, 2)
            if cycle:
                phases[name] += times
    pause(0)
    return {name: statistics.median(v) for name, v in phases.items()}


def graph_decode_workload(iters: int) -> dict:
    """A decode step as an inference server replays it: 8 transformer-style MLP blocks (LayerNorm,
    up-projection, GELU, down-projection, residual; d = 1024, fp16) over a batch of 8 tokens,
    compiled with torch.compile(mode="reduce-overhead"), so every call replays one CUDA graph of
    cuBLAS GEMMs (no PTX: unprobed) and Inductor's Triton kernels (probed). CUDA events around
    each call, after warm-up."""
    torch.manual_seed(0)
    d = 1024
    model = torch.nn.Sequential(*[Block(d) for _ in range(8)]).cuda().half().eval()
    x = torch.randn(8, d, device="cuda", dtype=torch.float16)
    step = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        times, host = timed_loop(lambda: step(x), iters, 10)
        out = step(x).clone()
    return {"us": statistics.median(times), "host_us": host, "hash": digest(out)}


def graph_eager_workload(iters: int) -> dict:
    """The graph workload's 4 launches made eagerly, timed on the GPU alone (the GPU kept busy while
    the host enqueues, as with OVERHEAD_GPU_ONLY): what the probe code itself costs these kernels,
    to tell it from what the graph machinery adds."""
    n = 1 << 20
    g = torch.Generator(device="cuda").manual_seed(3)  # inputs that match between processes
    x = torch.rand(n, device="cuda", generator=g)
    y = torch.rand(n, device="cuda", generator=g)
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)

    def four():
        for _ in range(4):
            stream_kernel[grid](x, y, out, n, BLOCK=1024)

    for _ in range(5):
        four()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(200000)
        a.record()
        four()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return {"us": statistics.median(times), "host_us": 0.0, "hash": digest(out)}


WORKLOADS = {"stream": stream_workload, "attention": attention_workload, "mlp": mlp_workload,
             "launch": launch_workload, "graph": graph_workload, "graph_eager": graph_eager_workload,
             "graph_16m": lambda iters: graph_workload(iters, 16 << 20), "graph_decode": graph_decode_workload,
             "graph8": graph8_workload, "eager8": eager8_workload,
             "eager1": eager1_workload}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    args = ap.parse_args()
    results = {}
    for name in args.only.split(","):
        iters = max(args.iters // 5, 20) if name == "mlp" else args.iters
        results[name] = WORKLOADS[name](iters)
    print("OVERHEAD_RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
