"""The command line on a real GPU: -o, -e, the closing line, the deferred runtime start.

Run on the device machine: `python -m pytest tests/gpu/test_gpu_cli.py -q`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import neutrino.trace as nt
from gpuutil import WORKLOADS, base_env, gpu, sm_count

pytestmark = gpu


def neutrino(*args, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "neutrino", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_output_dir_closing_line_and_block_sched_summary(tmp_path):
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    out = tmp_path / "run.trace"
    r = neutrino("-p", "block_sched", "-o", out, "--", sys.executable, WORKLOADS / "w_triton.py", tmp_path / "o.npz",
                 env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    closing = [line for line in r.stderr.splitlines() if "kernel(s) seen" in line]
    print("\n".join(closing))
    assert any(line.endswith(f"trace in {out}") for line in closing), r.stderr[-3000:]
    trace = nt.load(out)
    assert trace.launches
    start = trace.events[0]
    assert start["event"] == "start" and start.get("session")
    (exit_event,) = [e for e in trace.events if e["event"] == "exit"]
    assert exit_event["kernels_probed"] >= 1 and exit_event["kernels_seen"] >= exit_event["kernels_probed"]
    assert "neutrino: block_sched " in r.stderr  # the tool's exit summary (its analyze_hook)


def test_inline_probe_on_the_gpu(tmp_path):
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    out = tmp_path / "inline.trace"
    inline = 'position = "kernel", datamodel = "warp:8", after = "SAVE.u32 {%smid, %laneid};"'
    r = neutrino("-e", inline, "-o", out, "-q", "--", sys.executable, WORKLOADS / "w_triton.py", tmp_path / "o.npz",
                 env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "kernel(s) seen" not in r.stderr  # -q
    trace = nt.load(out)
    assert trace.launches
    for la in trace.launches:
        v = la.maps["inline"].valid()
        assert len(v) and (v["laneid"] == 0).all() and (v["smid"] < sm_count()).all()


def test_report_json_of_a_gpu_trace(tmp_path):
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    out = tmp_path / "g.trace"
    r = neutrino("-p", "gmem_bytes", "-o", out, "--", sys.executable, WORKLOADS / "w_triton.py", tmp_path / "o.npz",
                 env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    r = neutrino("report", out, "--format", "json", env=env)
    assert r.returncode == 0, r.stderr
    rows = {row["kernel"]: row for row in json.loads(r.stdout)["kernels"]}
    assert rows["vadd"]["gmem_bytes.bytes"] == 3 * 4 * (1 << 20)  # a quantity (report --format json), not a display string
    assert np.isfinite(rows["vadd"]["launches"])
