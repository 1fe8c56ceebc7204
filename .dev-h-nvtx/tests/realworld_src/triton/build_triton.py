"""Compile the Triton kernels below to PTX without a GPU (triton.compile with a GPUTarget).

    python tests/realworld_src/triton/build_triton.py OUT_DIR

Every kernel is built for PTX ISA 9.0, the newest the ptxas we test against
(CUDA 13.0) reads, and assembled (Triton checks its output) by that ptxas, not
Triton's bundled ones (12.8 for sm_80, newer for sm_90). Triton 3.9.0.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


@triton.jit
def masked_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax_rows(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, (num / tl.sum(num, axis=0)).to(tl.float16), mask=mask)


@triton.jit
def matmul_pipelined(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        ka = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        kb = tl.load(b, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(ka, kb, acc)
        a += BK * sak
        b += BK * sbk
    c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_tma(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=3):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))


@triton.jit
def layernorm_dweight_atomic(dy_ptr, x_ptr, dw_ptr, db_ptr, lock_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.atomic_add(dw_ptr + cols, (dy * x).to(tl.bfloat16), mask=mask)
    tl.atomic_add(db_ptr + cols, dy.to(tl.float16), mask=mask)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.atomic_xchg(lock_ptr, 0)


@triton.jit
def debug_print(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.device_print("x", x)
    tl.device_assert(x == x, "nan")


@triton.jit
def matmul_fp8_persistent(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NUM_SMS: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    tiles_n = tl.cdiv(N, BN)
    num_tiles = tl.cdiv(M, BM) * tiles_n
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True, warp_specialize=True):
        pid_m, pid_n = tile // tiles_n, tile % tiles_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = a_desc.load([pid_m * BM, k * BK])
            b = b_desc.load([pid_n * BN, k * BK])
            acc = tl.dot(a, b.T, acc)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


F16, F32, BF16 = "*fp16", "*fp32", "*bf16"
KERNELS = [
    (masked_add, {"x_ptr": F32, "y_ptr": F32, "out_ptr": F32, "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}, [80, 90], {}),
    (softmax_rows, {"out_ptr": F16, "in_ptr": F16, "stride": "i32", "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}, [90], {"num_warps": 8}),
    (matmul_pipelined, {"a_ptr": F16, "b_ptr": F16, "c_ptr": F16, "M": "i32", "N": "i32", "K": "i32", "sam": "i32", "sak": "i32",
                        "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
     {"BM": 128, "BN": 128, "BK": 32}, [80, 90], {"num_stages": 3, "num_warps": 4}),
    (matmul_tma, {"a_ptr": F16, "b_ptr": F16, "c_ptr": F16, "M": "i32", "N": "i32", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
     {"BM": 128, "BN": 128, "BK": 64}, [90], {"num_warps": 4}),
    (layernorm_dweight_atomic, {"dy_ptr": F32, "x_ptr": F32, "dw_ptr": BF16, "db_ptr": F16, "lock_ptr": "*i32", "n_rows": "i32", "n_cols": "i32", "BLOCK": "constexpr"},
     {"BLOCK": 512}, [90], {}),
    (matmul_fp8_persistent, {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": BF16, "M": "i32", "N": "i32", "K": "i32",
                             "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "NUM_SMS": "constexpr"},
     {"BM": 128, "BN": 128, "BK": 64, "NUM_SMS": 132}, [90], {"num_warps": 4, "num_stages": 3}),
    (debug_print, {"x_ptr": F32, "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}, [80], {}),
]

if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ptxas = shutil.which("ptxas")
    if ptxas:
        os.environ["TRITON_PTXAS_PATH"] = os.environ["TRITON_PTXAS_BLACKWELL_PATH"] = ptxas
    for fn, signature, constexprs, archs, options in KERNELS:
        for arch in archs:
            source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
            try:
                compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"ptx_version": 90, **options})
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                print(f"triton {fn.__name__} sm_{arch}: FAILED {type(e).__name__}: {str(e)[:300]}")
                continue
            target = out / f"{fn.__name__}.sm_{arch}.ptx"
            target.write_text(compiled.asm["ptx"])
            print("triton", target.name)
