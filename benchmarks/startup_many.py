"""A program that looks many kernels up and launches few, for benchmarks/startup.py --program many
(issue 29, the `--build-threads` default): CuPy compiles one module of KERNELS kernels to PTX
(cached by CuPy after the first run), looks every one of them up (`get_function`: cuModuleGetFunction)
and launches the first LAUNCHED of them once each.

usage: startup_many.py [LAUNCHED] [KERNELS]   (default 1 of 64)

With build threads every looked-up kernel is queued for building, the launched ones and the rest:
the row this program adds is what that costs when most of them never run. Prints one JSON line
with a checksum of the results (the profiled runs must print the same).
"""
import json
import os
import sys

os.environ.setdefault("CUPY_COMPILE_WITH_PTX", "1")  # as under neutrino: the plain run loads the same PTX

import cupy as cp  # noqa: E402

N = 1 << 16


def source(kernels: int) -> str:
    """KERNELS distinct kernels, each a short loop of a different length (distinct code to build)."""
    body = ("extern \"C\" __global__ void k{i}(float* y, const float* x, int n) {{\n"
            "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  if (t < n) {{ float a = x[t];\n"
            "    for (int j = 0; j < {trips}; j++) a = a * 0.999f + {i}.0f * x[(t + j) % n];\n"
            "    y[t] = a; }}\n}}\n")
    return "".join(body.format(i=i, trips=4 + i % 13) for i in range(kernels))


def main(launched: int, kernels: int) -> None:
    module = cp.RawModule(code=source(kernels))
    functions = [module.get_function(f"k{i}") for i in range(kernels)]  # every kernel looked up
    x = cp.arange(N, dtype=cp.float32) / N
    y = cp.zeros(N, dtype=cp.float32)
    total = 0.0
    for fn in functions[:launched]:
        fn((N // 256,), (256,), (y, x, cp.int32(N)))
        total += float(y.sum())
    print(json.dumps({"loss": round(total, 3), "launched": launched, "kernels": kernels}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1, int(sys.argv[2]) if len(sys.argv) > 2 else 64)
