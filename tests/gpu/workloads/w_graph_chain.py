"""A CUDA graph of three Triton kernels in a chain, for tests/gpu/test_gpu_graph_chain.py.

usage: w_graph_chain.py OUT.npz [REPLAYS]
vadd (out = x + y), accumulate (acc += out), blend (z = 0.5 * acc + out), each depending on the one before,
captured with torch.cuda.graph after one eager warm-up and replayed REPLAYS times (default 1000). Every 100
replays the host waits for the GPU and pauses 2 ms: a pace the host's poller drains a chain ring at (the test
asks every replay written; a program replaying faster than that loses replays to a full ring, counted).
"""
import sys
import time

import numpy as np
import torch
import triton
import triton.language as tl

N = 1 << 18
BLOCK = 1024


@triton.jit
def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def accumulate(acc_ptr, v_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs, mask=mask) + tl.load(v_ptr + offs, mask=mask), mask=mask)


@triton.jit
def blend(z_ptr, acc_ptr, v_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = 0.5 * tl.load(acc_ptr + offs, mask=mask) + tl.load(v_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, z, mask=mask)


def main(out_path: str, replays: int) -> None:
    g0 = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(N, device="cuda", generator=g0)
    y = torch.rand(N, device="cuda", generator=g0)
    out, z = torch.empty_like(x), torch.empty_like(x)
    acc = torch.zeros_like(x)
    grid = (triton.cdiv(N, BLOCK),)

    def step():
        vadd[grid](x, y, out, N, BLOCK=BLOCK)
        accumulate[grid](acc, out, N, BLOCK=BLOCK)
        blend[grid](z, acc, out, N, BLOCK=BLOCK)

    step()  # warm-up: compiles, and is the kernels' first (eager) launch
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for r in range(replays):
        graph.replay()
        if r % 100 == 99:
            torch.cuda.synchronize()
            time.sleep(0.002)
    torch.cuda.synchronize()
    np.savez(out_path, out=out.cpu().numpy(), acc=acc.cpu().numpy(), z=z.cpu().numpy())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
