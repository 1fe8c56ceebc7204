"""Eager PyTorch steps for the timeline tests. usage: w_timeline.py MODE OUT.json [STEPS]

plain    STEPS steps
profile  STEPS steps, all under torch.profiler: OUT.json gets the profile's kernels (name -> count)
self     2 steps, then STEPS under torch.profiler, then 2 more: the program's own profile while
         Neutrino's timeline runs (OUT.json as for profile, plus the chrome trace's kernel count)
ranged   STEPS steps, each in torch.cuda.nvtx.range("eager_step"), all in neutrino.annotate("loop"),
         with no synchronization between steps (the host runs ahead of the GPU)
"""
import json
import sys
from collections import Counter

import torch

WIDTH = 512


def step(a, b):
    y = torch.relu(a @ b)
    z = torch.nn.functional.layer_norm(y, (WIDTH,))
    s = z.softmax(-1).sum()
    a.mul_(0.999)
    return s


def profiled(a, b, steps, out, make=None):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        if make is not None:  # the inputs too: the whole program's kernels
            a, b = make()
        for _ in range(steps):
            step(a, b)
        torch.cuda.synchronize()
    kernels = Counter(e.name for e in prof.events()
                      if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")))
    chrome = out + ".trace.json"
    prof.export_chrome_trace(chrome)
    with open(chrome) as fh:
        chrome_kernels = sum(1 for e in json.load(fh).get("traceEvents", []) if e.get("cat") == "kernel")
    return {"kernels": dict(kernels), "n_kernels": sum(kernels.values()), "chrome_kernels": chrome_kernels,
            "key_averages": len(prof.key_averages())}


def main(mode, out, steps):
    def make():
        torch.manual_seed(0)
        return torch.randn(WIDTH, WIDTH, device="cuda"), torch.randn(WIDTH, WIDTH, device="cuda")

    result = {"mode": mode, "steps": steps}
    if mode == "profile":
        result.update(profiled(None, None, steps, out, make))
        with open(out, "w") as fh:
            json.dump(result, fh)
        return
    a, b = make()
    if mode == "plain":
        for _ in range(steps):
            step(a, b)
    elif mode == "ranged":
        import neutrino

        torch.cuda.synchronize()
        with neutrino.annotate("loop"):
            for _ in range(steps):
                with torch.cuda.nvtx.range("eager_step"):
                    step(a, b)
    elif mode == "self":
        for _ in range(2):
            step(a, b)
        result.update(profiled(a, b, steps, out))
        for _ in range(2):
            step(a, b)
        result["steps_total"] = steps + 4
    torch.cuda.synchronize()
    with open(out, "w") as fh:
        json.dump(result, fh)
    print("timeline workload done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)
