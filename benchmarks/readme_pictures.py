"""The README's pictures: a Triton matmul (fp16 in, fp32 accumulate) run under Neutrino.

    neutrino -p block_sched -o bs.trace -- python benchmarks/readme_pictures.py 2048   # 1,024 blocks: waves
    neutrino -p dmat -o dmat.trace -- python benchmarks/readme_pictures.py 512         # 64 blocks: small trace
    neutrino report bs.trace; neutrino report dmat.trace

Tiles of 64 x 64 (BLOCK_K 32), num_warps 4, num_stages 1: with one stage Triton loads the tiles with
plain global loads (no cp.async), which the dmat tool's `#memory.global` records. The product is
checked against torch (the profiled program must give the same result).
"""

import sys

import torch
import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K = 64, 64, 32


@triton.jit
def matmul(a, b, c, size, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    per_row = size // BN
    rows = (pid // per_row) * BM + tl.arange(0, BM)
    cols = (pid % per_row) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, size, BK):
        tile_a = tl.load(a + rows[:, None] * size + (k + ks)[None, :])
        tile_b = tl.load(b + (k + ks)[:, None] * size + cols[None, :])
        acc += tl.dot(tile_a, tile_b)
    tl.store(c + rows[:, None] * size + cols[None, :], acc)


def main(size: int, launches: int = 2) -> None:
    torch.manual_seed(0)
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float32)
    grid = ((size // TILE_M) * (size // TILE_N),)
    for _ in range(launches):
        matmul[grid](a, b, c, size, BM=TILE_M, BN=TILE_N, BK=TILE_K, num_warps=4, num_stages=1)
    torch.cuda.synchronize()
    want = a.float() @ b.float()
    assert torch.allclose(c, want, rtol=1e-2, atol=1e-1), float((c - want).abs().max())
    print(f"matmul {size}: {launches} launches of {grid[0]} blocks, result checked")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 512, int(sys.argv[2]) if len(sys.argv) > 2 else 2)
