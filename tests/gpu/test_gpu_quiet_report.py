"""Quiet graph replays on a real GPU (issue 24), the analysis side: what the shim writes (timeline.bin and
timeline_graphs.tsv) read back by the report. Needs the shim that writes timeline_graphs.tsv (quiet default).

Run on the device machine: `python -m pytest tests/gpu/test_gpu_quiet_report.py -q -s`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuutil import base_env, gpu, run_probed
from test_gpu_timeline import GRAPH_PROGRAM  # one torch CUDA graph of 4 ATen kernels, replayed 12 times

from neutrino.analysis import context
from neutrino.timeline import read_graph_counts

pytestmark = gpu


@pytest.mark.parametrize("rest", ["", "whole"])
def test_report_counts_quiet_replays(tmp_path, rest):
    """NEUTRINO_TIMELINE_GRAPH_NODES=3, EVERY=5, 12 replays: replays 1-3, 5 and 10 node by node, the 7 others quiet
    (no kernel record): the file says (12, 5, 7, 0), the report's graph line agrees with the records, and its json
    says 7 quiet with an estimate of 7 x the sampled replays' mean span. REST=whole: none quiet, the rest kind 4."""
    pytest.importorskip("torch")
    env = base_env(tmp_path)
    env.update(NEUTRINO_TIMELINE_GRAPH_NODES="3", NEUTRINO_TIMELINE_GRAPH_EVERY="5")
    if rest:
        env["NEUTRINO_TIMELINE_GRAPH_REST"] = rest
    r, trace = run_probed("block_sched", [sys.executable, "-c", GRAPH_PROGRAM], tmp_path / "tr", env)
    counts = read_graph_counts(trace.path)
    assert counts is not None, f"no timeline_graphs.tsv in {trace.path}: the shim does not write it yet"
    rows = [tuple(int(v) for v in row) for row in counts]
    ctx = context.load(trace.path)
    (g,) = [g for g in ctx.graphs if g.graph == 1]
    print(f"\nREST={rest or '-'}: timeline_graphs.tsv {rows}; report: sampled {g.sampled} whole {g.whole} quiet {g.quiet} "
          f"span {g.sampled_mean_ns:.0f} ns, kernels/replay {g.nodes}, estimate {g.quiet_estimate_ns}")
    assert rows[0][:2] == (1, 12) and g.launched == rows[0][1:]
    assert g.nodes >= 4 and g.sampled == rows[0][2]  # CUPTI recorded every replay launched node by node
    if rest:
        assert rows[0][3] == 0 and g.whole == rows[0][4] and g.sampled + g.whole == 12
    else:
        assert rows[0][1:] == (12, 5, 7, 0) and (g.sampled, g.whole, ctx.quiet) == (5, 0, 7)
        assert g.quiet_estimate_ns == pytest.approx(7 * g.sampled_mean_ns)
        doc = json.loads(subprocess.run([sys.executable, "-m", "neutrino", "report", str(trace.path), "--format", "json"],
                                        env=env, capture_output=True, text=True, timeout=300, check=True).stdout)
        assert doc["gpu_time"]["quiet_replays"] == 7 and doc["gpu_time"]["graph_counts_error"] is None
