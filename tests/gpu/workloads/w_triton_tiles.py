"""One Triton kernel launched LAUNCHES times (argv[2], default 200) on a fixed grid with a chosen tile
size (argv[1] = BLOCK), after the GPU was kept busy for about WARM_SECONDS by a spin kernel (its
clocks at their steady value before the first launch that is measured).

Each program works through the same PER_PROGRAM elements in tiles of BLOCK, with a chain of
FMAs per element, so the grid (264 programs) and the block (num_warps=4: 128 threads) are the same
whatever BLOCK is: `neutrino diff` matches the two runs' kernel by name and launch shape. A small
BLOCK leaves most threads idle and needs many more tile iterations: each block takes longer.
"""
import sys

import torch
import triton
import triton.language as tl

PROGRAMS, PER_PROGRAM, LAUNCHES = 264, 16384, 200
WARM_SECONDS = 0.3


@triton.jit
def tiled_fma(x, o, per_program, BLOCK: tl.constexpr):
    base = tl.program_id(0) * per_program
    for start in range(0, per_program, BLOCK):
        i = base + start + tl.arange(0, BLOCK)
        v = tl.load(x + i)
        for _ in range(16):
            v = v * 1.0001 + 0.5
        tl.store(o + i, v)


def warm_up() -> None:
    """Busy the GPU for about WARM_SECONDS (one launch of torch's spin kernel, 2 GHz assumed) so that
    its clocks leave their idle value before the kernel under test runs."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(WARM_SECONDS * 2e9))
        torch.cuda.synchronize()


def main(block: int, launches: int) -> None:
    x = torch.randn(PROGRAMS * PER_PROGRAM, device="cuda")
    o = torch.empty_like(x)
    warm_up()
    for _ in range(launches):
        tiled_fma[(PROGRAMS,)](x, o, PER_PROGRAM, BLOCK=block, num_warps=4)
    torch.cuda.synchronize()
    want = x.clone()
    for _ in range(16):
        want = want * 1.0001 + 0.5
    assert torch.allclose(o, want, rtol=1e-5, atol=1e-5)
    print(f"tiled_fma BLOCK={block}: {launches} launches done")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else LAUNCHES)
