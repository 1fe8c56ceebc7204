"""A torch program writing its own torch.profiler chrome trace around probed Triton launches
(tests/gpu/test_gpu_profilers.py, `neutrino export TRACE --merge-into`).

usage: w_kineto_merge.py CHROME.json [STEPS]

STEPS steps under torch.profiler, each in `neutrino.annotate("merge_step")`: one Triton vadd
(probed under neutrino) and one eager add. The chrome trace goes to CHROME.json.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "src"))
import torch
import triton
from torch.profiler import ProfilerActivity, profile

import neutrino
from triton_kernels import vadd

N = 1 << 16


def main(chrome: str, steps: int) -> None:
    x = torch.randn(N, device="cuda")
    y = torch.randn_like(x)
    o = torch.empty_like(x)
    vadd[(triton.cdiv(N, 1024),)](x, y, o, N, B=1024)  # compiled before the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            with neutrino.annotate("merge_step"):
                vadd[(triton.cdiv(N, 1024),)](x, y, o, N, B=1024)
                x = x + o
        torch.cuda.synchronize()
    prof.export_chrome_trace(chrome)
    print("kineto merge workload done")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
