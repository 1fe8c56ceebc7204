"""Issue 10, class 8 on the GPU: gmem_bytes counts exactly the bytes a kernel moves.

Two kernels of workloads/src/gmem_exact.cu (nvcc -arch=sm_80 -ptx, committed):
a wmma GEMM whose fragments are loaded from and stored to global memory, and a
double-buffered cp.async pipeline whose tail copies read only src-size bytes
(zero for the slots past the end). The expected bytes are computed here from
the problem sizes, not from the probe's semantics table.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from gpuutil import REPO, WORKLOADS, base_env, fallbacks, gpu, run_plain, run_probed

pytestmark = gpu

M, N, K = 64, 48, 128
THREADS, BLOCKS, STAGES, LENGTH = 256, 8, 5, 30001
PROBES = {"name": "gmem_bytes", "path": str(REPO / "neutrino" / "tools" / "gmem_bytes" / "probe.py")}


def expected_wmma_bytes() -> int:
    """Each 16x16 tile of C reads its 16-row band of A and 16-column band of B once, and writes itself."""
    tiles_m, tiles_n = M // 16, N // 16
    return tiles_n * (M * K * 2) + tiles_m * (K * N * 2) + M * N * 4


def expected_pipeline_bytes() -> int:
    """Every slot copies min(16, 4 * elements left) bytes (none past the end); every element is stored once."""
    per_stage = THREADS * 4
    block, stage, thread = np.meshgrid(np.arange(BLOCKS), np.arange(STAGES), np.arange(THREADS), indexing="ij")
    first = block * STAGES * per_stage + stage * per_stage + thread * 4
    loaded = np.clip(4 * (LENGTH - first), 0, 16).sum()
    return int(loaded) + 4 * LENGTH


def launch_bytes(trace, kernel: str) -> int:
    (launch,) = [la for la in trace.launches if la.kernel == kernel]
    values = launch.maps["gmem_bytes"].valid()
    return int(values[values.dtype.names[0]].astype(np.uint64).sum())


@pytest.mark.parametrize("form", sorted(PROBES))
def test_gmem_bytes_is_exact_for_wmma_and_masked_cp_async(tmp_path, form):
    pytest.importorskip("cupy")
    env = base_env(tmp_path)
    cmd = [sys.executable, str(WORKLOADS / "w_gmem_exact.py")]
    run_plain(cmd + [str(tmp_path / "plain.npz")], env)
    r, trace = run_probed(PROBES[form], cmd + [str(tmp_path / "probed.npz")], tmp_path / "t", env)
    assert not fallbacks(trace), r.stderr[-3000:]
    plain, probed = np.load(tmp_path / "plain.npz"), np.load(tmp_path / "probed.npz")
    assert all(np.array_equal(plain[k], probed[k]) for k in plain.files)
    counting_every_copy_as_16 = 16 * THREADS * BLOCKS * STAGES + 4 * LENGTH
    assert expected_pipeline_bytes() < counting_every_copy_as_16  # the masked tail matters
    assert launch_bytes(trace, "wmma_gemm") == expected_wmma_bytes()
    assert launch_bytes(trace, "pipelined_scale") == expected_pipeline_bytes()


# The pipelined Triton matmul of workloads/w_triton_masked.py (the Triton case).
TM, TN, TK = 200, 144, 208
TBM, TBN, TBK = 64, 64, 32


def expected_triton_bytes() -> int:
    """Each program reads the valid part of its A and B tiles once per K step and stores its valid C tile (f16)."""
    total = 0
    for pm in range(-(-TM // TBM)):
        rows = min(TBM, TM - pm * TBM)
        for pn in range(-(-TN // TBN)):
            cols = min(TBN, TN - pn * TBN)
            for k in range(0, TK, TBK):
                depth = min(TBK, TK - k)
                total += rows * depth * 2 + depth * cols * 2
            total += rows * cols * 2
    return total


@pytest.mark.parametrize("form", sorted(PROBES))
def test_gmem_bytes_is_exact_for_a_pipelined_masked_triton_matmul(tmp_path, form):
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_triton_masked.py")]
    run_plain(cmd + [str(tmp_path / "plain.npy")], env)
    r, trace = run_probed(PROBES[form], cmd + [str(tmp_path / "probed.npy")], tmp_path / "t", env)
    assert not fallbacks(trace), r.stderr[-3000:]
    assert np.array_equal(np.load(tmp_path / "plain.npy"), np.load(tmp_path / "probed.npy"))
    assert launch_bytes(trace, "masked_matmul") == expected_triton_bytes()
