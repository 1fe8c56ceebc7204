"""One rank of the DDP acceptance run (benchmarks/ddp_acceptance.sh), started by torchrun.

A few training steps of a small MLP, compiled and then wrapped in DistributedDataParallel
(`DDP(torch.compile(net))`: compiling the DDP wrapper graph-breaks inside DDP and compiles no
Triton kernel at all), plus a hand-written Triton kernel of the program's own that scales each
input batch; each rank trains on its own batch, the gradients are all-reduced. Writes
OUT/losses.rank<R>.json: the loss of every step and a digest of the final
parameters, as float.hex, so that runs can be compared bit for bit.

With fewer GPUs than ranks (two processes on one GPU) the ranks share device
0 and use the gloo backend: NCCL refuses two ranks on one GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from torch.nn.parallel import DistributedDataParallel


@triton.jit
def _scale(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    """The program's own kernel: x * factor, elementwise."""
    out = torch.empty_like(x)
    n = x.numel()
    _scale[(triton.cdiv(n, 1024),)](x, out, n, factor, BLOCK=1024)
    return out


def model(d: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
        torch.nn.LayerNorm(4 * d),
        torch.nn.Linear(4 * d, d), torch.nn.GELU(),
        torch.nn.Linear(d, 16),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--dim", type=int, default=256)
    args = ap.parse_args()
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", local % gpus)
    torch.cuda.set_device(device)
    backend = "nccl" if gpus >= world else "gloo"
    dist.init_process_group(backend)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    net = model(args.dim).to(device)
    ddp = DistributedDataParallel(torch.compile(net), device_ids=[device.index])
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    gen = torch.Generator(device="cpu").manual_seed(1000 + rank)  # each rank its own data
    losses = []
    for _ in range(args.steps):
        x = scale(torch.randn(128, args.dim, generator=gen).to(device), 0.5)
        y = torch.randint(0, 16, (128,), generator=gen).to(device)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    digest = hashlib.sha256()
    for p in net.parameters():
        digest.update(p.detach().float().cpu().numpy().tobytes())
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"losses.rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "backend": backend, "device": device.index,
                   "losses": [v.hex() for v in losses], "params": digest.hexdigest()}, f)
    print(f"rank {rank}/{world} on cuda:{device.index} ({backend}): losses {[round(v, 5) for v in losses]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
