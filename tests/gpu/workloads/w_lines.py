"""Kernels for the lines tool (tests/gpu/test_gpu_lines.py, benchmarks/lines_cost.py): argv[1] is one of

* `loop`: tests/data/lines/loop.ptx (CuPy), whose per-line trip counts are known by construction:
  LOOP_GRID x LOOP_BLOCK threads each run the loop LOOP_TRIPS times;
* `call`: tests/data/lines/call.ptx (CuPy), the same grid and trips, each trip calling two `.func`s;
* `triton`: a Triton kernel with one deliberately expensive line (marked EXPENSIVE) in a loop;
* `cuda`: the same in CUDA C++, compiled here with `nvcc -lineinfo -ptx` and loaded with CuPy;
* `matmul`: a Triton matmul (tl.dot), for the benchmark;
* `attention`: a Triton attention forward pass (online softmax over key blocks), for the benchmark.

Each kernel's result is checked against NumPy/PyTorch, so a probe that changed it fails the run.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
LOOP_PTX = HERE.parents[1] / "data" / "lines" / "loop.ptx"
CALL_PTX = HERE.parents[1] / "data" / "lines" / "call.ptx"  # loop.ptx's shape, calling two .funcs
LOOP_GRID, LOOP_BLOCK, LOOP_TRIPS = 4, 128, 37
N, ITERS, REPEAT = 1 << 16, 24, 3
MATMUL = 1024  # M = N = K
ATTN_HEADS, ATTN_CTX, ATTN_D, ATTN_BLOCK = 16, 1024, 64, 64  # batch x heads, sequence, head size, tile

CUDA_SOURCE = r"""
extern "C" __global__ void expensive_line(const float* x, float* y, int n, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = x[i];
  for (int k = 0; k < iters; ++k) {
    acc = sinf(acc) * 0.999f + cosf(acc * 1.001f) + expf(-acc * acc);  // EXPENSIVE
  }
  y[i] = acc + x[i];
}
"""


def reference(x: np.ndarray, iters: int) -> np.ndarray:
    acc = x.astype(np.float64)
    for _ in range(iters):
        acc = np.sin(acc) * 0.999 + np.cos(acc * 1.001) + np.exp(-acc * acc)
    return acc + x


def loop_trips() -> int:
    """LOOP_TRIPS, or W_LINES_TRIPS when set (a long loop: threads past the staging limit, passes/shared_agg.py)."""
    return int(os.environ.get("W_LINES_TRIPS", LOOP_TRIPS))


def run_loop():
    import cupy as cp

    trips = loop_trips()
    out = cp.zeros(1, np.uint32)
    cp.RawModule(path=str(LOOP_PTX)).get_function("loopk")((LOOP_GRID,), (LOOP_BLOCK,), (out, np.uint32(trips)))
    cp.cuda.runtime.deviceSynchronize()
    r2 = r3 = 0
    while True:  # the kernel's loop, in Python: every thread computes the same value
        r3 = (r3 + r2) & 0xFFFFFFFF
        r3 = ((r3 * 3) & 0xFFFFFFFF) ^ r2
        r2 += 1
        if r2 >= trips:
            break
    assert int(out.get()[0]) == r3, "loopk is wrong"


def call_reference(trips: int) -> int:
    """What every thread of call.ptx writes: r3 = clampv(mix(r3, r2)) for r2 = 0 .. trips - 1."""
    r3 = 0
    for r2 in range(trips):
        mixed = ((r3 * 3 + r2) & 0xFFFFFFFF) ^ 1365
        r3 = mixed if mixed < 1000 else mixed & 1023
    return r3


def run_call():
    import cupy as cp

    out = cp.zeros(1, np.uint32)
    cp.RawModule(path=str(CALL_PTX)).get_function("callk")((LOOP_GRID,), (LOOP_BLOCK,), (out, np.uint32(LOOP_TRIPS)))
    cp.cuda.runtime.deviceSynchronize()
    assert int(out.get()[0]) == call_reference(LOOP_TRIPS), "callk is wrong"


NESTED_PTX = HERE.parents[1] / "data" / "lines" / "nested.ptx"
NESTED_GRID, NESTED_BLOCK, NESTED_OUTER = 3, 96, 9


def nested_trips(t: int) -> tuple[int, int, bool]:
    """(outer trips, inner trips per outer trip, leaves early) of thread t of nested.ptx (t = %tid.x)."""
    early = t % 7 == 3 and NESTED_OUTER >= 2
    return (2 if early else NESTED_OUTER), t % 5, early


def run_nested():
    import cupy as cp

    out = cp.zeros(1, np.uint32)
    cp.RawModule(path=str(NESTED_PTX)).get_function("nestk")((NESTED_GRID,), (NESTED_BLOCK,), (out, np.uint32(NESTED_OUTER)))
    cp.cuda.runtime.deviceSynchronize()
    want = 0
    for t in range(NESTED_BLOCK):
        outer, inner, early = nested_trips(t)
        want += 0 if early else outer * inner * (inner - 1) // 2
    assert int(out.get()[0]) == NESTED_GRID * want, "nestk is wrong"


def cuda_ptx() -> Path:
    """CUDA_SOURCE compiled with `nvcc -lineinfo -ptx` into W_LINES_DIR (kept after the run: the report
    shows the source text of the lines from that .cu file); the .ptx path."""
    tmp = Path(os.environ.get("W_LINES_DIR") or tempfile.mkdtemp(prefix="w_lines_"))
    src, ptx = tmp / "expensive_line.cu", tmp / "expensive_line.ptx"
    src.write_text(CUDA_SOURCE)
    subprocess.run(["nvcc", "-lineinfo", "-ptx", "-arch=sm_90", str(src), "-o", str(ptx)], check=True)
    return ptx


def run_cuda():
    import cupy as cp

    kernel = cp.RawModule(path=str(cuda_ptx())).get_function("expensive_line")
    x = cp.asarray(np.random.RandomState(0).uniform(-1, 1, N).astype(np.float32))
    y = cp.zeros(N, np.float32)
    for _ in range(REPEAT):
        kernel((N // 256,), (256,), (x, y, np.int32(N), np.int32(ITERS)))
    cp.cuda.runtime.deviceSynchronize()
    assert np.allclose(y.get(), reference(x.get(), ITERS), atol=1e-3), "expensive_line (CUDA) is wrong"


def triton_kernels():
    """The Triton kernels (defined here, so that their .loc lines point into this file)."""
    import triton
    import triton.language as tl

    @triton.jit
    def expensive_line_kernel(x_ptr, y_ptr, n, iters, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        acc = x
        for _ in range(iters):
            acc = tl.sin(acc) * 0.999 + tl.cos(acc * 1.001) + tl.exp(-acc * acc)  # EXPENSIVE
        tl.store(y_ptr + offs, acc + x, mask=mask)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    return expensive_line_kernel, matmul_kernel


def triton_inputs():
    """(x, y) of the expensive-line kernel, (a, b, c) of the matmul: torch tensors on the GPU."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(N, device="cuda", generator=gen) * 2 - 1
    a = torch.randn(MATMUL, MATMUL, device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn(MATMUL, MATMUL, device="cuda", dtype=torch.float16, generator=gen)
    return (x, torch.empty_like(x)), (a, b, torch.empty(MATMUL, MATMUL, device="cuda", dtype=torch.float32))


def run_triton():
    import torch

    expensive_line_kernel, _ = triton_kernels()
    (x, y), _ = triton_inputs()
    for _ in range(REPEAT):
        expensive_line_kernel[(N // 256,)](x, y, N, ITERS, BLOCK=256)
    torch.cuda.synchronize()
    assert np.allclose(y.cpu().numpy(), reference(x.cpu().numpy(), ITERS), atol=1e-3), "expensive_line (Triton) is wrong"


def run_matmul():
    import torch

    _, matmul_kernel = triton_kernels()
    _, (a, b, c) = triton_inputs()
    for _ in range(REPEAT):
        matmul_kernel[(MATMUL // 64, MATMUL // 64)](a, b, c, MATMUL, MATMUL, MATMUL, BM=64, BN=64, BK=32)
    torch.cuda.synchronize()
    assert torch.allclose(c, a.float() @ b.float(), atol=1e-1, rtol=1e-2), "matmul is wrong"


def attention_kernel():
    """A Triton attention forward kernel (flash-attention's online softmax), one program per query tile and head."""
    import triton
    import triton.language as tl

    @triton.jit
    def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, scale, BM: tl.constexpr, BN: tl.constexpr,
                             D: tl.constexpr):
        pm, head = tl.program_id(0), tl.program_id(1)
        base = head * n_ctx * D
        rm = pm * BM + tl.arange(0, BM)
        rd = tl.arange(0, D)
        q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :])
        m_i = tl.full((BM,), float("-inf"), tl.float32)
        l_i = tl.zeros((BM,), tl.float32)
        acc = tl.zeros((BM, D), tl.float32)
        for start in range(0, n_ctx, BN):
            rn = start + tl.arange(0, BN)
            k = tl.load(k_ptr + base + rn[None, :] * D + rd[:, None])
            s = tl.dot(q, k) * scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + base + rn[:, None] * D + rd[None, :])
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
            m_i = m_new
        tl.store(o_ptr + base + rm[:, None] * D + rd[None, :], acc / l_i[:, None])

    return attention_fwd_kernel


def attention_inputs():
    """q, k, v (fp16) and o (fp32), each ATTN_HEADS x ATTN_CTX x ATTN_D, on the GPU; the softmax scale."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(1)
    shape = (ATTN_HEADS, ATTN_CTX, ATTN_D)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
    return q, k, v, torch.empty(shape, device="cuda", dtype=torch.float32), ATTN_D ** -0.5


def attention_grid():
    return (ATTN_CTX // ATTN_BLOCK, ATTN_HEADS)


def run_attention():
    import torch

    kernel = attention_kernel()
    q, k, v, o, scale = attention_inputs()
    for _ in range(REPEAT):
        kernel[attention_grid()](q, k, v, o, ATTN_CTX, scale, BM=ATTN_BLOCK, BN=ATTN_BLOCK, D=ATTN_D)
    torch.cuda.synchronize()
    ref = torch.softmax(q.float() @ k.float().transpose(1, 2) * scale, -1) @ v.float()
    assert torch.allclose(o, ref, atol=2e-2, rtol=2e-2), "attention is wrong"


if __name__ == "__main__":
    {"loop": run_loop, "call": run_call, "cuda": run_cuda, "triton": run_triton, "matmul": run_matmul,
     "attention": run_attention, "nested": run_nested}[sys.argv[1]]()
    print(f"w_lines {sys.argv[1]} done", flush=True)
