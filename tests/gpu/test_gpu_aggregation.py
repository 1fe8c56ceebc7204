"""Aggregation maps on the GPU: sums computed on the device equal the per-thread records, exactly.

For every kernel of the nvcc corpus program (partial warps, divergent exits,
atomics of its own) and the Triton kernels: the `sum` form of gmem_bytes
(hand-written TOML and DSL) gives, per launch, exactly the sum of the
per-thread form's records; tensorop's counters equal what the per-thread
analysis derives; hist totals equal the number of samples (counted by a sum
map in the same run), and the program's outputs stay bitwise identical.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

import neutrino.trace as nt
from neutrino.analysis import tensorop as tensorop_analysis
from gpuutil import REPO, WORKLOADS, base_env, gpu, run_plain, run_probed

pytestmark = gpu

TOOLS = REPO / "neutrino" / "tools"


def per_kernel(trace: nt.Trace) -> dict[str, list]:
    out: dict[str, list] = {}
    for la in trace.launches:
        out.setdefault(la.kernel, []).append(la)
    return out


@pytest.fixture(scope="module")
def corpus_program(tmp_path_factory):
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc")
    d = tmp_path_factory.mktemp("nvcc")
    exe = d / "corpus"
    subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=compute_90", "-o", str(exe),
                    str(WORKLOADS / "corpus_main.cu")], check=True, cwd=WORKLOADS)
    env = base_env(d)
    run_plain([str(exe), str(d / "plain.bin")], env)
    return exe, d / "plain.bin", env


def _thread_sums(trace: nt.Trace, map_name: str, field: str) -> dict[str, list[int]]:
    return {k: [int(la.maps[map_name].valid()[field].astype(np.uint64).sum()) for la in ls]
            for k, ls in per_kernel(trace).items()}


@pytest.mark.parametrize("form", ["name", "path"])
def test_summed_gmem_bytes_equal_per_thread_sums_on_the_nvcc_corpus(tmp_path, corpus_program, form):
    exe, plain, env = corpus_program
    summed_probe, thread_probe = ("gmem_bytes", "gmem_bytes_thread") if form == "name" else \
        (str(TOOLS / "gmem_bytes" / "probe.py"), str(TOOLS / "gmem_bytes_thread" / "probe.py"))
    _, summed = run_probed(summed_probe, [str(exe), str(tmp_path / "s.bin")], tmp_path / "s", env)
    _, thread = run_probed(thread_probe, [str(exe), str(tmp_path / "t.bin")], tmp_path / "t", env)
    assert (tmp_path / "s.bin").read_bytes() == plain.read_bytes() == (tmp_path / "t.bin").read_bytes()
    field = "bytes"
    want = _thread_sums(thread, "gmem_bytes_thread", field)
    got = {k: [la.maps["gmem_bytes"].totals()[field] for la in ls] for k, ls in per_kernel(summed).items()}
    print(f"[{form}] device sums {got}")
    assert len(got) == 8 and got == want
    assert got["saxpy4"] == [48 * (1 << 18)] and got["hscale"] == [8 * (1 << 16)]
    for la in summed.launches:
        m = la.maps["gmem_bytes"]
        assert m.type == "sum" and m.units == 1 and m.record_bytes == 8 * len(m.fields)  # counters, not records
    if form == "name":
        active = {k: [int(np.count_nonzero(la.maps["gmem_bytes_thread"].valid()["bytes"])) for la in ls]
                  for k, ls in per_kernel(thread).items()}
        assert {k: [la.maps["gmem_bytes"].totals()["active_threads"] for la in ls]
                for k, ls in per_kernel(summed).items()} == active


def test_hist_totals_equal_the_samples(tmp_path, corpus_program):
    exe, plain, env = corpus_program
    _, trace = run_probed(str(WORKLOADS / "agg_hist.toml"), [str(exe), str(tmp_path / "h.bin")], tmp_path / "h", env)
    _, thread = run_probed("gmem_bytes_thread", [str(exe), str(tmp_path / "t.bin")], tmp_path / "t", env)
    assert (tmp_path / "h.bin").read_bytes() == plain.read_bytes()
    bytes_per_thread = _thread_sums(thread, "gmem_bytes_thread", "bytes")
    assert len(trace.launches) == 8
    for la in trace.launches:
        acc = la.maps["acc"].totals()
        log2, lin = la.maps["log2_bytes"].histogram(), la.maps["lin_bytes"].histogram()
        print(f"{la.kernel}: {acc} log2 {log2.rows()} warp {la.maps['warp_acc'].totals()}")
        assert acc["accesses"] > 0
        assert log2.total == lin.total == acc["accesses"]
        assert [acc["bytes"]] == bytes_per_thread[la.kernel]  # instruction-position sums: exact too
        # every sample is in the bucket its size belongs to: sizes are powers of two up to 16 here
        sizes = {lo: c for lo, _, c in log2.rows()}
        assert sum(c * lo for lo, c in sizes.items()) == acc["bytes"]
        assert 0 < la.maps["warp_acc"].totals()["accesses"] <= acc["accesses"]
    (saxpy,) = [la for la in trace.launches if la.kernel == "saxpy4"]
    n = 3 * (1 << 18)  # two float4 loads and one float4 store per thread
    assert saxpy.maps["log2_bytes"].histogram().rows() == [(16, 32, n)]
    assert saxpy.maps["lin_bytes"].histogram().rows() == [(16, 20, n)]
    assert saxpy.maps["warp_acc"].totals()["accesses"] == n // 32


def test_tensorop_counters_equal_the_per_thread_analysis(tmp_path):
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_triton.py")]
    run_plain(cmd + [str(tmp_path / "plain.npz")], env)
    _, summed = run_probed(str(TOOLS / "tensorop" / "probe.py"), cmd + [str(tmp_path / "s.npz")], tmp_path / "s", env)
    _, thread = run_probed(str(TOOLS / "tensorop_thread" / "probe.py"), cmd + [str(tmp_path / "t.npz")], tmp_path / "t", env)
    for name in ("s", "t"):
        x, y = np.load(tmp_path / "plain.npz"), np.load(tmp_path / f"{name}.npz")
        assert all(np.array_equal(x[k], y[k]) for k in x.files)
    by_kernel = {la.kernel: la for la in thread.launches}
    for la in summed.launches:
        got = tensorop_analysis.analyze_launch(la, la.maps["tensorop"]).stats
        ref_la = by_kernel[la.kernel]
        want = tensorop_analysis.analyze_launch(ref_la, ref_la.maps["tensorop_thread"]).stats
        print(f"{la.kernel}: device {got} per-thread {want}")
        assert (got.thread_instructions, got.warp_instructions, got.active_warps) == \
            (want.thread_instructions, want.warp_instructions, want.active_warps)
    (mm,) = [la for la in summed.launches if la.kernel == "matmul"]
    assert mm.maps["tensorop"].totals()["warp_count"] > 0


def test_summed_gmem_bytes_on_the_triton_vadd(tmp_path):
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_triton.py")]
    _, summed = run_probed("gmem_bytes", cmd + [str(tmp_path / "s.npz")], tmp_path / "s", env)
    _, thread = run_probed("gmem_bytes_thread", cmd + [str(tmp_path / "t.npz")], tmp_path / "t", env)
    want = _thread_sums(thread, "gmem_bytes_thread", "bytes")
    got = {k: [la.maps["gmem_bytes"].totals()["bytes"] for la in ls] for k, ls in per_kernel(summed).items()}
    assert got == want and got["vadd"] == [3 * 4 * (1 << 20)]
