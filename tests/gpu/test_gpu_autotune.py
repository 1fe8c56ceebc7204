"""Issue 22 for Triton: `@triton.autotune` times its configs unprobed (runtime/autotune.py), so a
probed program picks the config it picks without us, and its results keep their bits.

The workload (workloads/w_triton_autotune.py) is a matmul whose bits depend on BLOCK_K, tuned over
configs of clearly different speed. Each process tunes for itself (Triton keeps no tuning results
on disk by default). Outputs are compared by the sha256 of their bytes.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from gpuutil import WORKLOADS, base_env, gpu, run_plain, run_probed

pytestmark = gpu

WORKLOAD = [sys.executable, str(WORKLOADS / "w_triton_autotune.py")]


@functools.lru_cache(maxsize=None)
def triton_gpu() -> tuple[bool, str]:
    code = "import torch, triton; assert torch.cuda.is_available(); print(triton.__version__)"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return r.returncode == 0, (r.stdout + r.stderr)[-500:]


@pytest.fixture
def env(tmp_path):
    ok, why = triton_gpu()
    if not ok:
        pytest.skip(f"triton with a CUDA device is not available: {why}")
    return base_env(tmp_path)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> list[str]:
    """One plain run's tuning, shared by the tests (a second plain run only where they differ)."""
    ok, why = triton_gpu()
    if not ok:
        pytest.skip(f"triton with a CUDA device is not available: {why}")
    lines = tuned_lines(run_plain(WORKLOAD + ["tuned"], base_env(tmp_path_factory.mktemp("plain"))).stdout)
    assert len(lines) == 2, lines
    return lines


def tuned_lines(stdout: str) -> list[str]:
    """What decides the comparison: the config that won and the hash of the result's bytes."""
    return [line for line in stdout.splitlines() if line.startswith(("chosen ", "result "))]


@functools.lru_cache(maxsize=None)
def distinct_results_per_config() -> int:
    """How many different result hashes the configs give when launched directly (run once)."""
    r = subprocess.run(WORKLOAD + ["each"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return len({line.split()[-1] for line in r.stdout.splitlines() if line.startswith("config ")})


@pytest.mark.parametrize("probe", ["block_sched", "gmem_bytes"])
def test_triton_autotuning_keeps_results_bitwise_identical(tmp_path, env, plain, probe):
    assert distinct_results_per_config() >= 2, "the configs give the same bits: the comparison would prove nothing"
    r, trace = run_probed(probe, WORKLOAD + ["tuned"], tmp_path / "t", env)
    probed = tuned_lines(r.stdout)
    assert len(probed) == 2, f"{plain}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    if probed != plain and tuned_lines(run_plain(WORKLOAD + ["tuned"], env).stdout) != plain:
        pytest.skip(f"the winning config differs between two plain runs on this machine: {plain}")
    assert probed == plain, f"the tuning changed under -p {probe}:\nplain  {plain}\nprobed {probed}"

    tunings = [e for e in trace.events if e.get("event") == "autotune"]
    assert not [e for e in trace.events if e.get("event") == "autotune_hook"], "Triton's Autotuner was not found"
    assert len(tunings) == 1 and tunings[0]["kernel"] == "matmul_chunks", tunings
    assert tunings[0]["launches"] > 0 and tunings[0]["windows"] == 3, tunings  # 3 configs timed, unprobed
    assert plain[0] == f"chosen {tunings[0]['chosen']}"
    ours = [la for la in trace.launches if "matmul_chunks" in la.kernel]
    assert len(ours) == 3, f"the program's 3 launches of the winner are probed, no candidate is: {len(ours)}"
    print(f"-p {probe}: {plain[0]}; {tunings[0]['launches']} candidate launches unprobed "
          f"in {tunings[0]['seconds']} s")


def test_without_the_window_candidates_are_probed(tmp_path, env, plain):
    """Diagnostic for the fix: with the hooks taken off (as before it) every candidate launch is
    probed; what the tuning picks then is printed, not asserted (it depends on the probes' cost)."""
    r, trace = run_probed("block_sched", WORKLOAD + ["tuned", "unhooked"], tmp_path / "t", env)
    assert "unhooked Autotuner._bench" in r.stdout, r.stdout[-2000:]
    assert not [e for e in trace.events if e.get("event") == "autotune"]
    ours = [la for la in trace.launches if "matmul_chunks" in la.kernel]
    assert len(ours) > 3, "the candidates' launches were probed too"
    timings = [line for line in r.stdout.splitlines() if line.startswith("timing ")]
    print(f"unhooked -p block_sched: plain {plain}, probed {tuned_lines(r.stdout)}; {len(ours)} launches probed; "
          f"{timings}")
