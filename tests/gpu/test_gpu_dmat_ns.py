"""The built-in dmat tool on a real GPU: %globaltimer times, so the DMAT picture is in ns and its
span fits inside the launch (spec/tools.md, dmat)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from neutrino.tools.dmat import analysis as dmat

from gpuutil import REPO, base_env, gpu, run_probed

pytestmark = gpu


def test_dmat_records_globaltimer_ns(tmp_path):
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(REPO / "benchmarks" / "readme_pictures.py"), "512", "2"]
    r, trace = run_probed("dmat", cmd, tmp_path / "t", env)
    assert "result checked" in r.stdout
    check_matmul_trace(trace)


def check_matmul_trace(trace) -> None:
    """The two matmul launches of readme_pictures.py 512 under -p dmat."""
    launches = [la for la in trace.launches if la.kernel == "matmul"]
    assert len(launches) == 2
    for la in launches:
        md = la.maps["dmat"]
        assert md.records.dtype.names[0] == "gtime"
        result = dmat.analyze_launch(la, md, trace.probe_text)
        assert result.time_unit == "ns" and result.hist.accesses > 0
        # 64 blocks x 128 threads, 16 k-steps: each thread loads A and B tiles, then stores C
        assert result.hist.accesses >= 64 * 128 * 16 * 2
        if la.duration_ns:  # the accesses happen while the kernel runs (duration includes launch latency)
            assert 0 < result.hist.t_span <= la.duration_ns + 2_000, (result.hist.t_span, la.duration_ns)
        times = np.unique(md.valid()["gtime"].astype(np.int64))
        assert times[-1] - times[0] + 1 == result.hist.t_span
        print(f"launch {la.index}: span {result.hist.t_span} ns, duration {la.duration_ns} ns, "
              f"{len(times)} distinct times, smallest step {int(np.diff(times).min()) if len(times) > 1 else 0} ns")
