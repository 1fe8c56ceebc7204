"""Shared helpers of the GPU tests: detection, running a workload with and without Neutrino, checks."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import neutrino.trace as nt

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
REPO = HERE.parent.parent


@functools.lru_cache(maxsize=None)
def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and "GPU" in r.stdout


gpu = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)"],
                       capture_output=True, text=True, timeout=120)
    return int(r.stdout.strip())


def base_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    if env.get("NEUTRINO_PTXAS", "").endswith("fake_ptxas.py"):  # tests/conftest.py's, for the fake drivers
        del env["NEUTRINO_PTXAS"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["NEUTRINO_CACHE_DIR"] = str(tmp / "ncache")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_plain(cmd: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"plain run failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def run_probed(probe: str, cmd: list[str], tracedir: Path, env: dict, *extra: str, timeout: int = 600):
    full = [sys.executable, "-m", "neutrino.runtime.start.launcher", "-p", probe, "--tracedir", str(tracedir), *extra, "--", *cmd]
    r = subprocess.run(full, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"probed run failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r, main_trace(tracedir)


def main_trace(tracedir: Path) -> nt.Trace:
    """The run directory with the most launches (compile workers leave none)."""
    # a ranked job writes <tracedir>/<job>/rank<R>/event.log: one level deeper than a plain run
    runs = [p for p in tracedir.iterdir() if (p / "event.log").exists()]
    runs += [r for p in tracedir.iterdir() if p.is_dir() for r in p.iterdir() if (r / "event.log").exists()]
    assert runs, f"no trace written under {tracedir}"
    traces = [nt.load(p) for p in runs]
    return max(traces, key=lambda t: (len(t.launches), len(t.events)))


def check_block_sched(trace: nt.Trace, sms: int) -> int:
    """Every warp of every probed launch has exactly one record, elapsed > 0, cuid < SM count."""
    assert trace.launches, "no probed launches"
    for la in trace.launches:
        m = la.maps["block_sched"]
        assert m.units == nt.units_for("warp", la.grid, la.block)
        assert (np.asarray(m.counts) == 1).all(), f"{la.kernel}: warps without exactly one record"
        v = m.valid()
        assert (v["elapsed"] > 0).all(), f"{la.kernel}: elapsed 0"
        assert (v["cuid"] < sms).all(), f"{la.kernel}: cuid >= {sms}"
    return len(trace.launches)


def gmem_bytes(trace: nt.Trace, kernel_substring: str) -> list[int]:
    out = []
    for la in trace.launches:
        if kernel_substring in la.kernel:
            v = la.maps["gmem_bytes"].valid()
            out.append(int(v["bytes"].astype(np.uint64).sum()))
    return out


def fallbacks(trace: nt.Trace) -> list[dict]:
    return [e for e in trace.events if e.get("event") == "fallback"]


def same_files(a: Path, b: Path) -> None:
    assert a.read_bytes() == b.read_bytes(), f"{a} and {b} differ"
