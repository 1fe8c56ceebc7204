"""The chain (spec/runtime.md, "The chain") with the shim's native writer, against the C fake driver
(tests/fakecuda/fakecuda.c runs the graph_chain variant: its writes at the head's `cur`, then the advance).
shim/graphs.c polls the chain's heads during the run and hands each frame to shim/writer.c; the probed sinks'
last launches are published by the host at exit or when the graph's memory goes."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

import neutrino.trace as nt

from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures

NODES = 3  # GRAPH_APP_KERNELS: a chain of 3 probed kernel nodes in one graph (0 -> 1 -> 2)
SLOTS = 64  # each chain ring's slots (NEUTRINO_GRAPH_RING_SLOTS): far fewer than the replays


@pytest.fixture
def chain_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPH_APP_OUT", str(tmp_path / "app.out"))
    monkeypatch.setenv("GRAPH_APP_KERNELS", str(NODES))
    monkeypatch.setenv("NEUTRINO_GRAPH_CHAIN", "1")
    monkeypatch.setenv("NEUTRINO_GRAPH_RING_SLOTS", str(SLOTS))
    return monkeypatch


def _run(tmp_path, fakecuda, cycles: int, replays: int, *extra):
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4",
                                                   str(cycles), str(replays)], "--graphs", *extra)
    said = (tmp_path / "app.out").read_text().splitlines()
    assert rc == 0 and said[-1] == "app done", said
    return log, said, nt.load(tmp_path / "trace")


def _by_node(t) -> dict:
    out: dict = {}
    for la in t.launches:
        if la.graph is not None:
            out.setdefault(la.graph, []).append(la)
    return out


def _whole(la) -> bool:
    v = la.maps["block_sched"].valid()  # the fake's 8 warps: unit u, elapse 7
    return len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}


def _chain_events(t) -> tuple[list, list]:
    return ([e for e in t.events if e["event"] == "graph_chain"],
            [e for e in t.events if e["event"] == "graph_chain_refused"])


def test_every_replay_of_every_node_is_written_by_the_poller(tmp_path, fakecuda, shim, chain_env, capfd):
    """1,000 replays, rings of 64 slots: only a poller draining during the run writes them all (at exit a ring
    holds 64). Every node: 1,000 frames, launch numbers 0..999 in order, each frame whole; no append node."""
    chain_env.setenv("FAKECUDA_LAUNCH_DELAY_US", "300")  # (a replay's pace a poller every 100 us keeps up with)
    replays = 1000
    log, _, t = _run(tmp_path, fakecuda, 1, replays)
    err = capfd.readouterr().err
    assert log == ["saxpy4 probed=1 grid=4"] * (1 + NODES * replays)  # each node ran the variant every replay
    (ev,), refused = _chain_events(t)
    assert not refused and ev["ring_slots"] == SLOTS and len(ev["graph_nodes"]) == NODES
    assert not [e for e in t.events if e["event"] in ("graph_append", "fallback", "result_error")]
    nodes = _by_node(t)
    assert sorted(nodes) == [(1, n) for n in ev["graph_nodes"]]
    for node, las in nodes.items():
        assert [la.event["replay"] for la in las] == list(range(replays)), node
        assert all(_whole(la) for la in las), node
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["dropped"] == 0 and ex["launches"] == 1 + NODES * replays
    assert f"{NODES * replays} of {NODES * replays} replay result(s) written" in err


def test_no_poller_fills_the_ring_and_counts_the_rest_dropped(tmp_path, fakecuda, shim, chain_env, capfd):
    """No poller thread (NEUTRINO_GRAPH_POLL_US=0): each ring takes its 64 slots, drained at exit; every later
    launch writes nowhere and is counted dropped, per node. Nothing waits: the program ends."""
    chain_env.setenv("NEUTRINO_GRAPH_POLL_US", "0")
    replays = 1000
    log, _, t = _run(tmp_path, fakecuda, 1, replays)
    err = capfd.readouterr().err
    assert log == ["saxpy4 probed=1 grid=4"] * (1 + NODES * replays)
    nodes = _by_node(t)
    assert len(nodes) == NODES
    for node, las in nodes.items():
        assert [la.event["replay"] for la in las] == list(range(SLOTS)), node
        assert all(_whole(la) for la in las)
    drops = Counter()
    for e in t.events:
        if e["event"] == "dropped" and "graph_node" in e:
            drops[(e["graph"], e["graph_node"])] += e["launches"]
    assert drops == {node: replays - SLOTS for node in nodes}
    assert f"{NODES * SLOTS} of {NODES * replays} replay result(s) written" in err


def test_graphs_destroyed_and_made_again_keep_every_replay(tmp_path, fakecuda, shim, chain_env):
    """Three cycles of capture, 200 replays, destroy: each graph's chain is finished and let go before its memory
    goes (the sink node's last launch published by the host), its memory freed; every replay of every cycle's
    nodes written, whole."""
    chain_env.setenv("FAKECUDA_LAUNCH_DELAY_US", "300")
    cycles, replays = 3, 200
    _, said, t = _run(tmp_path, fakecuda, cycles, replays)
    # what the fake holds at the end: the eager launch's slot, the writer's staging and the pinned zeroes (kept for
    # the process: spec/runtime.md, "No driver memset") at most
    end = said[1].split()
    assert end[:3] == ["live", "at", "end"] and int(end[3]) <= 3 and end[4:] == ["graphs", "0"], said
    chains, refused = _chain_events(t)
    assert len(chains) == cycles and not refused
    nodes = _by_node(t)
    assert len(nodes) == cycles * NODES
    for node, las in nodes.items():
        assert [la.event["replay"] for la in las] == list(range(replays)), node
        assert all(_whole(la) for la in las)


def test_the_trace_budget_drops_frames_and_counts_them(tmp_path, fakecuda, shim, chain_env, capfd):
    """A trace budget that holds a few frames: the poller writes what it admits and counts the rest per node
    (trace-budget); written + dropped = replays for every node."""
    chain_env.setenv("FAKECUDA_LAUNCH_DELAY_US", "100")
    replays = 300
    _, _, t = _run(tmp_path, fakecuda, 1, replays, "--trace-budget", "64K")
    err = capfd.readouterr().err
    nodes = _by_node(t)
    written = sum(len(las) for las in nodes.values())
    dropped = Counter()
    for e in t.events:
        if e["event"] == "dropped" and "graph_node" in e:
            assert e["reason"] == "trace-budget"
            dropped[(e["graph"], e["graph_node"])] += e["launches"]
    assert 0 < written < NODES * replays
    for node in dropped:
        assert len(nodes.get(node, [])) + dropped[node] == replays
    assert written + sum(dropped.values()) == NODES * replays
    assert f"{written} of {NODES * replays} replay result(s) written" in err


def test_an_idle_chain_is_polled_seldom(tmp_path, fakecuda, shim, chain_env, capfd):
    """A chain with nothing new and no graph launched since its last pass costs the poller a pass only every
    min(64, K / 2)th poll (here 32): over 400 ms of the program idling (its graph alive) the copy-out makes far fewer driver calls than a
    pass (7 calls: context, capture mode, heads copy, wait) every 100 us poll would (about 28,000); the 60 replays
    made before (fewer than a ring's slots: none can find it full) are all written."""
    chain_env.setenv("GRAPH_APP_IDLE_MS", "400")
    chain_env.setenv("NEUTRINO_FAST_PROFILE", "1")
    replays = SLOTS - 4
    _, _, t = _run(tmp_path, fakecuda, 1, replays)
    err = capfd.readouterr().err
    assert {node: len(las) for node, las in _by_node(t).items()} == {(1, n): replays for n in (1, 2, 3)}, err
    line = next(ln for ln in err.splitlines() if "graph rings copied out with" in ln)
    calls = int(line.split("copied out with ")[1].split()[0])
    assert calls < 3000, line


def test_no_chain_pass_while_the_program_captures(tmp_path, fakecuda, shim, chain_env):
    """The poller passes over the chains while a capture of the program is open (a heads copy of ours inside it
    would slow every later replay: issue 24). Replay 25 of 50 is launched into a capture that stays open 5 ms
    (the fake's launch delay; the replays before left slots to drain): the shim counts no work of the poller's
    inside it, and every replay is written (the fake runs the launch into the capture too)."""
    chain_env.setenv("GRAPH_APP_CAPTURED_AT", "25")
    chain_env.setenv("FAKECUDA_LAUNCH_DELAY_US", "5000")
    replays = 50
    _, _, t = _run(tmp_path, fakecuda, 1, replays)
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["captures"] == 2 and ex["stream_work_in_capture"]["poller"] == 0, ex
    nodes = _by_node(t)
    assert len(nodes) == NODES and ex["dropped"] == 0
    for las in nodes.values():
        assert [la.event["replay"] for la in las] == list(range(replays))


def test_replays_queued_far_ahead_of_the_gpu_are_all_written(tmp_path, fakecuda, shim, chain_env, capfd):
    """A GPU behind its host (the fake's FAKECUDA_GPU_LAG_MS): the program launches its 1,000 replays at once, the
    first runs 150 ms later, then one about every 100 us. The poller's passes during the lag find nothing new and no
    graph launched since: the chain looked idle though 1,000 launches were still to run, and was passed over for
    64 polls (5 ms each here: 320 ms), while the GPU filled its 256-slot rings in ~30 ms and ran all 1,000 in ~100
    ms (issue 24: the chain dropped replays that the append node wrote). A chain is idle only when its heads say
    every launch of its executable graphs ran: the poller keeps passing every 5 ms and writes every replay."""
    chain_env.setenv("NEUTRINO_GRAPH_RING_SLOTS", "256")
    chain_env.setenv("FAKECUDA_GPU_LAG_MS", "150")
    chain_env.setenv("FAKECUDA_GPU_REPLAY_US", "50")
    chain_env.setenv("NEUTRINO_GRAPH_POLL_US", "5000")
    chain_env.setenv("NEUTRINO_FAST_PROFILE", "1")
    replays = 1000
    log, _, t = _run(tmp_path, fakecuda, 1, replays)
    err = capfd.readouterr().err
    line = next(ln for ln in err.splitlines() if "graph chains:" in ln)
    most = int(line.split("at most ")[1].split()[0])
    assert 0 < most < 256, line  # (the poller's passes during the run took what the rings held: none came full)
    nodes = _by_node(t)
    assert len(nodes) == NODES
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    for node, las in nodes.items():
        assert [la.event["replay"] for la in las] == list(range(replays)), (node, len(las), ex["dropped"])
        assert all(_whole(la) for la in las)
    assert ex["dropped"] == 0
    assert f"{NODES * replays} of {NODES * replays} replay result(s) written" in err
