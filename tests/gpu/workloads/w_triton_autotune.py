"""An `@triton.autotune` matmul whose result bits depend on the config that wins (issue 22).

Each program sums its K range in chunks of BLOCK_K: `acc += tl.dot(a, b) * scale` rounds every
chunk's partial product before adding it (the runtime `scale`, 1.0, keeps Triton from folding the
add into the dot's own accumulator), so configs with another BLOCK_K give other bits. The configs
differ widely in speed (one 128x128 tile config, two small-tile ones), so without probes the
same config wins every run.

usage: w_triton_autotune.py tuned [unhooked]   tune on the first call, launch CALLS times, print
                                               `chosen <config>` and `result <sha256 of C's bytes>`;
                                               `unhooked`: neutrino's autotune hooks taken off first
                                               (what the program saw before the fix; diagnostic)
       w_triton_autotune.py each               every config launched directly: `config <cfg> <sha256>`
"""
import hashlib
import sys

import torch
import triton
import triton.language as tl
import triton.testing

M = N = K = 2048
CALLS = 3
CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=2, num_stages=2),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=2, num_stages=2),
]


def quick_bench(kernel_call, quantiles):
    """Triton's do_bench with short warm-up and repetition windows (ms): the test stays short."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


@triton.jit
def matmul_chunks(a, b, c, scale, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak)
        y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc += tl.dot(x, y) * scale
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc)


def tuned_kernel():
    try:
        return triton.autotune(configs=CONFIGS, key=["M", "N", "K"], do_bench=quick_bench)(matmul_chunks)
    except TypeError:  # a Triton without do_bench=: its own (longer) benchmark
        return triton.autotune(configs=CONFIGS, key=["M", "N", "K"])(matmul_chunks)


def inputs():
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    return a, b, torch.empty(M, N, device="cuda", dtype=torch.float32)


def launch(kernel, a, b, c, **meta):
    def grid(m):
        return (triton.cdiv(M, m["BLOCK_M"]), triton.cdiv(N, m["BLOCK_N"]))

    kernel[grid](a, b, c, 1.0, M, N, K, *a.stride(), *b.stride(), *c.stride(), **meta)


def digest(c) -> str:
    torch.cuda.synchronize()
    return hashlib.sha256(c.cpu().numpy().tobytes()).hexdigest()


def take_hooks_off():
    """Neutrino's wrappers around Triton's Autotuner (runtime/autotune.py) undone, if present."""
    from triton.runtime.autotuner import Autotuner

    for name in ("run", "_bench"):
        function = vars(Autotuner).get(name)
        if getattr(function, "__wrapped__", None) is not None:
            setattr(Autotuner, name, function.__wrapped__)
            print(f"unhooked Autotuner.{name}")


def tuned(unhooked: bool):
    if unhooked:
        take_hooks_off()
    kernel = tuned_kernel()
    a, b, c = inputs()
    for _ in range(CALLS):
        launch(kernel, a, b, c)
    result = digest(c)
    want = a.float() @ b.float()
    assert torch.allclose(c, want, atol=0.5, rtol=1e-2), float((c - want).abs().max())
    for config, timing in (getattr(kernel, "configs_timings", None) or {}).items():  # the margins, to read
        print(f"timing {timing} ms: {config}")
    print(f"chosen {kernel.best_config}")
    print(f"result {result}")


def each():
    a, b, c = inputs()
    for config in CONFIGS:
        c.zero_()
        launch(matmul_chunks, a, b, c, num_warps=config.num_warps, num_stages=config.num_stages, **config.kwargs)
        print(f"config {config} {digest(c)}")


if __name__ == "__main__":
    if sys.argv[1] == "each":
        each()
    else:
        tuned(unhooked="unhooked" in sys.argv[2:])
