"""CUDA graph workloads for tests/gpu/test_gpu_graphs.py. usage: w_graphs.py manual|compile OUT.npz [REPLAYS]

manual:  two Triton kernels (a vector add, then an accumulation) captured with torch.cuda.graph
         after one eager warm-up, replayed REPLAYS times (default 1000).
compile: a small MLP trained with torch.compile(mode="reduce-overhead") (CUDA graphs made by Inductor).
"""
import sys

import numpy as np
import torch
import triton
import triton.language as tl

N = 1 << 20


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


def manual(out_path: str, replays: int) -> None:
    g0 = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(N, device="cuda", generator=g0)
    y = torch.rand(N, device="cuda", generator=g0)
    out = torch.empty_like(x)
    acc = torch.zeros_like(x)
    grid = (triton.cdiv(N, 1024),)

    def step():
        vadd[grid](x, y, out, N, BLOCK=1024)
        accumulate[grid](acc, out, N, BLOCK=1024)

    step()  # warm-up: compiles, and is the kernels' first (eager) launch
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    np.savez(out_path, out=out.cpu().numpy(), acc=acc.cpu().numpy())


def compiled(out_path: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    data = torch.randn(64, 256, device="cuda")
    target = torch.randn(64, 256, device="cuda")
    fwd = torch.compile(model, mode="reduce-overhead")
    losses = []
    for _ in range(20):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(fwd(data), target)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    torch.cuda.synchronize()
    params = {f"p{i}": p.detach().cpu().numpy() for i, p in enumerate(model.parameters())}
    np.savez(out_path, losses=torch.stack(losses).cpu().numpy(), **params)


if __name__ == "__main__":
    if sys.argv[1] == "manual":
        manual(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1000)
    else:
        compiled(sys.argv[2])
