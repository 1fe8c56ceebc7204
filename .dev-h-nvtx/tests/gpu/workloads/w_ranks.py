"""One rank of a two-rank job (started by torchrun): Triton kernels on rank-specific data, then an
all-reduce of their outputs. Saves this rank's reduced outputs (raw bytes) to OUT/rank<R>.npz.
With fewer GPUs than ranks the ranks share GPU 0 and use gloo (NCCL refuses two ranks on one GPU)."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "src"))
import numpy as np
import torch
import torch.distributed as dist
import triton

from triton_kernels import softmax, vadd


def main(out):
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(local % gpus)
    dist.init_process_group("nccl" if gpus >= world else "gloo")
    torch.manual_seed(rank)
    d = "cuda"
    x = torch.randn(1 << 20, device=d); y = torch.randn_like(x); o = torch.empty_like(x)
    s = torch.randn(512, 1000, device=d); so = torch.empty_like(s)
    for _ in range(3):
        vadd[(triton.cdiv(x.numel(), 1024),)](x, y, o, x.numel(), B=1024)
        softmax[(512,)](s, so, s.stride(0), 1000, B=1024)
        dist.all_reduce(o)
        dist.all_reduce(so)
    torch.cuda.synchronize()
    np.savez(os.path.join(out, f"rank{rank}.npz"), vadd=o.cpu().view(torch.uint8).numpy(),
             softmax=so.cpu().view(torch.uint8).numpy())
    dist.destroy_process_group()
    print(f"rank {rank} done")


if __name__ == "__main__":
    main(sys.argv[1])
