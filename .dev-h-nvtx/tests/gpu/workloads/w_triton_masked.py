"""A pipelined Triton matmul whose tiles overhang the matrices: the overhanging loads are masked.

With num_stages=3 Triton copies A and B tiles to shared memory with cp.async,
the masked elements (and the prologue's copies for iterations past the end)
with src-size 0; C is stored under a mask. Sizes are fixed here and in
tests/gpu/test_gpu_gmem_exact.py, which computes the bytes moved from them.
Saves C to argv[1].
"""
import sys

import numpy as np
import torch
import triton
import triton.language as tl

M, N, K = 200, 144, 208  # K and N divisible by 16 (vectorised masks), none divisible by its block
BM, BN, BK = 64, 64, 32


@triton.jit
def masked_matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def main(out):
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    masked_matmul[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, num_stages=3, num_warps=4)
    torch.cuda.synchronize()
    assert torch.allclose(c.float(), a.float() @ b.float(), atol=0.5, rtol=0.05), "masked_matmul is wrong"
    np.save(out, c.cpu().view(torch.uint8).numpy())
    print("triton masked done")


if __name__ == "__main__":
    main(sys.argv[1])
