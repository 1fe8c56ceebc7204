"""The chain (spec/runtime.md, "The chain") on the GPU with the shim's native writer (issue 24). Skipped without an
NVIDIA GPU.

A torch.cuda.graph of three probed Triton kernels in a chain (tests/gpu/workloads/w_graph_chain.py), 1,000 replays,
NEUTRINO_GRAPH_CHAIN=1, block_sched on every replay: the capture takes the chain (a `graph_chain` event, no
`graph_chain_refused`, no append node); every node has one frame per replay, launch numbers 0..999, each frame a
record of every warp of the grid (check_block_sched); the program's outputs equal a plain run's. The rings hold
fewer slots than the replays, so only the poller draining them during the run writes every replay.

With `--launches every:100` over 10,000 replays (spec/runtime.md, "The chain", "Sampling"): the host launches the twin
for the replays left out; the chain's launches are the 100 selected ones, each node's frames numbered 0, 100, ...,
9,900; outputs equal a plain run's.
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np

from gpuutil import WORKLOADS, base_env, check_block_sched, fallbacks, gpu, run_plain, run_probed, sm_count

pytestmark = gpu

REPLAYS = 1000


def test_chain_of_three_triton_kernels_every_replay(tmp_path):
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_graph_chain.py")]
    run_plain(cmd + [str(tmp_path / "plain.npz"), str(REPLAYS)], env)
    env["NEUTRINO_GRAPH_CHAIN"] = "1"
    env["NEUTRINO_GRAPH_RING_SLOTS"] = "512"  # (fewer than the replays: the poller must drain during the run)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz"), str(REPLAYS)], tmp_path / "t", env,
                          "--graphs")
    chains = [e for e in trace.events if e.get("event") == "graph_chain"]
    refused = [e for e in trace.events if e.get("event") in ("graph_chain_refused", "graph_append")]
    replays = [la for la in trace.launches if la.graph is not None]
    per_node = Counter(la.graph for la in replays)
    drops = [e for e in trace.events if e.get("event") == "dropped"]
    print(f"[chain] {chains} refused/append={refused[:3]} per node={dict(per_node)} drops={drops} "
          f"fallbacks={fallbacks(trace)[:3]}\n{r.stderr[-1500:]}")
    x, y = np.load(tmp_path / "plain.npz"), np.load(tmp_path / "probed.npz")
    assert sorted(x.files) == sorted(y.files) and all(np.array_equal(x[k], y[k]) for k in x.files)
    assert len(chains) == 1 and not refused, (chains, refused)
    (ev,) = chains
    assert len(ev["graph_nodes"]) == 3 and ev["ring_slots"] < REPLAYS, ev
    assert len(per_node) == 3 and set(per_node.values()) == {REPLAYS}, per_node
    assert {la.kernel for la in replays} == {"vadd", "accumulate", "blend"}
    for node in per_node:
        assert [la.event["replay"] for la in replays if la.graph == node] == list(range(REPLAYS)), node
    assert not drops, drops
    sub = type(trace)(trace.path, trace.probe_text, trace.events, replays)
    check_block_sched(sub, sm_count())  # every warp of every replay's grid: exactly one record


def test_chain_every_100_of_10000_replays(tmp_path):
    replays = 10_000
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_graph_chain.py")]
    run_plain(cmd + [str(tmp_path / "plain.npz"), str(replays)], env)
    env["NEUTRINO_GRAPH_CHAIN"] = "1"
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npz"), str(replays)], tmp_path / "t", env,
                          "--graphs", "--launches", "every:100")
    chains = [e for e in trace.events if e.get("event") == "graph_chain"]
    refused = [e for e in trace.events if e.get("event") in ("graph_chain_refused", "graph_append",
                                                             "graph_pick_fallback", "graph_pick_switching")]
    picks = [e for e in trace.events if e.get("event") == "graph_pick"]
    replayed = [la for la in trace.launches if la.graph is not None]
    per_node = Counter(la.graph for la in replayed)
    print(f"[chain every:100] {chains} refused/fallback={refused[:3]} picks={picks} per node={dict(per_node)}\n"
          f"{r.stderr[-1000:]}")
    x, y = np.load(tmp_path / "plain.npz"), np.load(tmp_path / "probed.npz")
    assert sorted(x.files) == sorted(y.files) and all(np.array_equal(x[k], y[k]) for k in x.files)
    assert len(chains) == 1 and not refused, (chains, refused)
    assert len(per_node) == 3 and set(per_node.values()) == {replays // 100}, per_node
    for node in per_node:
        assert [la.event["replay"] for la in replayed if la.graph == node] == list(range(0, replays, 100)), node
    (pick,) = picks
    assert pick["twin_launches"] == replays - replays // 100, pick
    sub = type(trace)(trace.path, trace.probe_text, trace.events, replayed)
    check_block_sched(sub, sm_count())
