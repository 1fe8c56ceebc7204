"""Sampling inside CUDA graphs on the GPU (issue 24): `--launches every:K` over replays.

A replay that --launches leaves out runs the program's own kernels and no append node (the host
chooses at cuGraphLaunch: shim/graphpick.c); where the host cannot choose, the probed kernel runs
with its probe gate set (passes/buffers.py, runtime/cudagraphs/ring.py "Sampling"). Either way it
must write nothing, so every selected replay's gmem_bytes total is exact (a left-out replay that
wrote would add its bytes to the next selected one).
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import pytest

from gpuutil import WORKLOADS, base_env, check_block_sched, gmem_bytes, gpu, run_plain, run_probed, sm_count

pytestmark = gpu

REPLAYS = 1000
EVERY = 100
N = 1 << 20


def _equal(a, b):
    x, y = np.load(a), np.load(b)
    assert sorted(x.files) == sorted(y.files)
    for k in x.files:
        assert np.array_equal(x[k], y[k]), f"output {k} differs"


def _setup(tmp_path):
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_graphs.py"), "manual"]
    run_plain(cmd + [str(tmp_path / "plain.npz"), str(REPLAYS)], env)
    return env, cmd


@pytest.mark.parametrize("twin", [True, False], ids=["twin", "switching"])
def test_every_kth_replay_is_written_exact(tmp_path, twin):
    env, cmd = _setup(tmp_path)
    if not twin:  # the replays left out switch the probed graph's nodes (NEUTRINO_GRAPH_TWIN=0)
        env["NEUTRINO_GRAPH_TWIN"] = "0"
    r, trace = run_probed("gmem_bytes", cmd + [str(tmp_path / "probed.npz"), str(REPLAYS)], tmp_path / "t", env,
                          "--graphs", "--launches", f"every:{EVERY}")
    print(r.stderr[-1500:])
    _equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    graph = [la for la in trace.launches if la.graph is not None]
    per_node = Counter(la.graph for la in graph)
    print(f"[every:{EVERY}] results per node: {dict(per_node)}")
    assert len(per_node) == 2 and set(per_node.values()) == {REPLAYS // EVERY}, per_node
    vadd = [la for la in graph if la.kernel == "vadd"]
    assert sorted(la.event["replay"] for la in vadd) == list(range(0, REPLAYS, EVERY))
    sub = type(trace)(trace.path, trace.probe_text, trace.events, vadd)
    assert gmem_bytes(sub, "vadd") == [3 * 4 * N] * (REPLAYS // EVERY)
    # the host chose the replays (shim/graphpick.c): the replays left out ran the twin (the program's own
    # graph), the selected ones the probed graph, set probed once; no fallback to the device gate or to
    # switching nodes
    picks = [e for e in trace.events if e["event"] == "graph_pick"]
    fallbacks = [e for e in trace.events if e["event"] in ("graph_pick_fallback", "graph_pick_switching")]
    print(f"[every:{EVERY}] host picking: {picks}; fallbacks: {fallbacks}")
    assert not fallbacks
    assert len(picks) == 1 and picks[0]["launches"] == REPLAYS
    if twin:
        assert picks[0]["switches"] == 1 and picks[0]["twin_launches"] == REPLAYS - REPLAYS // EVERY
    else:  # one switch into each selected replay and one out of it
        assert picks[0]["switches"] == 2 * (REPLAYS // EVERY) and picks[0]["twin_launches"] == 0


def test_sampled_block_sched_records_complete(tmp_path):
    env, cmd = _setup(tmp_path)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz"), str(REPLAYS)], tmp_path / "t", env,
                          "--graphs", "--launches", f"every:{EVERY}")
    print(r.stderr[-1500:])
    _equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    per_node = Counter(la.graph for la in trace.launches if la.graph is not None)
    assert len(per_node) == 2 and set(per_node.values()) == {REPLAYS // EVERY}, per_node
    check_block_sched(trace, sm_count())
