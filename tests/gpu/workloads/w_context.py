"""Ranges and tensors around Triton launches (tests/gpu/test_gpu_context.py).

usage: w_context.py check       NVTX ranges (torch.cuda.nvtx, emit_nvtx, torch.profiler), neutrino.annotate,
                                a Triton kernel reading an nn.Linear's weight, a torch.compile'd step
       w_context.py bench N     N launches of a tiny Triton kernel, per-launch time (CUDA events), median of 5
"""
import statistics
import sys

import torch
import triton
import triton.language as tl

import neutrino


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def launch_scale(x, out):
    n = x.numel()
    scale[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)


def check():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32).cuda()
    out = torch.empty(32 * 64, device="cuda")
    with torch.no_grad():
        with torch.cuda.nvtx.range("nvtx_outer"):
            with neutrino.annotate("annot_inner"):
                for _ in range(3):
                    launch_scale(lin.weight, out)
        assert torch.equal(out.view(32, 64), lin.weight * 2)
        other = torch.randn(1000, device="cuda")
        torch.cuda.nvtx.range_push("pushed")
        launch_scale(other, torch.empty_like(other))
        torch.cuda.nvtx.range_pop()
        x = torch.randn(8, 64, device="cuda")
        with torch.autograd.profiler.emit_nvtx():
            lin(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            with torch.cuda.nvtx.range("in_profiler"):
                launch_scale(other, torch.empty_like(other))
            torch.cuda.synchronize()
        print("profiler events:", len(prof.key_averages()))

    @torch.compile
    def step(x, w):
        return torch.relu(x * w.sum(dim=0)) + 1.0

    with neutrino.annotate("compiled_step"):
        y = step(x, lin.weight)
    torch.cuda.synchronize()
    assert torch.allclose(y, torch.relu(x * lin.weight.sum(dim=0)) + 1.0)
    print("context done")


def bench(n):
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    for _ in range(50):
        launch_scale(x, out)
    per_launch = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(n):
            launch_scale(x, out)
        end.record()
        torch.cuda.synchronize()
        per_launch.append(start.elapsed_time(end) * 1000 / n)
    print(f"per-launch us: median {statistics.median(per_launch):.2f} all {[round(v, 2) for v in per_launch]}")


if __name__ == "__main__":
    if sys.argv[1] == "bench":
        bench(int(sys.argv[2]))
    else:
        check()
