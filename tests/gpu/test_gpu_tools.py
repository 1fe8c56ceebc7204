"""Issue 4 on the GPU: every built-in DSL tool on the Triton kernels and the torch.compile block.

Outputs must be bitwise identical with and without probing; the DSL gmem_bytes
must count exactly the bytes vadd moves; `neutrino report` and the Perfetto
export must work on the traces. Set NEUTRINO_GPU_OUT to keep the report
pictures (the DMAT PNG) for a look.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuutil import REPO, WORKLOADS, base_env, gpu, run_plain, run_probed

pytestmark = gpu

TOOLS = ["block_sched", "gmem_bytes", "dmat", "tensorop", "program_progress"]
DSL = {t: str(REPO / "neutrino" / "tools" / t / "probe.py") for t in TOOLS}


def _npz_equal(a, b):
    x, y = np.load(a), np.load(b)
    assert sorted(x.files) == sorted(y.files)
    for k in x.files:
        assert np.array_equal(x[k], y[k]), f"output {k} differs"


def _report_and_export(trace, tool, tmp_path, env):
    r = subprocess.run([sys.executable, "-m", "neutrino.cli", "report", str(trace.path)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    print(f"--- report {tool} ---\n{r.stdout[-2500:]}")
    out = tmp_path / f"{tool}.perfetto.json"
    r = subprocess.run([sys.executable, "-m", "neutrino.cli", "export", str(trace.path), "--perfetto", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    events = json.loads(out.read_text())["traceEvents"]
    assert isinstance(events, list)
    keep = os.environ.get("NEUTRINO_GPU_OUT")
    if keep:
        dest = Path(keep) / tool
        dest.mkdir(parents=True, exist_ok=True)
        for png in (trace.path / "report").rglob("*.png"):
            shutil.copy(png, dest / png.name)
        shutil.copy(out, dest / out.name)
    return events


@pytest.fixture(scope="module")
def plain_runs(tmp_path_factory):
    """One unprobed run of each workload, shared by the tools (and their compile caches)."""
    root = tmp_path_factory.mktemp("plain")
    env = base_env(root)
    env["TRITON_CACHE_DIR"] = str(root / "tc")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(root / "ic")
    run_plain([sys.executable, str(WORKLOADS / "w_triton.py"), str(root / "triton.npz")], env)
    run_plain([sys.executable, str(WORKLOADS / "w_inductor.py"), str(root / "inductor.npz")], env)
    return root, env


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_on_triton_kernels(tool, tmp_path, plain_runs):
    root, env = plain_runs
    cmd = [sys.executable, str(WORKLOADS / "w_triton.py")]
    r, trace = run_probed(DSL[tool], cmd + [str(tmp_path / "probed.npz")], tmp_path / "t", env)
    _npz_equal(root / "triton.npz", tmp_path / "probed.npz")
    kernels = {la.kernel for la in trace.launches}
    assert kernels == {"vadd", "softmax", "matmul", "layernorm"}, r.stderr[-2000:]
    for la in trace.launches:
        assert tool in la.maps
    if tool == "gmem_bytes":
        (vadd,) = [la for la in trace.launches if la.kernel == "vadd"]
        assert int(vadd.maps["gmem_bytes"].valid()["bytes"].astype(np.uint64).sum()) == 3 * 4 * (1 << 20)
    if tool == "tensorop":
        (mm,) = [la for la in trace.launches if la.kernel == "matmul"]
        assert int(mm.maps["tensorop"].valid()["count"].sum()) > 0
    if tool == "dmat":
        (vadd,) = [la for la in trace.launches if la.kernel == "vadd"]
        assert len(vadd.maps["dmat"].valid()) == 3 * (1 << 20) // 4  # x, y, out: one 16-byte access per 4 floats
    events = _report_and_export(trace, tool, tmp_path, env)
    if tool == "block_sched":
        assert events, "block_sched gives timeline events"


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_on_inductor_block(tool, tmp_path, plain_runs):
    root, env = plain_runs  # the same Inductor cache: the probed run loads the same kernels
    cmd = [sys.executable, str(WORKLOADS / "w_inductor.py")]
    r, trace = run_probed(DSL[tool], cmd + [str(tmp_path / "probed.npz")], tmp_path / "t", env)
    _npz_equal(root / "inductor.npz", tmp_path / "probed.npz")
    assert len(trace.launches) >= 5, r.stderr[-2000:]
    _report_and_export(trace, tool, tmp_path, env)
