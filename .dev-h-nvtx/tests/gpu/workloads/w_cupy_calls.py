"""A CuPy RawModule whose kernel calls a non-inlined device function and printf. usage: w_cupy_calls.py OUT.npy"""
import sys

import cupy as cp
import numpy as np

SOURCE = r"""
extern "C" __device__ __noinline__ float mix(float a, float b) { return a * 1.5f - b; }
extern "C" __global__ void cupy_calls(const float *x, const float *y, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = mix(x[i], y[i]);
    if (i == 0) printf("cupy_calls n=%d\n", n);
}
"""

n = 1 << 15
rng = np.random.default_rng(3)
x = cp.asarray(rng.random(n, dtype=np.float32))
y = cp.asarray(rng.random(n, dtype=np.float32))
out = cp.zeros(n, dtype=cp.float32)
kernel = cp.RawModule(code=SOURCE, options=("-std=c++17",)).get_function("cupy_calls")
for _ in range(2):
    kernel((n // 128,), (128,), (x, y, out, np.int32(n)))
cp.cuda.runtime.deviceSynchronize()
np.save(sys.argv[1], cp.asnumpy(out))
