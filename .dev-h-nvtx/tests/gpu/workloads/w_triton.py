"""The corpus Triton kernels with fixed inputs; saves every output (raw bytes) to argv[1]."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "src"))
import numpy as np
import torch
import triton

from triton_kernels import layernorm, matmul, softmax, vadd

N_VADD = 1 << 20


def main(out, repeat=1):
    for _ in range(repeat):  # benchmarks launch every kernel several times
        outs = run_once()
    np.savez(out, **{k: v.cpu().view(torch.uint8).numpy() for k, v in outs.items()})
    print("triton done")


def run_once():
    torch.manual_seed(0)
    d = "cuda"
    outs = {}
    x = torch.randn(N_VADD, device=d); y = torch.randn_like(x); o = torch.empty_like(x)
    vadd[(triton.cdiv(x.numel(), 1024),)](x, y, o, x.numel(), B=1024); outs["vadd"] = o
    s = torch.randn(512, 1000, device=d); so = torch.empty_like(s)
    softmax[(512,)](s, so, s.stride(0), 1000, B=1024); outs["softmax"] = so.clone()
    a = torch.randn(1024, 1024, device=d, dtype=torch.float16); b = torch.randn_like(a); c = torch.empty_like(a)
    matmul[(8, 8)](a, b, c, 1024, 1024, 1024, *a.stride(), *b.stride(), *c.stride(), BM=128, BN=128, BK=64)
    outs["matmul"] = c
    w = torch.randn(1000, device=d); bb = torch.randn(1000, device=d)
    layernorm[(512,)](s, so, w, bb, s.stride(0), 1000, 1e-5, B=1024); outs["layernorm"] = so
    torch.cuda.synchronize()
    assert torch.allclose(outs["vadd"], x + y)
    return outs


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
