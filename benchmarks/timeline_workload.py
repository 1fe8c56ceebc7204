"""Steps timed for benchmarks/timeline_cost.py. usage: timeline_workload.py eager|compile STEPS

eager    a loop of 40 small eager ops per step (ATen kernels only: nothing is probed)
compile  a torch.compile MLP training step (forward, backward, SGD): Triton kernels (probed under
         block_sched), cuBLAS GEMMs, ATen ops

Prints one JSON line: per-step wall times in ms (each step ends with torch.cuda.synchronize()).
"""
import json
import sys
import time

import torch

WARMUP = 10


def eager_step(x):
    for _ in range(10):
        x = torch.relu(x * 1.001 + 0.5)
        x = x - x.mean()
    return x


def make_compile_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024),
                                torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device="cuda")

    @torch.compile
    def fwd_bwd(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss

    def step(_):
        opt.zero_grad(set_to_none=True)
        fwd_bwd(x)
        opt.step()
        return x
    return step, x


def main(mode, steps):
    if mode == "eager":
        step, x = eager_step, torch.randn(256, 256, device="cuda")
    else:
        step, x = make_compile_step()
    times = []
    for i in range(WARMUP + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(x)
        torch.cuda.synchronize()
        if i >= WARMUP:
            times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"mode": mode, "step_ms": times}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
