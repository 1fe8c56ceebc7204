"""The kernels of src/gmem_exact.cu, loaded from their committed PTX with CuPy; saves the outputs to argv[1].

Sizes are fixed here and in tests/gpu/test_gpu_gmem_exact.py, which computes the
bytes each kernel moves from them.
"""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

PTX = Path(__file__).parent / "gmem_exact.sm80.ptx"
M, N, K = 64, 48, 128  # wmma_gemm: one warp per 16x16 tile of C
THREADS, BLOCKS, STAGES, LENGTH = 256, 8, 5, 30001  # pipelined_scale: 8 * 5 * 1024 slots, 30001 used


def main(out):
    mod = cp.RawModule(path=str(PTX))
    rs = np.random.RandomState(0)
    a = cp.asarray(rs.standard_normal((M, K)).astype(np.float16))
    b = cp.asarray(rs.standard_normal((N, K)).astype(np.float16))  # column-major K x N
    c = cp.zeros((M, N), np.float32)
    mod.get_function("wmma_gemm")((N // 16, M // 16), (32,), (a, b, c, np.int32(M), np.int32(N), np.int32(K)))
    x = cp.asarray(rs.standard_normal(LENGTH).astype(np.float32))
    y = cp.zeros(LENGTH, np.float32)
    mod.get_function("pipelined_scale")((BLOCKS,), (THREADS,), (x, y, np.int32(LENGTH), np.int32(STAGES)))
    cp.cuda.runtime.deviceSynchronize()
    expected_c = a.get().astype(np.float32) @ b.get().astype(np.float32).T
    assert np.allclose(c.get(), expected_c, atol=1e-2), "wmma_gemm is wrong"
    assert np.array_equal(y.get(), 2 * x.get()), "pipelined_scale is wrong"
    np.savez(out, c=c.get(), y=y.get())
    print("gmem_exact done")


if __name__ == "__main__":
    main(sys.argv[1])
