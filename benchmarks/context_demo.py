"""The README's main-job example: a small training loop whose GPU time is mostly not Triton.

usage: python benchmarks/context_demo.py [STEPS]

Each step: an eager embedding lookup and layer norm (ATen), a torch.compile'd MLP block whose
matrix products go to cuBLAS and whose pointwise work Inductor turns into Triton kernels, a loss,
backward and an SGD update; the step sits in `neutrino.annotate("step")` and its forward in
`torch.cuda.nvtx.range("forward")`. Run it as `neutrino -p block_sched -- python
benchmarks/context_demo.py`, then `neutrino report trace/<run>`: the report opens with where GPU
time went (every kernel, probed or not) and the ranges the kernels ran under.
"""

from __future__ import annotations

import sys

import torch

import neutrino

VOCAB, DIM, BATCH = 4096, 512, 256


def main(steps: int) -> None:
    torch.manual_seed(0)
    embed = torch.nn.Embedding(VOCAB, DIM).cuda()
    block = torch.nn.Sequential(torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(), torch.nn.Linear(4 * DIM, DIM)).cuda()
    head = torch.nn.Linear(DIM, VOCAB).cuda()
    compiled = torch.compile(block)
    params = [*embed.parameters(), *block.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    tokens = torch.randint(0, VOCAB, (BATCH,), device="cuda")
    targets = torch.randint(0, VOCAB, (BATCH,), device="cuda")
    for _ in range(steps):
        with neutrino.annotate("step"):
            with torch.cuda.nvtx.range("forward"):
                x = torch.nn.functional.layer_norm(embed(tokens), (DIM,))
                logits = head(x + compiled(x))
            loss = torch.nn.functional.cross_entropy(logits, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    torch.cuda.synchronize()
    print(f"loss after {steps} steps: {loss.item():.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
