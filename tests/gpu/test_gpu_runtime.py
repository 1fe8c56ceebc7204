"""Acceptance of the runtime on the GPU machine (issue 3). Skipped without an NVIDIA GPU.

For each workload: outputs bitwise identical with and without probing; with
block_sched every warp of every probed launch has exactly one record with
elapsed > 0 and cuid < SM count; with gmem_bytes the vector-add kernels count
exactly the bytes they must move.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from gpuutil import (WORKLOADS, base_env, check_block_sched, fallbacks, gmem_bytes, gpu, run_plain, run_probed,
                     same_files, sm_count)

pytestmark = gpu


def _npz_equal(a, b):
    x, y = np.load(a), np.load(b)
    assert sorted(x.files) == sorted(y.files)
    for k in x.files:
        assert np.array_equal(x[k], y[k]), f"output {k} differs"


def _report(name, r, trace):
    print(f"[{name}] probed launches={len(trace.launches)} kernels={sorted({la.kernel for la in trace.launches})} "
          f"fallbacks={[(e['kernel'], e['stage'], e['reason'][:80]) for e in fallbacks(trace)]}")
    print(r.stderr[-1500:])


def test_triton_kernels(tmp_path):
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc_plain")
    cmd = [sys.executable, str(WORKLOADS / "w_triton.py")]
    run_plain(cmd + [str(tmp_path / "plain.npz")], env)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc_probed")
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz")], tmp_path / "t1", env)
    _report("triton block_sched", r, trace)
    _npz_equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    assert {la.kernel for la in trace.launches} == {"vadd", "softmax", "matmul", "layernorm"}
    check_block_sched(trace, sm_count())
    assert all(la.frame and "w_triton.py" in la.frame for la in trace.launches)
    r, trace = run_probed("gmem_bytes", cmd + [str(tmp_path / "probed2.npz")], tmp_path / "t2", env)
    _report("triton gmem_bytes", r, trace)
    _npz_equal(tmp_path / "plain.npz", tmp_path / "probed2.npz")
    assert gmem_bytes(trace, "vadd") == [3 * 4 * (1 << 20)]


def test_inductor_block_fwd_bwd(tmp_path):
    env = base_env(tmp_path)
    cmd = [sys.executable, str(WORKLOADS / "w_inductor.py")]
    # One Inductor cache for both runs: Inductor autotunes reduction configs by timing them, so two
    # cold compilations may pick different configs (and round differently); the probed run must
    # run the same kernels as the plain one. It loads them from the cache with cuModuleLoad.
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "ic")
    run_plain(cmd + [str(tmp_path / "plain.npz")], env)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz")], tmp_path / "t", env)
    _report("inductor block_sched", r, trace)
    _npz_equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    n = check_block_sched(trace, sm_count())
    kernels = {la.kernel for la in trace.launches}
    assert n >= 5 and any("poi" in k for k in kernels) and any(("per" in k or "red" in k) for k in kernels)
    assert any(la.frame and "w_inductor.py" in la.frame for la in trace.launches)


@pytest.mark.parametrize("how", ["path"])
def test_cupy_rawmodule_from_ptx(tmp_path, how):
    pytest.importorskip("cupy")
    env = base_env(tmp_path)
    cmd = [sys.executable, str(WORKLOADS / "w_cupy.py")]
    run_plain(cmd + [str(tmp_path / "plain.npy"), how], env)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npy"), how], tmp_path / "t1", env)
    _report(f"cupy {how} block_sched", r, trace)
    same_files(tmp_path / "plain.npy", tmp_path / "probed.npy")
    assert [la.kernel for la in trace.launches] == ["saxpy4"]
    check_block_sched(trace, sm_count())
    r, trace = run_probed("gmem_bytes", cmd + [str(tmp_path / "probed2.npy"), how], tmp_path / "t2", env)
    same_files(tmp_path / "plain.npy", tmp_path / "probed2.npy")
    assert gmem_bytes(trace, "saxpy4") == [48 * (1 << 18)]


@pytest.fixture(scope="module")
def nvcc_programs(tmp_path_factory):
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc")
    d = tmp_path_factory.mktemp("nvcc")
    progs = {}
    for cudart in ("static", "shared"):
        exe = d / f"corpus_{cudart}"
        subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=compute_90", "-cudart", cudart, "-o", str(exe),
                        str(WORKLOADS / "corpus_main.cu")], check=True, cwd=WORKLOADS)
        progs[cudart] = exe
    return progs


NVCC_KERNELS = {"saxpy4", "hscale", "_Z5sgemmILi16EEviiifPKfS1_fPf", "_Z5sgemmILi32EEviiifPKfS1_fPf", "histogram",
                "reduce_sum", "stencil3d", "transpose"}


# (kernel, bytes of its output section) in the order corpus_main.cu writes them
NVCC_SECTIONS = [("saxpy4", 4 * 4 * (1 << 18)), ("hscale", 4 * (1 << 16)), ("sgemm16", 256 * 192 * 4),
                 ("sgemm32", 256 * 192 * 4), ("histogram", 1024), ("reduce_sum", 4), ("stencil3d", 64 * 32 * 16 * 4),
                 ("transpose", 200 * 300 * 4)]


def nvcc_diff(a, b) -> list[str]:
    """Which kernels' outputs differ between two corpus_main output files."""
    x, y = a.read_bytes(), b.read_bytes()
    out, off = [], 0
    for name, size in NVCC_SECTIONS:
        if x[off:off + size] != y[off:off + size]:
            xa = np.frombuffer(x[off:off + size], np.uint32)
            ya = np.frombuffer(y[off:off + size], np.uint32)
            out.append(f"{name}: {int((xa != ya).sum())} of {len(xa)} words differ")
        off += size
    return out


@pytest.mark.parametrize("cudart", ["static", "shared"])
def test_nvcc_ptx_only_programs(tmp_path, nvcc_programs, cudart):
    env = base_env(tmp_path)
    exe = str(nvcc_programs[cudart])
    run_plain([exe, str(tmp_path / "plain.bin")], env)
    run_plain([exe, str(tmp_path / "plain2.bin")], env)
    assert not nvcc_diff(tmp_path / "plain.bin", tmp_path / "plain2.bin"), "the program itself is not deterministic"
    r, trace = run_probed("block_sched", [exe, str(tmp_path / "probed.bin")], tmp_path / "t1", env)
    _report(f"nvcc {cudart} block_sched", r, trace)
    diff1 = nvcc_diff(tmp_path / "plain.bin", tmp_path / "probed.bin")
    assert {la.kernel for la in trace.launches} == NVCC_KERNELS
    check_block_sched(trace, sm_count())
    r, trace = run_probed("gmem_bytes", [exe, str(tmp_path / "probed2.bin")], tmp_path / "t2", env)
    diff2 = nvcc_diff(tmp_path / "plain.bin", tmp_path / "probed2.bin")
    print(f"[nvcc {cudart}] gmem saxpy4={gmem_bytes(trace, 'saxpy4')} hscale={gmem_bytes(trace, 'hscale')}")
    assert gmem_bytes(trace, "saxpy4") == [48 * (1 << 18)]
    assert gmem_bytes(trace, "hscale") == [8 * (1 << 16)]
    assert not diff1 and not diff2, f"outputs differ: block_sched {diff1}; gmem_bytes {diff2}"


def test_eager_torch_unchanged(tmp_path):
    env = base_env(tmp_path)
    cmd = [sys.executable, str(WORKLOADS / "w_eager.py")]
    run_plain(cmd + [str(tmp_path / "plain.npy")], env)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npy")], tmp_path / "t", env)
    _report("eager", r, trace)
    same_files(tmp_path / "plain.npy", tmp_path / "probed.npy")
    assert not trace.launches
    assert any(e.get("event") == "no_ptx" for e in trace.events)


def test_launch_filter_and_memusage(tmp_path):
    env = base_env(tmp_path)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "ic")
    cmd = [sys.executable, str(WORKLOADS / "w_inductor.py"), str(tmp_path / "o.npz"), "4"]
    r, trace = run_probed("block_sched", cmd, tmp_path / "t1", env, "--launches", "1:3")
    assert trace.launches and all(la.event["kernel_launch"] in (1, 2) for la in trace.launches)
    r, trace = run_probed("block_sched", cmd, tmp_path / "t2", env, "--memusage")
    assert not trace.launches and "--memusage" in r.stderr
    assert any(e.get("event") == "memusage" for e in trace.events)


def test_count_sized_map_nvcc(tmp_path, nvcc_programs):
    """cap = "count": one device ring per launch (no counting kernel), every load address of saxpy4 recorded, none dropped."""
    env = base_env(tmp_path)
    exe = str(nvcc_programs["static"])
    run_plain([exe, str(tmp_path / "plain.bin")], env)
    r, trace = run_probed(str(WORKLOADS / "mem_count.toml"), [exe, str(tmp_path / "probed.bin")], tmp_path / "t", env,
                          "-k", "saxpy4:hscale")
    _report("nvcc mem_count", r, trace)
    assert not nvcc_diff(tmp_path / "plain.bin", tmp_path / "probed.bin")
    (la,) = [la for la in trace.launches if la.kernel == "saxpy4"]
    m = la.maps["loads"]
    assert m.cap_is_count and m.cap == 2 and m.dropped == 0
    v = m.valid()
    assert len(v) == 2 * (1 << 18)  # two float4 loads per thread
    assert (np.diff(v["addr"][::2].astype(np.int64)) == 16).all()  # x[i], thread after thread
