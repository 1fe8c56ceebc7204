"""Issue 15 on the GPU: JAX programs under `neutrino -p TOOL -- python prog.py`, no manual flag.

XLA compiles its PTX with libnvJitLink, or with a ptxas subprocess, and loads SASS-only cubins;
the shim taps nvJitLink (shim/compilers.c) and a ptxas wrapper first on PATH files each
module's PTX by its cubin's hash (runtime/subprocess_compilers.py), so those cubins are probed from
their PTX. The
workloads are in workloads/w_jax.py. XLA times its autotuning candidates unprobed
(frameworks.CompileWindow, issue 22), but some of its choices (reduction emitters) vary from
run to run on their own: these tests, which check what is probed, let plain and probed runs
share one autotuning cache (the plain run fills it). The issue-22 tests at the end do not:
each run autotunes for itself, and outputs without such reductions compare bit for bit.

First thing to run on a new machine: `python tests/gpu/jax_diagnose.py`.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest

from gpuutil import WORKLOADS, base_env, check_block_sched, fallbacks, gpu, run_plain, run_probed

pytestmark = gpu

sys.path.insert(0, str(WORKLOADS))
import w_jax  # noqa: E402

WORKLOAD = [sys.executable, str(WORKLOADS / "w_jax.py")]


@functools.lru_cache(maxsize=None)
def jax_gpu() -> tuple[bool, str]:
    """Whether JAX is importable here and has a GPU backend (asked in a child: importing JAX here
    would initialise CUDA in the test process)."""
    code = "import jax; d = jax.devices()[0]; print(d.platform, getattr(d, 'core_count', 0))"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    out = r.stdout.split()
    return (r.returncode == 0 and out[:1] == ["gpu"]), (r.stdout + r.stderr)[-500:]


@pytest.fixture
def jax_env(tmp_path):
    ok, why = jax_gpu()
    if not ok:
        pytest.skip(f"jax with a GPU backend is not available: {why}")
    env = base_env(tmp_path)
    env["XLA_FLAGS"] = f"--xla_gpu_per_fusion_autotune_cache_dir={tmp_path / 'autotune'}"
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"  # a cached executable is compiled where we cannot see it
    return env


def sms() -> int:
    ok, out = jax_gpu()
    return int(out.split()[1])


def run_both(tmp_path, env, mode: str, probe: str):
    run_plain(WORKLOAD + [mode, str(tmp_path / "plain.npz")], env)
    r, trace = run_probed(probe, WORKLOAD + [mode, str(tmp_path / "probed.npz")], tmp_path / "t", env)
    plain, probed = np.load(tmp_path / "plain.npz"), np.load(tmp_path / "probed.npz")
    assert sorted(plain.files) == sorted(probed.files)
    for k in plain.files:
        assert np.array_equal(plain[k], probed[k]), f"{mode}: output {k} differs under {probe}"
    return r, trace


def modules_by_source(trace) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in trace.events:
        if e.get("event") == "module":
            out[e.get("source")] = out.get(e.get("source"), 0) + 1
    return out


@pytest.mark.parametrize("probe", ["block_sched", "gmem_bytes"])
def test_jitted_training_step_is_probed_with_identical_results(tmp_path, jax_env, probe):
    r, trace = run_both(tmp_path, jax_env, "train", probe)
    print(r.stderr[-3000:])
    sources = modules_by_source(trace)  # XLA compiles with nvJitLink, or a ptxas subprocess (our wrapper files its PTX)
    assert sources.get("nvJitLink", 0) + sources.get("ptxas", 0) >= 1, f"no module compiled by XLA was seen:\n{r.stderr}"
    fusions = [la for la in trace.launches if "fusion" in la.kernel or "triton" in la.kernel]
    assert fusions, f"no XLA fusion kernel probed; kernels: {sorted({la.kernel for la in trace.launches})}"
    assert not fallbacks(trace), fallbacks(trace)[:3]
    flags = [e for e in trace.events if e.get("event") == "framework_flags"]
    assert flags and flags[0]["framework"] == "jax"
    if probe == "block_sched":
        check_block_sched(trace, sms())


def test_gmem_bytes_exact_on_a_jitted_elementwise_function(tmp_path, jax_env):
    r, trace = run_both(tmp_path, jax_env, "elementwise", "gmem_bytes")
    assert not fallbacks(trace), fallbacks(trace)[:3]
    assert trace.launches, f"nothing probed:\n{r.stderr[-3000:]}"
    moved = sum(int(la.maps["gmem_bytes"].valid()["bytes"].astype(np.uint64).sum()) for la in trace.launches)
    n = w_jax.N_ELEMENTWISE
    assert moved == 4 * n * 3, f"{[la.kernel for la in trace.launches]}: {moved} bytes, expected read x, y + write out"


@pytest.mark.parametrize("probe", ["block_sched", "gmem_bytes"])
def test_pallas_triton_kernel_is_probed(tmp_path, jax_env, probe):
    code = "from jax.experimental import pallas"
    if subprocess.run([sys.executable, "-c", code], capture_output=True).returncode:
        pytest.skip("this JAX has no Pallas")
    plain = subprocess.run(WORKLOAD + ["pallas", str(tmp_path / "check.npz")], env=jax_env, capture_output=True,
                           text=True, timeout=600)
    if plain.returncode:
        pytest.skip(f"Pallas does not run on this device: {plain.stderr[-800:]}")
    r, trace = run_both(tmp_path, jax_env, "pallas", probe)
    ours = [la for la in trace.launches if w_jax.PALLAS_NAME in la.kernel]
    assert ours, f"Pallas kernel not probed; kernels: {sorted({la.kernel for la in trace.launches})}\n{r.stderr[-2000:]}"
    assert not fallbacks(trace), fallbacks(trace)[:3]
    if probe == "block_sched":
        check_block_sched(trace, sms())
    else:
        moved = sum(int(la.maps["gmem_bytes"].valid()["bytes"].astype(np.uint64).sum()) for la in ours)
        assert moved == 3 * 4 * w_jax.PALLAS_N


# ---------------------------------------------------------------- issue 22: XLA's autotuning under probing

NUMERICS = [sys.executable, str(WORKLOADS / "w_xla_numerics.py")]


def printed_results(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("result ")]


@pytest.mark.parametrize("probe", ["block_sched", "gmem_bytes"])
@pytest.mark.parametrize("mode", ["f32", "bf16conv"])
def test_xla_autotuning_keeps_results_bitwise_identical(tmp_path, jax_env, probe, mode):
    """Each process autotunes for itself (no shared autotuning cache): the candidates XLA times
    while compiling run unprobed (frameworks.CompileWindow), so it picks the GEMM kernels it picks
    without us, and every output's bytes (hash and host sum) are the plain run's. Before the fix,
    the f32 program's GEMM choices changed under -p block_sched (Triton tiles, Triton -> cuBLASLt)."""
    env = dict(jax_env)
    env.pop("XLA_FLAGS")  # no shared autotuning cache
    plain = printed_results(run_plain(NUMERICS + [mode], env).stdout)
    r, trace = run_probed(probe, NUMERICS + [mode], tmp_path / "t", env)
    probed = printed_results(r.stdout)
    assert plain and len(probed) == len(plain), f"{plain}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    if probed != plain and printed_results(run_plain(NUMERICS + [mode], env).stdout) != plain:
        pytest.skip(f"XLA's own results differ between two plain runs on this machine: {plain}")
    assert probed == plain, f"results changed under -p {probe}:\nplain  {plain}\nprobed {probed}"
    assert trace.launches, f"nothing probed:\n{r.stderr[-2000:]}"
    compiles = [e for e in trace.events if e.get("event") == "xla_compile"]
    assert compiles, "no xla_compile event: JAX's compile function was not wrapped"
    assert not [e for e in trace.events if e.get("event") == "xla_compile_hook"]
    if mode == "f32":  # its Triton GEMM candidates are probe-able kernels: timed unprobed
        assert sum(e["launches"] for e in compiles) > 0, compiles
    jax_sums = [line for line in r.stdout.splitlines() if line.startswith("jax_sum ")]
    print(f"{mode} -p {probe}: {plain} {jax_sums}; {len(compiles)} compiles left "
          f"{sum(e['launches'] for e in compiles)} launches unprobed")
