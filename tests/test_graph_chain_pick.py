"""The chain (spec/runtime.md, "The chain", "Sampling") under `--launches` chosen on the host (shim/graphpick.c),
against the C fake driver through the shim: the replays left out run the twin (or, without one, the original
kernels); the probed graph's launches are the chain's, and the poller numbers the k-th one start + (k - 1) * every.
A plan given up leaves every launch to the chain: the host keeps the selected replays, none lost, none twice."""

from __future__ import annotations

import sys

import pytest

import neutrino.trace as nt
from neutrino.runtime.cudagraphs.chain import ReplayMap
from neutrino.runtime.start.options import LaunchFilter

from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures

NODES = 3  # a chain of 3 probed kernel nodes (0 -> 1 -> 2)


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPH_APP_OUT", str(tmp_path / "app.out"))
    monkeypatch.setenv("GRAPH_APP_KERNELS", str(NODES))
    monkeypatch.setenv("NEUTRINO_GRAPH_CHAIN", "1")
    monkeypatch.setenv("NEUTRINO_GRAPH_RING_SLOTS", "64")
    return monkeypatch


def _run(tmp_path, fakecuda, replays: int, launches: str):
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4",
                                                   "1", str(replays)], "--graphs", "--launches", launches)
    said = (tmp_path / "app.out").read_text().splitlines()
    assert rc == 0 and said[-1] == "app done", said
    return log[1:], said, nt.load(tmp_path / "trace")  # log[0]: the eager launch


def _replays_by_node(t) -> dict:
    out: dict = {}
    for la in t.launches:
        if la.graph is not None:
            v = la.maps["block_sched"].valid()  # the fake's 8 warps: unit u, elapse 7
            assert len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}
            out.setdefault(la.graph, []).append(la.event["replay"])
    return out


def _probed(log) -> list[bool]:
    """Per replay, whether its kernels ran probed (NODES lines a replay, all alike)."""
    flags = [line.split()[1] == "probed=1" for line in log if line.startswith("saxpy4 ")]
    per = [flags[i: i + NODES] for i in range(0, len(flags), NODES)]
    assert all(len(set(p)) == 1 for p in per), per
    return [p[0] for p in per]


def _events(t, name):
    return [e for e in t.events if e["event"] == name]


@pytest.mark.parametrize("launches, selected", [("every:3", range(0, 300, 3)), ("40:57", range(40, 57))])
def test_the_chain_writes_exactly_the_selected_replays(tmp_path, fakecuda, shim, env, launches, selected):
    """300 replays: the chain takes the capture; each node's frames are exactly the selected replays, numbered so;
    the replays left out launched the twin (unprobed); no append node, nothing dropped or filtered."""
    replays = 300
    log, said, t = _run(tmp_path, fakecuda, replays, launches)
    (ev,) = _events(t, "graph_chain")
    assert not _events(t, "graph_chain_refused") and not _events(t, "graph_pick_fallback")
    assert _probed(log) == [r in selected for r in range(replays)]
    nodes = _replays_by_node(t)
    assert sorted(nodes) == [(1, n) for n in ev["graph_nodes"]]
    for node, got in nodes.items():
        assert got == list(selected), node
    (pick,) = _events(t, "graph_pick")
    assert pick["launches"] == replays and pick["twin_launches"] == replays - len(selected)
    assert not [e for e in t.events if e["event"] in ("graph_append", "result_error", "graph_pick_switching")]
    (ex,) = _events(t, "exit")
    assert ex["dropped"] == 0


def test_without_a_twin_the_nodes_switch_and_the_head_stays(tmp_path, fakecuda, shim, env):
    """NEUTRINO_GRAPH_TWIN=0: the left-out replays switch the nodes to the original kernels and back; back is the
    chain's own parameters (its head), so the selected replays are written as with the twin."""
    env.setenv("NEUTRINO_GRAPH_TWIN", "0")
    replays, selected = 60, list(range(0, 60, 3))
    log, _, t = _run(tmp_path, fakecuda, replays, "every:3")
    assert _probed(log) == [r in selected for r in range(replays)]
    assert _events(t, "graph_chain") and not _events(t, "graph_pick_fallback")
    for node, got in _replays_by_node(t).items():
        assert got == selected, node


@pytest.mark.parametrize("knob, at", [("GRAPH_APP_CAPTURED_AT", 31), ("GRAPH_APP_UPDATE_AT", 31),
                                      ("FAKECUDA_REFUSE_SET_PARAMS", 0)])
def test_a_plan_given_up_loses_and_repeats_nothing(tmp_path, fakecuda, shim, env, knob, at):
    """The plan given up at replay 31 (a launch into a capture: every later replay runs the chain, the host keeps the
    selected ones; an update: planned again at once) or at replay 0 (the driver refuses the first switch). Either
    way each node's frames are the selected replays once."""
    env.setenv(knob, str(at or 1))
    env.setenv("FAKECUDA_LAUNCH_DELAY_US", "300")  # (every replay probed after the fallback: a pace the poller keeps)
    replays, selected = 90, list(range(0, 90, 3))
    log, _, t = _run(tmp_path, fakecuda, replays, "every:3")
    (fb,) = _events(t, "graph_pick_fallback")
    assert fb["replay"] == at and _events(t, "graph_chain")
    probed = _probed(log)
    assert probed[:at] == [r in selected for r in range(at)]
    if knob != "GRAPH_APP_UPDATE_AT":
        assert all(probed[at:])  # the probed graph takes every replay from there on
    nodes = _replays_by_node(t)
    assert len(nodes) == NODES
    for node, got in nodes.items():
        assert got == selected, node


def test_a_clone_runs_the_chain_every_replay_and_the_host_keeps_the_selected(tmp_path, fakecuda, shim, env):
    """An executable graph instantiated from a clone gets no plan: every replay runs the chain and the host keeps the
    selected ones (a `graph_pick_fallback` event says the host did not choose)."""
    env.setenv("GRAPH_APP_CLONE", "1")
    replays, selected = 60, list(range(0, 60, 3))
    log, _, t = _run(tmp_path, fakecuda, replays, "every:3")
    assert all(_probed(log))
    (fb,) = _events(t, "graph_pick_fallback")
    assert "clone" in fb["reason"] and _events(t, "graph_chain")
    for node, got in _replays_by_node(t).items():
        assert got == selected, node


def test_replay_map_known_answers():
    """The Python sink's map (shim/graphs.c chain_replay is the same arithmetic)."""
    m = ReplayMap()
    assert [m.replay(k) for k in (1, 2, 7)] == [0, 1, 6]  # no `--launches`: every launch a replay
    m.pick(LaunchFilter(start=5, stop=40, every=4))  # 5, 9, ..., 37
    assert [m.replay(k) for k in (1, 2, 3)] == [5, 9, 13]
    m.unpick(14)  # launches 1..3 were 5, 9, 13; then 14, 15, ... one a launch
    assert [m.replay(k) for k in (3, 4, 5, 7, 8)] == [13, None, None, 17, None]
    assert m.replay(31) is None and m.replay(27) == 37  # 41: selected by every:4 but past the stop
    m.unpick(20)  # only the first unpick counts
    assert m.replay(7) == 17
    m2 = ReplayMap()
    m2.pick(LaunchFilter(start=5, stop=40, every=4))
    m2.unpick(3)  # before the range: no launch was picked
    assert m2.picked_upto == 0 and m2.replay(1) is None and m2.replay(3) == 5
