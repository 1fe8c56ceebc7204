"""Steps timed for benchmarks/timeline_cost.py. usage: timeline_workload.py MODE STEPS

eager         a loop of 40 small eager ops per step (ATen kernels only: nothing is probed): launch-bound,
              the worst case for per-kernel records
compile       a torch.compile MLP training step (forward, backward, SGD): Triton kernels (probed under
              block_sched), cuBLAS GEMMs, ATen ops
eager_mlp     the same MLP training step run eagerly (cuBLAS GEMMs, ATen ops; nothing probed)
decode_graph  a decode step replayed as one CUDA graph (torch.compile mode="reduce-overhead": 8 blocks of
              LayerNorm, up-projection, GELU, down-projection, residual; d 1024, fp16, 8 tokens), one replay a
              step; the GPU is kept busy (torch.cuda._sleep) while the host enqueues, so the span is the
              replay's GPU time

Prints one JSON line: per-step wall times in ms (each step ends with torch.cuda.synchronize()) and
per-step GPU-event times in ms (a CUDA event recorded before and after the step on the current
stream: the span of the step's launches as the GPU saw them).

NEUTRINO_BENCH_CUPTI_FLOOR=LIB:LIBCUPTI:CALLBACKS loads benchmarks/cupti_floor.c's library and
starts CUPTI alone (no Neutrino) before the first step: CALLBACKS 1 adds the launch callbacks.

NEUTRINO_BENCH_AB=WHAT:PHASE_STEPS:CYCLES: after the warm-up, phases of PHASE_STEPS steps cycle
CYCLES times inside this one process (the first cycle is warm-up, not counted), and the JSON line
gets `phases` (name -> step_ms, event_ms). WHAT `timeline`: under neutrino, the timeline paused and
on (the shim's neutrino_timeline_pause; with NEUTRINO_BENCH_AB_WAYS=1 also the records without host
times, with the launch hooks alone (no copy callbacks), and with CUPTI's launch callbacks instead of the hooks;
with NEUTRINO_BENCH_AB_WAYS=records only paused, on, and the records without host times); `floor`: CUPTI alone (NEUTRINO_BENCH_CUPTI_FLOOR's LIB and
LIBCUPTI, its callbacks ignored): no records, kernel records, kernel records + launch callbacks that
read the TSC (what the shim's callbacks do). NEUTRINO_BENCH_AB_WAYS=graphs: the timeline paused, on (graph
replays sampled: the default), and on with every graph replay node by node (the shim's pause way 5).
NEUTRINO_BENCH_AB_ORDER=random: each cycle runs the phases in a shuffled order (seeded: the same in every run)
instead of the rotation.
"""
import ctypes
import json
import os
import random
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


def make_eager_mlp_step():
    """The compile mode's MLP training step without torch.compile (a realistic eager step: Linear layers)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024),
                                torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device="cuda")

    def step(_):
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
        return x
    return step, x


class DecodeBlock(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


SLEEP_CYCLES = 1_500_000  # torch.cuda._sleep before a decode replay: the GPU busy while the host enqueues it


def make_decode_graph_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[DecodeBlock(1024) for _ in range(8)]).cuda().half().eval()
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)
    compiled = torch.compile(model, mode="reduce-overhead")

    def step(_):
        with torch.no_grad():
            compiled(x)
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


def ab_phases():
    """[(name, switch)] for NEUTRINO_BENCH_AB, or None."""
    spec = os.environ.get("NEUTRINO_BENCH_AB")
    if not spec:
        return None
    what = spec.split(":")[0]
    if what == "timeline":
        pause = ctypes.CDLL(None).neutrino_timeline_pause  # the shim, preloaded by neutrino
        pause.argtypes = [ctypes.c_int]
        if pause(0) < 0:
            raise SystemExit("NEUTRINO_BENCH_AB=timeline: the timeline is not recording")
        if os.environ.get("NEUTRINO_BENCH_AB_WAYS") == "graphs":  # graph replays sampled (default) / node by node
            return [("timeline paused", lambda: pause(1)), ("timeline on (graph replays sampled)", lambda: pause(0)),
                    ("timeline on, graph replays node by node", lambda: pause(5))]
        if os.environ.get("NEUTRINO_BENCH_AB_WAYS") == "records":  # CUPTI's records alone as the third phase
            return [("timeline paused", lambda: pause(1)), ("timeline on", lambda: pause(0)),
                    ("records only, no host times", lambda: pause(3))]
        if os.environ.get("NEUTRINO_BENCH_AB_WAYS"):  # also the two other ways to record (shim/cupti.c)
            return [("timeline paused", lambda: pause(1)), ("timeline on", lambda: pause(0)),
                    ("records only, no host times", lambda: pause(3)), ("records + launch hooks only", lambda: pause(4)),
                    ("records + CUPTI launch callbacks", lambda: pause(2))]
        return [("timeline paused", lambda: pause(1)), ("timeline on", lambda: pause(0))]
    lib_path, cupti, _ = os.environ["NEUTRINO_BENCH_CUPTI_FLOOR"].split(":")
    lib = ctypes.CDLL(lib_path)
    rc = lib.cupti_floor_init(cupti.encode())
    if rc:
        raise SystemExit(f"cupti_floor_init failed at step {rc}")
    return [("no CUPTI records", lambda: lib.cupti_floor_phase(0, 0)),
            ("CUPTI kernel records", lambda: lib.cupti_floor_phase(1, 0)),
            ("CUPTI kernel records + callbacks", lambda: lib.cupti_floor_phase(1, 3))]


def timed_step(step, x, begin, end, sleep=0):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if sleep:
        torch.cuda._sleep(sleep)
    begin.record()
    step(x)
    end.record()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, begin.elapsed_time(end)


def run_ab(step, x, phases, sleep=0):
    _, phase_steps, cycles = os.environ["NEUTRINO_BENCH_AB"].split(":")
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = {name: {"step_ms": [], "event_ms": []} for name, _ in phases}
    shuffle = random.Random(22) if os.environ.get("NEUTRINO_BENCH_AB_ORDER") == "random" else None
    for cycle in range(int(cycles) + 1):
        turn = cycle % len(phases)  # each cycle starts one phase later: no phase always follows the same one
        order = phases[turn:] + phases[:turn]
        if shuffle is not None:
            shuffle.shuffle(order)
        for name, switch in order:
            switch()
            for _ in range(int(phase_steps)):
                wall, span = timed_step(step, x, begin, end, sleep)
                if cycle:
                    out[name]["step_ms"].append(wall)
                    out[name]["event_ms"].append(span)
    phases[0][1]()
    return out


def main(mode, steps):
    torch.zeros(1, device="cuda")
    phases = ab_phases()
    if phases is None:
        cupti_floor()
    makers = {"eager": lambda: (eager_step, torch.randn(256, 256, device="cuda")), "compile": make_compile_step,
              "eager_mlp": make_eager_mlp_step, "decode_graph": make_decode_graph_step}
    if mode not in makers:
        raise SystemExit(f"unknown mode {mode!r}; known: {', '.join(makers)}")
    step, x = makers[mode]()
    sleep = SLEEP_CYCLES if mode == "decode_graph" else 0
    times, gpu = [], []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(WARMUP + (steps if phases is None else 0)):
        wall, span = timed_step(step, x, begin, end, sleep)
        if i >= WARMUP:
            times.append(wall)
            gpu.append(span)
    result = {"mode": mode, "step_ms": times, "event_ms": gpu}
    if phases is not None:
        result["phases"] = run_ab(step, x, phases, sleep)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
