"""Steps timed for benchmarks/timeline_cost.py. usage: timeline_workload.py eager|compile STEPS

eager    a loop of 40 small eager ops per step (ATen kernels only: nothing is probed)
compile  a torch.compile MLP training step (forward, backward, SGD): Triton kernels (probed under
         block_sched), cuBLAS GEMMs, ATen ops

Prints one JSON line: per-step wall times in ms (each step ends with torch.cuda.synchronize()) and
per-step GPU-event times in ms (a CUDA event recorded before and after the step on the current
stream: the span of the step's launches as the GPU saw them).

NEUTRINO_BENCH_CUPTI_FLOOR=LIB:LIBCUPTI:CALLBACKS loads benchmarks/cupti_floor.c's library and
starts CUPTI alone (no Neutrino) before the first step: CALLBACKS 1 adds the launch callbacks.
"""
import ctypes
import json
import os
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


def cupti_floor():
    spec = os.environ.get("NEUTRINO_BENCH_CUPTI_FLOOR")
    if not spec:
        return
    lib, cupti, callbacks = spec.split(":")
    fn = ctypes.CDLL(lib).cupti_floor_start
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
    rc = fn(cupti.encode(), int(callbacks))
    if rc:
        raise SystemExit(f"cupti_floor_start failed at step {rc}")


def main(mode, steps):
    torch.zeros(1, device="cuda")
    cupti_floor()
    if mode == "eager":
        step, x = eager_step, torch.randn(256, 256, device="cuda")
    else:
        step, x = make_compile_step()
    times, gpu = [], []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(WARMUP + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        begin.record()
        step(x)
        end.record()
        torch.cuda.synchronize()
        if i >= WARMUP:
            times.append((time.perf_counter() - t0) * 1e3)
            gpu.append(begin.elapsed_time(end))
    print(json.dumps({"mode": mode, "step_ms": times, "event_ms": gpu}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
