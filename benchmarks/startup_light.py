"""A light CUDA program for benchmarks/startup.py --program light: CuPy loads a PTX module (the
corpus's vec kernels, JIT-compiled by the driver) and launches saxpy4 LAUNCHES times.

usage: startup_light.py [LAUNCHES]   (default 20)

About a second of process time instead of the torch.compile program's twenty: enough runs fit in
a device call to put medians on the fixed costs (launcher, start-up, exit). Prints one JSON line
with a checksum of the result (the profiled runs must print the same).
"""
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

PTX = Path(__file__).resolve().parent.parent / "tests" / "gpu" / "workloads" / "vec.sm90.ptx"
N4 = 1 << 16


def main(launches: int) -> None:
    saxpy4 = cp.RawModule(path=str(PTX)).get_function("saxpy4")
    x = cp.arange(4 * N4, dtype=cp.float32) / (4 * N4)
    y = cp.ones(4 * N4, dtype=cp.float32)
    for _ in range(launches):
        saxpy4((N4 // 256,), (256,), (x, y, np.float32(0.5), np.int64(N4)))
    cp.cuda.runtime.deviceSynchronize()
    print(json.dumps({"loss": round(float(y.sum()), 3), "launches": launches}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
