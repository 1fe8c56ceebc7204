"""Acceptance of CUDA graph probing on the GPU machine (issue 12). Skipped without an NVIDIA GPU.

* A manual torch.cuda.graphs capture of two Triton kernels, replayed 1000 times, and a
  torch.compile(mode="reduce-overhead") training loop: outputs bitwise identical with and
  without probing.
* block_sched: exactly one record per warp in every probed replay, one result per node per replay.
* gmem_bytes: the vector add moves exactly 3 * 4 * N bytes in every replay.
* --launches counts replays: 0:10 gives exactly 10 results per graph node.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from gpuutil import WORKLOADS, base_env, check_block_sched, fallbacks, gmem_bytes, gpu, run_plain, run_probed, sm_count

pytestmark = gpu

REPLAYS = 1000
N = 1 << 20


def _npz_equal(a, b):
    x, y = np.load(a), np.load(b)
    assert sorted(x.files) == sorted(y.files)
    for k in x.files:
        assert np.array_equal(x[k], y[k]), f"output {k} differs"


def _graph_launches(trace):
    return [la for la in trace.launches if la.graph is not None]


def _report(name, r, trace):
    nodes = Counter((la.graph, la.kernel) for la in _graph_launches(trace))
    print(f"[{name}] probed launches={len(trace.launches)} graph replays={sum(nodes.values())} per node={dict(nodes)} "
          f"fallbacks={[(e['kernel'], e['stage'], e['reason'][:80]) for e in fallbacks(trace)]} "
          f"unprobed={[e for e in trace.events if e.get('event') == 'graph_unprobed'][:3]}")
    print(r.stderr[-1500:])


@functools.lru_cache(maxsize=None)
def _capability() -> tuple[int, int]:
    r = subprocess.run([sys.executable, "-c", "import torch; print(*torch.cuda.get_device_capability(0))"],
                       capture_output=True, text=True, timeout=120)
    major, minor = r.stdout.split()
    return int(major), int(minor)


def _check_append_edges(trace):
    """The manual capture is a chain of two probed kernels: on sm_90+ the append node's edge from the second
    is a launch-order edge (the append kernel waits for it with griddepcontrol.wait), never made ordinary."""
    appends = [e for e in trace.events if e.get("event") == "graph_append"]
    ordinary = [e for e in trace.events if e.get("event") == "graph_edge_ordinary"]
    print(f"[append edges] {appends} {ordinary}")
    assert appends and all(len(e["graph_nodes"]) == 2 for e in appends) and not ordinary, (appends, ordinary)
    if _capability() >= (9, 0):
        assert all(e["launch_order"] == e["graph_nodes"][-1] for e in appends), appends


def _check_data_path(trace):
    """The chain (the default: spec/runtime.md, "The chain") takes the manual capture's two probed kernels: one
    `graph_chain` event naming both, no append node; with it off, the append node's edges as above."""
    chains = [e for e in trace.events if e.get("event") == "graph_chain"]
    if not chains:
        _check_append_edges(trace)
        return
    appends = [e for e in trace.events if e.get("event") in ("graph_append", "graph_chain_refused")]
    print(f"[chain] {chains}")
    assert len(chains) == 1 and len(chains[0]["graph_nodes"]) == 2 and not appends, (chains, appends)


@pytest.fixture
def manual_plain(tmp_path):
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_graphs.py"), "manual"]
    run_plain(cmd + [str(tmp_path / "plain.npz"), str(REPLAYS)], env)
    return env, cmd


def test_manual_capture_block_sched(tmp_path, manual_plain):
    env, cmd = manual_plain
    # --when-full=wait: the append kernel waits for the host to drain a slot, so every replay is written
    # (by default a replay finding its node's ring full is dropped and counted)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz"), str(REPLAYS)], tmp_path / "t", env, "--graphs",
                          "--when-full", "wait")
    _report("manual block_sched", r, trace)
    _npz_equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    replays = _graph_launches(trace)
    per_node = Counter(la.graph for la in replays)
    assert len(per_node) == 2 and set(per_node.values()) == {REPLAYS}, per_node
    assert {la.kernel for la in replays} == {"vadd", "accumulate"}
    for node in per_node:
        assert sorted(la.event["replay"] for la in replays if la.graph == node) == list(range(REPLAYS))
    check_block_sched(trace, sm_count())  # every warp of every probed replay: exactly one record
    _check_append_edges(trace)


def test_manual_capture_gmem_bytes_exact_per_replay(tmp_path, manual_plain):
    env, cmd = manual_plain
    r, trace = run_probed("gmem_bytes", cmd + [str(tmp_path / "probed.npz"), str(REPLAYS)], tmp_path / "t", env, "--graphs")
    _report("manual gmem_bytes", r, trace)
    _npz_equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    graph_vadd = [la for la in _graph_launches(trace) if la.kernel == "vadd"]
    assert len(graph_vadd) == REPLAYS
    sub = type(trace)(trace.path, trace.probe_text, trace.events, graph_vadd)
    assert gmem_bytes(sub, "vadd") == [3 * 4 * N] * REPLAYS
    _check_data_path(trace)


def test_launch_filter_counts_replays(tmp_path, manual_plain):
    env, cmd = manual_plain
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz"), str(REPLAYS)], tmp_path / "t", env, "--graphs",
                          "--launches", "0:10")
    _report("manual 0:10", r, trace)
    _npz_equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    per_node = Counter(la.graph for la in _graph_launches(trace))
    assert len(per_node) == 2 and set(per_node.values()) == {10}


def test_reduce_overhead_training_loop(tmp_path):
    env = base_env(tmp_path)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "ic")  # one cache: both runs run the same kernels
    cmd = [sys.executable, str(WORKLOADS / "w_graphs.py"), "compile"]
    run_plain(cmd + [str(tmp_path / "plain.npz")], env)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz")], tmp_path / "t", env, "--graphs")
    _report("reduce-overhead block_sched", r, trace)
    _npz_equal(tmp_path / "plain.npz", tmp_path / "probed.npz")
    replays = _graph_launches(trace)
    assert replays, "no replay of a CUDA graph was probed"
    check_block_sched(trace, sm_count())
    per_node = Counter(la.graph for la in replays)
    # every probed node of a graph is replayed as often as its graph: one result per node per replay
    by_graph: dict[int, set[int]] = {}
    for (g, _), n in per_node.items():
        by_graph.setdefault(g, set()).add(n)
    assert all(len(counts) == 1 for counts in by_graph.values()), per_node
