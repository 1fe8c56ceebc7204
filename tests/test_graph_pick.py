"""Graph replays chosen on the host (shim/graphpick.c, neutrino/runtime/cudagraphs/replay_select.py),
against the fake libcuda through the shim: a replay `--launches` leaves out runs the program's own
kernel and no append node; the selected ones are written with their replay numbers; the switches
cost driver calls only when the choice changes; what the host cannot choose (a clone, an update, a
launch into a capture, a driver that refuses the switch) falls back to the device gate, exactly."""

from __future__ import annotations

import os
import sys

import pytest

import neutrino.trace as nt
from neutrino.runtime.cudagraphs.ring import LAUNCH_ORDER_EDGE

from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures

REPLAYS = 10
EVERY = 3
SELECTED = [r for r in range(REPLAYS) if r % EVERY == 0]


SWITCHING = {"NEUTRINO_GRAPH_TWIN": "0"}  # no twin: the replays left out switch the program's graph's nodes


@pytest.fixture(autouse=True)
def _append_path(monkeypatch):
    """This module tests the append node: the chain (the default; tests/test_runtime_graph_chain.py and
    tests/test_graph_chain_*.py) is turned off."""
    monkeypatch.setenv("NEUTRINO_GRAPH_CHAIN", "0")


def run_app(tmp_path, fakecuda, monkeypatch, launches=f"every:{EVERY}", replays=REPLAYS, **env):
    out = tmp_path / "app.out"
    monkeypatch.setenv("GRAPH_APP_OUT", str(out))
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4",
                                                   "1", str(replays)], "--graphs", "--launches", launches)
    said = out.read_text().splitlines()
    assert rc == 0 and said[-1] == "app done", said
    calls = int(said[-2].split()[-1])
    t = nt.load(tmp_path / "trace")
    return log[1:], calls, t, said  # log[0]: the eager launch


def written(t, node=(1, 1)):
    """Replay numbers of the node's results, each checked whole."""
    got = []
    for la in t.launches:
        if la.graph == node:
            v = la.maps["block_sched"].valid()
            assert len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}
            got.append(la.event["replay"])
    return got


def probed(log, kernels=1):
    """Per replay, whether its kernels ran probed (the fake driver's log, `kernels` lines a replay)."""
    flags = [line.split()[1] == "probed=1" for line in log if line.startswith("saxpy4 ")]
    per = [flags[i: i + kernels] for i in range(0, len(flags), kernels)]
    assert all(len(set(p)) == 1 for p in per), per
    return [p[0] for p in per]


def events(t, name):
    return [e for e in t.events if e["event"] == name]


@pytest.mark.parametrize("kernels", [1, 2])
def test_every_n_runs_the_original_on_replays_left_out(tmp_path, fakecuda, shim, monkeypatch, capfd, kernels):
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_KERNELS=kernels, **SWITCHING)
    assert probed(log, kernels) == [r in SELECTED for r in range(REPLAYS)]
    for node in range(1, kernels + 1):
        assert written(t, (1, node)) == SELECTED
    # switches: to probed at 0, 3, 6, 9 and back at 1, 4, 7; each is one call per kernel node, plus the
    # append node: enabled (3, 6, 9) or disabled (1, 4, 7) and its arguments on each selected replay (skip
    # grows by the replays left out)
    (pick,) = events(t, "graph_pick")
    switches = 2 * len(SELECTED) - 1
    assert pick["switches"] == switches and pick["launches"] == REPLAYS
    expected = switches * kernels + (len(SELECTED) + (switches - 1)) * append_nodes(kernels)
    assert pick["driver_calls"] == calls == expected
    assert not events(t, "graph_pick_fallback") and not events(t, "result_error")
    (ex,) = events(t, "exit")
    assert ex["dropped"] == 0
    err = capfd.readouterr().err
    assert f"{len(SELECTED) * kernels} of {REPLAYS * kernels} replay result(s) written" in err


def test_a_range_switches_once_each_way(tmp_path, fakecuda, shim, monkeypatch):
    """`--launches 2:6`: probed from replay 2 to 5 with one switch in, one out; the skip stays 2."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, launches="2:6", **SWITCHING)
    assert probed(log) == [2 <= r < 6 for r in range(REPLAYS)]
    assert written(t) == [2, 3, 4, 5]
    (pick,) = events(t, "graph_pick")
    # replay 0: to the original, append off (2); 2: to probed, arguments, append on (3); 6: back (2)
    assert pick["switches"] == 3 and calls == pick["driver_calls"] == 7


def test_a_clone_keeps_the_device_gate(tmp_path, fakecuda, shim, monkeypatch):
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_CLONE=1)
    assert probed(log) == [True] * REPLAYS  # gated on the device: the probed kernel runs every replay
    assert written(t) == SELECTED and calls == 0
    (fb,) = events(t, "graph_pick_fallback")
    assert "clone" in fb["reason"] and fb["replay"] is None


def test_exec_update_gives_the_plan_up_then_plans_again(tmp_path, fakecuda, shim, monkeypatch):
    """cuGraphExecUpdate at replay 5: the nodes restored before it, the gates set for replay 5; updated
    from the captured graph, the host picks again and the numbering goes on."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_UPDATE_AT=5)
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)]
    assert written(t) == SELECTED
    (fb,) = events(t, "graph_pick_fallback")
    assert "cuGraphExecUpdate" in fb["reason"] and fb["replay"] == 5


def test_a_launch_into_a_capture_falls_back_to_the_device_gate(tmp_path, fakecuda, shim, monkeypatch):
    """Replay 4 launched into a capturing stream (a child graph node): the plan is given up; the device
    gate numbers the later replays right (skip = the replays left out before)."""
    log, _, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_CAPTURED_AT=4)
    assert probed(log) == [r in SELECTED for r in range(4)] + [True] * (REPLAYS - 4)
    assert written(t) == SELECTED
    (fb,) = events(t, "graph_pick_fallback")
    assert "capturing stream" in fb["reason"] and fb["replay"] == 4


def test_a_refused_switch_falls_back_and_nothing_is_lost(tmp_path, fakecuda, shim, monkeypatch):
    """The driver refuses cuGraphExecKernelNodeSetParams: the first switch fails, the plan is given up
    before the launch, and the device gate writes the selected replays as before."""
    log, _, t, said = run_app(tmp_path, fakecuda, monkeypatch, FAKECUDA_REFUSE_SET_PARAMS=1)
    assert probed(log) == [True] * REPLAYS
    assert written(t) == SELECTED
    (fb,) = events(t, "graph_pick_fallback")
    assert "failed" in fb["reason"] and fb["replay"] == 0


def test_every_replay_selected_makes_no_plan(tmp_path, fakecuda, shim, monkeypatch):
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, launches="0:")
    assert probed(log) == [True] * REPLAYS and written(t) == list(range(REPLAYS))
    assert calls == 0 and not events(t, "graph_pick")


def test_a_graph_destroyed_after_instantiation_lives_while_its_plan_does(tmp_path, fakecuda, shim, monkeypatch):
    """PyTorch destroys the captured graph right after instantiating it: the node handles the plan
    switches belong to it, so the shim destroys it for real when the executable graph goes."""
    log, _, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_GRAPH_FIRST=1)
    # the executable graph, the captured graph kept for the plan, the twin and the clone it was made from
    assert "graphs after destroy 4" in said
    end = [line for line in said if line.startswith("live at end")][0].split()
    assert end[-2:] == ["graphs", "0"]
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED


def test_a_context_teardown_forgets_every_plan(tmp_path, fakecuda, shim, monkeypatch):
    """The context goes before replay 5: no plan switches nodes any more (an executable graph's handle
    may come back for another graph); the executable graph runs as it was last left (replay 4: the
    program's own kernel)."""
    log, calls, t, _ = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_RELEASE_AT=5, **SWITCHING)
    assert probed(log) == [r in SELECTED for r in range(5)] + [False] * (REPLAYS - 5)
    assert calls == 9  # replay 0: 2 calls, 1: 2, 3: 3, 4: 2; none after the teardown
    assert written(t) == [0, 3]


def test_a_child_forked_during_a_switch_does_not_hang(tmp_path, fakecuda, shim, monkeypatch):
    """The program forks while the shim switches nodes (its lock held, as another thread of the program
    can): the child's next graph call must not wait forever for a lock no thread of it holds."""
    log, _, t, said = run_app(tmp_path, fakecuda, monkeypatch, FAKECUDA_FORK_IN_SWITCH=1)
    assert "fork child 0" in said, said  # -1: the child hung on the shim's lock
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED


@pytest.mark.parametrize("twin", ["graph", "clone"])
def test_two_executable_graphs_of_one_capture_number_their_replays_together(tmp_path, fakecuda, shim, monkeypatch,
                                                                             twin):
    """Two executable graphs of one capture share its nodes' device state: their replays are numbered
    together (launch k of the two, alternating). One on the device gate (instantiated from a clone; or
    given up, here by a launch into a capture) leaves the other's plan nothing to count by: both are
    on the device gate, numbered the same way."""
    captured = {"GRAPH_APP_CAPTURED_AT": 4} if twin == "graph" else {}
    log, _, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_TWIN=twin, **captured)
    launches = 2 * REPLAYS - (1 if captured else 0)  # the replay launched into a capture is a child graph's
    assert written(t) == [k for k in range(launches) if k % EVERY == 0]


def test_the_programs_generic_node_params_hold_in_every_replay(tmp_path, fakecuda, shim, monkeypatch):
    """cuGraphNodeSetParams (the generic form) on the probed node before instantiation, the program's
    kernel on 2 blocks: every replay runs it so; no plan switches the node back to the capture's."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_SET_NODE_GRID=2)
    assert [line for line in log if line.startswith("saxpy4 ")] == ["saxpy4 probed=0 grid=2"] * REPLAYS
    assert calls == 0 and written(t) == []


def test_no_plan_again_after_replays_on_the_device_gate(tmp_path, fakecuda, shim, monkeypatch):
    """The plan given up at replay 4 (a launch into a capture), the device gate numbers replays 4 and 5,
    which the host never sees; cuGraphExecUpdate before replay 6 must not plan again from the host's
    stale count (it chose replay 8 as its 6th and left 6 and 9 out)."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_CAPTURED_AT=4, GRAPH_APP_UPDATE_AT=6)
    assert written(t) == SELECTED
    assert probed(log) == [r in SELECTED for r in range(4)] + [True] * (REPLAYS - 4)


# ------------------------------------------------------------ the twin: the program's graph for the replays left out


def append_nodes(kernels: int) -> int:
    """The append nodes the plan switches: none where the chain (NEUTRINO_GRAPH_CHAIN=1) took the capture (2+ nodes)."""
    return 0 if os.environ.get("NEUTRINO_GRAPH_CHAIN") == "1" and kernels >= 2 else 1


def exec_launches(said):
    """Per cycle: (launches of the program's executable graph, launches of every graph)."""
    return [tuple(map(int, line.split()[-2:])) for line in said if line.startswith("exec launches")]


@pytest.mark.parametrize("kernels", [1, 2])
def test_the_replays_left_out_launch_the_twin(tmp_path, fakecuda, shim, monkeypatch, kernels):
    """Left-out replays launch the twin (the program's graph as it made it), selected ones the program's
    executable graph, probed: one switch in all (at the first selected replay), then only the append
    node's arguments on each selected replay."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_KERNELS=kernels)
    assert probed(log, kernels) == [r in SELECTED for r in range(REPLAYS)]
    for node in range(1, kernels + 1):
        assert written(t, (1, node)) == SELECTED
    assert exec_launches(said) == [(len(SELECTED), REPLAYS)]
    (pick,) = events(t, "graph_pick")
    assert pick["twin_launches"] == REPLAYS - len(SELECTED) and pick["launches"] == REPLAYS
    assert pick["switches"] == 1 and pick["twin_waits"] == 0  # one stream: CUDA orders the launches
    assert pick["driver_calls"] == calls == kernels + len(SELECTED) * append_nodes(kernels)
    assert not events(t, "graph_pick_switching") and not events(t, "graph_pick_fallback")
    (ex,) = events(t, "exit")
    assert ex["dropped"] == 0


def test_ten_thousand_replays_every_100_write_100_results(tmp_path, fakecuda, shim, monkeypatch):
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, launches="every:100", replays=10_000,
                                  GRAPH_APP_KERNELS=2)
    for node in (1, 2):
        assert written(t, (1, node)) == list(range(0, 10_000, 100))
    assert exec_launches(said) == [(100, 10_000)]
    (pick,) = events(t, "graph_pick")
    assert pick["twin_launches"] == 9_900 and pick["switches"] == 1


@pytest.mark.skipif(not LAUNCH_ORDER_EDGE, reason="launch-order edge off")
@pytest.mark.parametrize("driver", ["edges", "no-edges", "no-add-node"])
def test_the_append_node_of_a_chain_starts_with_its_last_probed_kernel(tmp_path, fakecuda_calls, shim, monkeypatch,
                                                                       driver):
    """Two probed kernels in a chain: the append node is added after both, the edge from the second a
    launch-order edge (sm_90: it may start while that kernel runs; the driver's edges say the first
    has completed before the second starts); ordinary edges when the driver refuses that one or the
    edges cannot be read. Every selected replay of both nodes is written whole, on the device gate."""
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("FAKECUDA_LOG_CALLS", str(calls))
    monkeypatch.setenv("NEUTRINO_PTXAS", str(FAKE / "fake_ptxas.py"))
    env = {"edges": {}, "no-edges": {"FAKECUDA_NO_EDGES": "1"}, "no-add-node": {"FAKECUDA_NO_ADD_NODE": "1"}}[driver]
    _, _, t, _ = run_app(tmp_path, fakecuda_calls, monkeypatch, GRAPH_APP_KERNELS=2, NEUTRINO_GRAPH_PICK="0", **env)
    lines = [line.split(" ", 1) for line in calls.read_text().splitlines() if not line.startswith("==")]
    added = [(rest, [r for th, r in lines[i + 1:i + 4] if th == thread and r.startswith("  = ")])
             for i, (thread, rest) in enumerate(lines) if rest in ("cuGraphAddKernelNode_v2", "cuGraphAddNode_v2")]
    if driver == "edges":
        assert [(call, said[0], said[1].split()[:4]) for call, said in added] == [
            ("cuGraphAddNode_v2", "  = edges (port/type) 0/0 2/1", ["=", "__neutrino_graph_append", "deps", "2"])], added
    else:  # (a refused cuGraphAddNode_v2 says nothing)
        assert [(call, said[0].split()[:4]) for call, said in added if call == "cuGraphAddKernelNode_v2"] == [
            ("cuGraphAddKernelNode_v2", ["=", "__neutrino_graph_append", "deps", "2"])], added
    for node in (1, 2):
        assert written(t, (1, node)) == SELECTED


@pytest.mark.skipif(not LAUNCH_ORDER_EDGE, reason="launch-order edge off")
@pytest.mark.parametrize("clone", [False, True], ids=["captured", "clone"])
def test_a_device_launch_graph_refused_with_the_launch_order_edge_gets_an_ordinary_one(tmp_path, fakecuda, shim,
                                                                                          monkeypatch, clone):
    """A driver that will not instantiate a graph with a programmatic edge for device launch: the shim
    reports it, the runtime makes the append node's edge ordinary (in a clone: the clone's nodes) and the
    instantiation is tried again: the program's graph is made, every selected replay written (on the
    device gate), one event."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_FLAGS="4",
                                  FAKECUDA_REFUSE_PROGRAMMATIC_DEVICE_LAUNCH="1", **({"GRAPH_APP_CLONE": "1"} if clone else {}))
    assert written(t) == SELECTED
    (ev,) = events(t, "graph_edge_ordinary")
    assert ev["flags"] == 4 and "refused" in ev["reason"] and ev["clone"] is clone


def test_the_programs_changes_reach_the_twin(tmp_path, fakecuda, shim, monkeypatch):
    """The program's own node (not probed) put on 2 blocks before replay 4 and disabled before replay 8,
    on its executable graph: every replay from then on runs it so, the twin's and the probed ones."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_EXTRA=1, GRAPH_APP_EXTRA_GRID_AT=4,
                                  GRAPH_APP_EXTRA_OFF_AT=8)
    runs = [line.split()[1:] for line in log if line.startswith("saxpy4 ")]
    # per replay: the captured node (probed=1 on selected replays), then the extra node (grid 4, 2, or absent)
    expected = []
    for r in range(REPLAYS):
        expected.append(["probed=1" if r in SELECTED else "probed=0", "grid=4"])
        if r < 8:
            expected.append(["probed=0", "grid=2" if r >= 4 else "grid=4"])
    assert runs == expected
    assert written(t) == SELECTED and exec_launches(said) == [(len(SELECTED), REPLAYS)]
    assert not events(t, "graph_pick_switching") and not events(t, "graph_pick_fallback")


def test_a_change_the_twin_cannot_take_leaves_the_plan_switching(tmp_path, fakecuda, shim, monkeypatch):
    """The driver refuses the change on the twin: the twin goes (one event), the program's graph takes every
    replay from then on, switching its nodes; the change holds and no result is lost."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_EXTRA=1, GRAPH_APP_EXTRA_GRID_AT=4,
                                  FAKECUDA_REFUSE_CLONE_EXEC_SET=1)
    runs = [line.split()[1:] for line in log if line.startswith("saxpy4 ")]
    assert runs[0::2] == [["probed=1" if r in SELECTED else "probed=0", "grid=4"] for r in range(REPLAYS)]
    assert [g for _, g in runs[1::2]] == ["grid=4"] * 4 + ["grid=2"] * (REPLAYS - 4)
    assert written(t) == SELECTED
    (sw,) = events(t, "graph_pick_switching")
    assert "could not follow" in sw["reason"]
    assert not events(t, "graph_pick_fallback")
    # replays 0-3 on the two graphs (0 and 3 selected); from 4 on the program's graph takes all
    assert exec_launches(said) == [(2 + REPLAYS - 4, REPLAYS)]


def test_a_graph_that_cannot_be_cloned_switches_nodes(tmp_path, fakecuda, shim, monkeypatch):
    """A memory alloc node (CUDA clones no such graph): no twin, one event, the nodes switched as before."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_ALLOC=1)
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)]
    assert written(t) == SELECTED and exec_launches(said) == [(REPLAYS, REPLAYS)]
    (sw,) = events(t, "graph_pick_switching")
    assert "cannot be cloned" in sw["reason"]
    (pick,) = events(t, "graph_pick")
    assert pick["twin_launches"] == 0 and pick["switches"] == 2 * len(SELECTED) - 1


def test_launches_on_two_streams_stay_in_order(tmp_path, fakecuda, shim, monkeypatch):
    """Odd replays on a second stream: each launch of one graph after the other's on the other stream waits
    for it (an event of ours), as CUDA orders the launches of one executable graph."""
    monkeypatch.setenv("FAKECUDA_LOG_WAITS", "1")
    monkeypatch.setenv("FAKECUDA_CHECK_ORDER", "1")
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_STREAMS=2)
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    assert order_seen(said) == (REPLAYS - 1, 0)
    # the graph changes at replays 1, 3, 4, 6, 7, 9, each time onto the other stream
    (pick,) = events(t, "graph_pick")
    assert pick["twin_waits"] == 6
    assert len([line for line in log if line.startswith("wait stream=")]) == 6


def test_a_twin_launch_is_fenced_before_its_stream_goes(tmp_path, fakecuda, shim, monkeypatch):
    """Replay 7 (left out) runs the twin on the second stream, and replay 8 is predicted to run it too, so
    no event is recorded after it; the program then destroys that stream: the shim records the event
    there first (recording on it later would touch a destroyed stream). The next launches, on the
    first stream, need no wait."""
    monkeypatch.setenv("FAKECUDA_LOG_WAITS", "1")
    monkeypatch.setenv("FAKECUDA_LOG_STREAM_OPS", "1")
    monkeypatch.setenv("FAKECUDA_CHECK_ORDER", "1")
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_STREAMS=2, GRAPH_APP_DESTROY_SECOND_AT=8)
    assert order_seen(said) == (REPLAYS - 1, 0)
    eager = next(i for i, line in enumerate(log) if line.startswith("saxpy4 "))  # log[0] was an event record
    assert probed(log[eager + 1:]) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    ops = [line.split() for line in log if line.split()[0] in ("record", "destroy", "wait")]
    (gone,) = [i for i, op in enumerate(ops) if op[0] == "destroy"]
    second = ops[gone][1]
    assert ops[gone - 1][:2] == ["record", second]  # fenced right before the destroy
    assert all(op[1] != second for op in ops[gone + 1:])  # nothing touches it afterwards
    # waits: replays 1 (second stream, twin after probed), 3 (probed on the second after the twin on the
    # first), 4, 6 and 7; none after the destroy (8 and 9 on the first stream, after 7 ... fenced)
    (pick,) = events(t, "graph_pick")
    assert pick["twin_waits"] == 5


@pytest.mark.parametrize("flags, twin", [("0x1", True), ("0x9", True), ("0x10", False)],
                         ids=["auto-free", "auto-free+priority", "unknown"])
def test_the_twin_takes_the_programs_instantiation_flags(tmp_path, fakecuda, shim, monkeypatch, flags, twin):
    """PyTorch instantiates with auto-free on launch: the twin too; a flag a second executable graph may not
    take (here one CUDA has not defined) leaves the nodes switching, with the event."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_FLAGS=flags)
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    assert exec_launches(said) == [(len(SELECTED) if twin else REPLAYS, REPLAYS)]
    switching = events(t, "graph_pick_switching")
    assert (not switching) if twin else "instantiation flags" in switching[0]["reason"]


def test_no_twin_when_asked_not_to(tmp_path, fakecuda, shim, monkeypatch):
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, **SWITCHING)
    assert exec_launches(said) == [(REPLAYS, REPLAYS)] and not events(t, "graph_pick_switching")


def test_a_kernel_that_writes_module_globals_keeps_the_device_gate():
    """The capture copies a written module global back into the program's module after the probed node;
    on a replay running the program's kernel (switched, or the twin) that copy would undo the kernel's
    writes: no plan, the device gate chooses (one event); without such a global the plan is made."""
    import threading
    from types import SimpleNamespace

    from neutrino.runtime.cudagraphs.capture import WRITES_GLOBALS, GraphGroup, GraphProbes

    class Picker:
        def __init__(self):
            self.plans = []

        def new_group(self):
            return 1

        def plan(self, exe, graph, ctx, group, kernels, appends, flags=0, twin=None):
            self.plans.append((exe, twin))
            return True, ""

        def drop(self, exe):
            return (0, 1)

    class Trace:
        def __init__(self):
            self.events = []

        def event(self, name, **fields):
            self.events.append((name, fields))

    for writes in (False, True):
        probes = GraphProbes.__new__(GraphProbes)
        probes.picker, probes.trace, probes._lock = Picker(), Trace(), threading.RLock()
        group = GraphGroup(1, ctx=7, capture_id=1, graph=0x100)
        group.nodes = [SimpleNamespace(active=True, appended=True, pick_args=0x10, writes_globals=writes, node=0x200,
                                       probed_func=1, chain_func=0, func=2, grid=(1, 1, 1), block=(32, 1, 1),
                                       shared_bytes=0)]
        group.execs = {0x300}
        probes._plan_replays(group, 0x100, 0x300, 0)
        if writes:
            assert group.planned == set() and probes.picker.plans == []
            (ev,) = probes.trace.events
            assert ev[0] == "graph_pick_fallback" and ev[1]["reason"] == WRITES_GLOBALS
        else:
            assert group.planned == {0x300} and probes.picker.plans == [(0x300, None)] and not probes.trace.events


def test_every_reason_for_no_twin_has_its_own_message():
    """The shim's TWIN_* codes (why a plan has no twin) and NT_PICK_TWIN_LOST (the twin went) are two
    numberings that share 6: a plan whose fence event could not be made must not be reported as a
    change the twin could not follow."""
    import re
    from pathlib import Path

    from neutrino.runtime.cudagraphs import replay_select

    source = (Path(__file__).resolve().parents[1] / "shim" / "graphpick.c").read_text()
    names = re.search(r"enum \{ (TWIN_ON, [^}]*) \};", source).group(1).replace(" ", "").split(",")
    code = {name: i for i, name in enumerate(names)}
    assert "event" in replay_select.TWIN_REASONS[code["TWIN_EVENT"]]
    assert "could not follow" in replay_select.TWIN_LOST_REASON
    reasons = [replay_select.TWIN_REASONS[code[n]] for n in names if n not in ("TWIN_ON", "TWIN_NOT_ASKED")]
    assert len(set(reasons)) == len(reasons) and replay_select.TWIN_LOST_REASON not in reasons


def test_a_stream_made_again_at_a_destroyed_ones_handle_is_another_stream(tmp_path, fakecuda, shim, monkeypatch):
    """Replay 5 (left out) runs the twin on the second stream; the program destroys that stream and makes
    another, which gets the same handle; replay 6 (selected) runs the program's graph there (and every
replay after it: no wait for 7-9, one stream). CUDA orders
    it after replay 5 (launches of one executable graph are ordered), so it must wait for the twin's
    launch: the new stream is not the one the twin ran on, whatever its handle."""
    monkeypatch.setenv("FAKECUDA_LOG_WAITS", "1")
    monkeypatch.setenv("FAKECUDA_CHECK_ORDER", "1")
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_STREAMS=2, GRAPH_APP_DESTROY_SECOND_AT=6,
                                  GRAPH_APP_REMAKE_SECOND=1)
    assert order_seen(said) == (REPLAYS - 1, 0)
    (remade,) = [line.split() for line in said if line.startswith("second stream remade")]
    assert remade[3] == "same"  # the case under test: the fake driver gave the handle back
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    # waits: replays 1 (twin, second, after probed on the first), 3 (probed on the second), 4 (twin on the
    # first), 6 (probed on the new second stream after the twin on the destroyed one)
    (pick,) = events(t, "graph_pick")
    assert pick["twin_waits"] == 4
    waits = [line.split()[1] for line in log if line.startswith("wait stream=")]
    assert len(waits) == 4 and waits[-1] == f"stream={remade[4]}"


def test_a_twin_the_driver_will_not_launch_leaves_the_plan_switching(tmp_path, fakecuda, shim, monkeypatch):
    """The driver refuses to launch the twin (a second executable graph may need memory the program's
    does not): the program never sees the error; that replay and every later one run the program's
    graph, its nodes switched (one event), and no result is lost."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, FAKECUDA_REFUSE_CLONE_LAUNCH=1)
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    assert exec_launches(said) == [(REPLAYS, REPLAYS)]
    (sw,) = events(t, "graph_pick_switching")
    assert "could not" in sw["reason"]
    assert not events(t, "graph_pick_fallback")
    (pick,) = events(t, "graph_pick")
    assert pick["twin_launches"] == 0 and pick["launches"] == REPLAYS


def test_the_host_waits_for_the_twin_without_the_gil(tmp_path, fakecuda, shim, monkeypatch):
    """Replay 3 launched into a capture gives the plan up right after the twin ran replay 2: the host waits
    for that launch (here 400 ms: the fake's events complete late). Python's other threads run meanwhile:
    the wait holding the GIL would hang a program whose graph calls Python (a host function needs the GIL
    to finish, and the wait needs it finished)."""
    monkeypatch.setenv("FAKECUDA_EVENT_DELAY_MS", "400")
    log, _, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_CAPTURED_AT=3, GRAPH_APP_TICKER=1)
    (ticks,) = [int(line.split()[-1]) for line in said if line.startswith("ticks during")]
    assert ticks >= 20, ticks  # ~400 with the GIL free, 0-2 held
    (fb,) = events(t, "graph_pick_fallback")
    assert "capturing stream" in fb["reason"] and fb["replay"] == 3


def test_a_twin_chosen_stays_alive_until_its_launch_returns(tmp_path, fakecuda, shim, monkeypatch):
    """Replay 1 (left out) chose the twin; before the driver reads it, another thread of the program updates the
    executable graph, which gives the group's plans up (the twin let go) and plans again. The plan's order
    lock holds the update back until that launch has returned: the launch runs the twin it chose (no launch
    of a destroyed graph), and that twin is destroyed only after it; the plan given up counts that launch as
    made, so the device gate and the new plan go on at replay 2, and every selected replay is written."""
    monkeypatch.setenv("FAKECUDA_CHECK_DESTROYED", "1")
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_DROP_IN_TWIN=1)
    assert "dead launches 0" in said, said
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    (fb,) = events(t, "graph_pick_fallback")
    assert "cuGraphExecUpdate" in fb["reason"] and fb["replay"] == 2
    assert not events(t, "graph_pick_switching")
    end = [line for line in said if line.startswith("live at end")][0].split()
    assert end[-2:] == ["graphs", "0"]  # both twins destroyed, the first one after its launch


def test_the_wait_for_a_twin_without_its_fence_syncs_its_context_without_the_lock(tmp_path, fakecuda, shim,
                                                                                 monkeypatch):
    """Replay 1 ran the twin on the second stream; the program destroys that stream with device 1's context
    current, and the fence cannot be recorded there: the host waits for the twin's launch by synchronising
    the twin's context (device 0's), not the thread's, and without the shim's lock (other threads launch
    meanwhile)."""
    for key, value in {"FAKECUDA_LOG_SYNCS": "1", "FAKECUDA_LOG_STREAM_OPS": "1", "FAKECUDA_CC": "90,90"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FAKECUDA_CHECK_ORDER", "1")
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_STREAMS=2, GRAPH_APP_DESTROY_SECOND_AT=2,
                                  GRAPH_APP_REFUSE_SECOND_RECORDS=1, GRAPH_APP_DESTROY_IN_OTHER_CTX=1)
    assert order_seen(said)[1] == 0
    ops = [line for line in log if line.split()[0] in ("destroy", "ctx-sync")]
    (gone,) = [i for i, line in enumerate(ops) if line.startswith("destroy")]
    assert ops[gone - 1] == "ctx-sync ctx=0xc0 lock=free", ops
    eager = next(i for i, line in enumerate(log) if line.startswith("saxpy4 "))
    assert probed(log[eager + 1:]) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED


def test_a_release_that_leaves_the_context_alive_keeps_the_plans(tmp_path, fakecuda, shim, monkeypatch):
    """The primary context retained twice (cudart's and a library's), released once before replay 5: it lives
    on, and so do the plans and the twin (the later replays left out still run the twin, the selected ones
    are written) and the rings. At the end every graph is destroyed, the twin included (no leak)."""
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, GRAPH_APP_RETAIN=2, GRAPH_APP_RELEASE_AT=5)
    assert probed(log) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    assert exec_launches(said) == [(len(SELECTED), REPLAYS)]
    end = [line for line in said if line.startswith("live at end")][0].split()
    assert end[-2:] == ["graphs", "0"]
    (pick,) = events(t, "graph_pick")
    assert pick["twin_launches"] == REPLAYS - len(SELECTED)


def test_a_left_out_replay_on_one_stream_puts_nothing_but_the_twin_on_it(tmp_path, fakecuda, shim, monkeypatch):
    """On one stream, the replays (left out or selected) put nothing of ours on the program's stream: no event
    record (a fence is recorded only when the other graph's next launch goes to another stream), no wait;
    the only driver call a left-out replay makes is the twin's cuGraphLaunch, and a selected one adds its
    append node's arguments (host side)."""
    monkeypatch.setenv("FAKECUDA_LOG_WAITS", "1")
    monkeypatch.setenv("FAKECUDA_LOG_STREAM_OPS", "1")
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch)
    kernels = [i for i, line in enumerate(log) if line.startswith("saxpy4 ")]
    replays = log[kernels[1]:]  # (kernels[0]: the eager launch, its events recorded around it)
    assert probed(replays) == [r in SELECTED for r in range(REPLAYS)] and written(t) == SELECTED
    assert [line for line in replays if line.split()[0] in ("record", "wait")] == []
    assert exec_launches(said) == [(len(SELECTED), REPLAYS)]
    (pick,) = events(t, "graph_pick")
    assert pick["driver_calls"] == calls == 1 + len(SELECTED) and pick["twin_waits"] == 0


def test_the_residual_table_states_each_ratio_against_its_reference():
    """benchmarks/graph_residual.py --isolate: A / B within a process, A and B against the reference (plain)
    process's, a variant replaying B alone against the plain process replaying B alone, from synthetic runs
    with known answers (no GPU)."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import graph_residual

    def run(a, b, a_hash="ha"):
        return {"A": {"us": a, "mean_us": a + 1, "hash": a_hash}, "B": {"us": b, "mean_us": b, "hash": "hb"},
                "_wall_s": 11.6, "_pick": {"twin_launches": 294, "switches": 1}}

    b_only = {"B": {"us": 10.0, "mean_us": 10.0, "hash": "hb"}, "_wall_s": 9.0}
    runs = {"plain": run(12.5, 12.5) | {"_pick": {}}, "every:50 twin": run(15.0, 13.75),
            "every:50 twin, no poller thread": run(12.5, 12.5, a_hash="other"),
            "plain, B only replayed": b_only, "every:50 twin, B only replayed": b_only | {"B": {**b_only["B"], "us": 11.0}}}
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in
            graph_residual.isolate_table(runs).splitlines()[2:]}
    twin = rows["every:50 twin"]
    assert twin[1:8] == ["15.00", "1.091", "1.200", "1.100", "13.75", "16.00", "yes"] and twin[8] == "294 / 1"
    assert rows["every:50 twin, no poller thread"][7] == "NO"  # an output differs from plain's
    assert rows["every:50 twin, B only replayed"][1:8] == ["—", "—", "—", "1.100", "11.00", "—", "yes"]
    assert "error" in rows["every:50 twin, 2-slot rings"][1]  # a variant that did not run says so


@pytest.fixture(scope="module")
def fakecuda_calls(tmp_path_factory):
    """The fake libcuda built to log every driver call (FAKECUDA_LOG_CALLS: -finstrument-functions)."""
    import shutil
    import subprocess

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("fakecuda_calls")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-finstrument-functions", "-o", str(d / "libcuda.so.1"),
                    str(FAKE / "fakecuda.c"), "-ldl"], check=True)
    return d


def graph_b_calls(calls_log):
    """The driver calls made on the program's thread for graph B (graph_app.py, GRAPH_APP_PLAIN): from its
    capture to its instantiation, and within each of its replays; addresses replaced by their order of
    appearance (the two processes' handles differ)."""
    import re

    lines = calls_log.read_text().splitlines()
    begin = lines.index("== B capture")
    thread = lines[begin + 1].split()[0]  # the program's thread makes the first call after the mark
    windows, inside, names = [], False, {}
    for line in lines[begin:]:
        if line.startswith("== "):
            what = line[3:]
            if what == "B instantiate" and inside:  # the capture's window goes on to the instantiation
                windows[-1].append(line)
                continue
            inside = what == "B capture" or what.startswith("B replay ")
            if inside:
                windows.append([what])
            continue
        if inside and line.split()[0] == thread:
            windows[-1].append(re.sub(r"0x[0-9a-f]+", lambda m: f"<{names.setdefault(m.group(), len(names))}>",
                                      line.split(" ", 1)[1]))
    return windows


STREAM_WORK = ("cuStreamCreate", "cuStreamCreateWithPriority", "cuMemsetD8Async", "cuMemsetD32Async",
               "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpy2DAsync_v2", "cuStreamSynchronize",
               "cuEventRecord", "cuStreamWaitEvent")


def capture_windows(calls_log, every_thread=False):
    """Per capture on the program's thread, the driver calls that thread (or, `every_thread`, any thread: our
    writer's copy-out too) made between its cuStreamBeginCapture_v2 and its cuStreamEndCapture."""
    windows, open_on = [], None
    for line in calls_log.read_text().splitlines():
        if line.startswith(("== ", "  =")):
            continue
        thread, call = line.split()[:2]
        if call == "cuStreamBeginCapture_v2":
            open_on = thread
            windows.append([])
        elif call == "cuStreamEndCapture" and thread == open_on:
            open_on = None
        elif open_on is not None and (every_thread or thread == open_on):
            windows[-1].append(call)
    return windows


def test_no_stream_of_ours_is_made_or_used_while_the_program_captures(tmp_path, fakecuda_calls, shim, monkeypatch):
    """Issue 24: a stream made, or work put on one, while the program's capture is open slows every later graph
    replay of the process by ~10% (H200, benchmarks/graph_residual.py --isolate fourth: a plain process doing it
    inside a capture, 1.118). Our stream is made before the capture begins (the shim reports the begin) and the
    probed nodes' memory is zeroed once the capture has ended: inside the capture that probes graph A's nodes,
    the program's thread makes no stream and puts no copy, memset, event or wait on one; the nodes are probed,
    none of their results lost."""
    monkeypatch.setenv("FAKECUDA_LOG_CALLS", str(tmp_path / "calls.log"))
    monkeypatch.setenv("NEUTRINO_PTXAS", str(FAKE / "fake_ptxas.py"))
    monkeypatch.setenv("GRAPH_APP_OUT", str(tmp_path / "app.out"))
    monkeypatch.setenv("GRAPH_APP_PLAIN", "hscale")
    monkeypatch.setenv("GRAPH_APP_KERNELS", "3")
    rc, log = _run_under_fake(tmp_path, fakecuda_calls, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX),
                                                         "saxpy4", "1", "6"], "--graphs", "--filter", "hscale")
    assert rc == 0 and (tmp_path / "app.out").read_text().splitlines()[-1] == "app done"
    windows = capture_windows(tmp_path / "calls.log")
    assert len(windows) == 2  # graph A's capture (probed), then B's
    probing = windows[0]
    assert probing.count("cuMemAlloc_v2") == 3 and "cuLaunchKernel" in probing  # its 3 nodes' memory, probed
    assert [c for w in windows for c in w if c in STREAM_WORK] == []
    # nor another thread of ours: the writer's copy-out of the launches before is done before the capture opens
    assert [c for w in capture_windows(tmp_path / "calls.log", every_thread=True) for c in w if c in STREAM_WORK] == []
    t = nt.load(tmp_path / "trace")
    assert len(events(t, "graph_node")) == 3 and not events(t, "result_error") and not events(t, "fallback")
    # the shim's own count agrees: two captures seen, no stream work of ours while either was open
    (ex,) = events(t, "exit")
    assert ex["captures"] == 2 and set(ex["stream_work_in_capture"].values()) == {0}, ex


@pytest.mark.parametrize("launches", ["every:3", "all"])
def test_an_unplanned_graph_is_made_and_launched_as_without_graphs(tmp_path, fakecuda_calls, shim, monkeypatch,
                                                                   launches):
    """Issue 24: under --graphs every graph of a process replayed ~10% slower on the GPU, graph B too (another
    kernel, left out by --filter, never probed or planned). The fake driver logs every driver call: B's capture,
    its instantiation (flags, nodes: kinds, kernels, shapes) and each replay's calls are those of --no-graphs,
    call for call (but one host query of the current context before B's capture begins: session 9's
    test_no_stream_of_ours_is_made_or_used_while_the_program_captures), while graph A beside it is probed (its
    replays chosen on the host, or every one probed)."""
    found = {}
    for mode in ("--graphs", "--no-graphs"):
        d = tmp_path / mode.strip("-")
        d.mkdir()
        monkeypatch.setenv("FAKECUDA_LOG_CALLS", str(d / "calls.log"))
        monkeypatch.setenv("NEUTRINO_PTXAS", str(FAKE / "fake_ptxas.py"))
        out = d / "app.out"
        monkeypatch.setenv("GRAPH_APP_OUT", str(out))
        monkeypatch.setenv("GRAPH_APP_PLAIN", "hscale")
        monkeypatch.setenv("GRAPH_APP_KERNELS", "3")
        extra = ["--launches", "every:3"] if launches == "every:3" else []
        rc, log = _run_under_fake(d, fakecuda_calls, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX),
                                                      "saxpy4", "1", "6"], mode, "--filter", "hscale", *extra)
        assert rc == 0 and out.read_text().splitlines()[-1] == "app done"
        found[mode] = (graph_b_calls(d / "calls.log"), log, nt.load(d / "trace"))
    (b_graphs, log_graphs, t_graphs), (b_plain, log_plain, _) = found["--graphs"], found["--no-graphs"]
    assert [w[0] for w in b_graphs] == ["B capture"] + [f"B replay {r}" for r in range(6)]
    # before B's capture begins, ours asks which context is current (our stream for it was made before A's)
    assert b_graphs[0][1] == "cuCtxGetCurrent" and b_graphs[0][2].startswith("cuStreamBeginCapture")
    assert [b_graphs[0][:1] + b_graphs[0][2:], *b_graphs[1:]] == b_plain
    capture = b_graphs[0]
    assert capture.count("cuStreamBeginCapture_v2") == 1 and capture.count("cuLaunchKernel") == 3
    (instantiate,) = [i for i, line in enumerate(capture) if line == "cuGraphInstantiateWithFlags"]
    assert capture[instantiate + 1] == "  = flags 0 nodes 3" + " [2 hscale 4,1,1/64,1,1]" * 3  # as the program made it
    assert all(w[1:] == ["cuGraphLaunch"] for w in b_graphs[1:])  # nothing of ours on a replay of B
    # graph A was probed in the --graphs process (so the comparison is of a process where --graphs did its work)
    assert any("probed=1" in line for line in log_graphs) and not any("probed=1" in line for line in log_plain[1:])
    if launches == "every:3":
        (pick,) = events(t_graphs, "graph_pick")
        assert pick["twin_launches"] == 4  # A's replays 1, 2, 4, 5 left out: its twin


def test_no_poller_thread_when_polling_is_off(tmp_path, fakecuda_calls, shim, monkeypatch):
    """NEUTRINO_GRAPH_POLL_US=0 (benchmarks/graph_residual.py --isolate): no thread of ours polls the rings (the
    process has one thread fewer than with polling); they are drained at exit on the program's thread, every
    selected replay written."""
    threads = {}
    for poll in ("100", "0"):
        d = tmp_path / f"poll{poll}"
        d.mkdir()
        calls = d / "calls.log"
        monkeypatch.setenv("FAKECUDA_LOG_CALLS", str(calls))
        monkeypatch.setenv("NEUTRINO_PTXAS", str(FAKE / "fake_ptxas.py"))
        log, _, t, said = run_app(d, fakecuda_calls, monkeypatch, NEUTRINO_GRAPH_POLL_US=poll)
        assert written(t) == SELECTED
        threads[poll] = int(next(line for line in said if line.startswith("threads ")).split()[1])
    lines = [line.split() for line in calls.read_text().splitlines() if not line.startswith("==")]
    (program,) = {words[0] for words in lines if words[1] == "cuGraphLaunch"}
    assert {words[0] for words in lines if words[1] == "cuMemcpy2DAsync_v2"} == {program}
    assert threads["0"] == threads["100"] - 1


def order_seen(said):
    """(graph launches the fake driver checked, of them not ordered after the previous launch of their captured
    graph's executable graphs: the program's and the twin)."""
    (line,) = [line for line in said if line.startswith("order ")]
    return tuple(map(int, line.split()[1:]))


@pytest.mark.parametrize("every, switching", [(3, False), (2, False), (3, True)])
def test_two_threads_on_two_streams_never_overlap_the_graph_and_its_twin(tmp_path, fakecuda, shim, monkeypatch,
                                                                         every, switching):
    """Two threads of the program replay the executable graph at once, each on a stream of its own, 300 times
    each. CUDA orders the launches of one executable graph; the twin is another, so the shim orders them: every
    launch of the program's graph or of its twin that the fake driver sees follows the one before it (a wait
    on our fence, the stream's order, or CUDA's own), whichever thread made it. The replays are numbered
    across both threads: each selected number is written once. Switching nodes instead (no twin), a replay's
    switch and its launch are one step too: exactly the selected replays run the probed kernel."""
    monkeypatch.setenv("FAKECUDA_CHECK_ORDER", "1")
    monkeypatch.setenv("FAKECUDA_LAUNCH_DELAY_US", "50")  # the driver's launch takes a while: threads overlap
    replays = 300
    log, calls, t, said = run_app(tmp_path, fakecuda, monkeypatch, launches=f"every:{every}", replays=replays,
                                  GRAPH_APP_THREADS=2, **(SWITCHING if switching else {}))
    assert order_seen(said) == (2 * replays - 1, 0)
    selected = list(range(0, 2 * replays, every))
    assert sorted(written(t)) == selected
    ran_probed = [line for line in log if line.startswith("saxpy4 probed=1")]
    assert len(ran_probed) == len(selected)
    (pick,) = events(t, "graph_pick")
    twins = 0 if switching else 2 * replays - len(selected)
    assert pick["launches"] == 2 * replays and pick["twin_launches"] == twins
    assert not events(t, "graph_pick_switching") and not events(t, "graph_pick_fallback")


@pytest.mark.parametrize("split", ["next", "third", "fourth", "fifth"])
def test_the_later_isolate_splits_are_well_formed(split):
    """`graph_residual.py --isolate next|third|fourth|fifth`: every variant is compared with a reference in the set
    (B alone against plain B alone), the names are distinct, each `--suspect` / `--during` thing it asks of the
    child is one the child makes and each option it gives the child is one the child takes (read from its source:
    the child needs torch)."""
    import ast
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(bench))
    import graph_residual

    variants = graph_residual.ISOLATE_SETS[split]
    names = [v.name for v in variants]
    assert len(set(names)) == len(names)
    assert all(v.reference in names for v in variants)
    assert all("--replay" in v.child for v in variants if v.reference == "plain, B only replayed")
    child = ast.parse((bench / "graph_residual_child.py").read_text())
    (suspects,) = [ast.literal_eval(n.value) for n in ast.walk(child) if isinstance(n, ast.Assign)
                   and any(getattr(t, "id", "") == "SUSPECTS" for t in n.targets)]
    options = {n.args[0].value for n in ast.walk(child) if isinstance(n, ast.Call)
               and getattr(n.func, "attr", "") == "add_argument"}
    assert {w for v in variants for w in v.child if w.startswith("--")} <= options
    (during,) = [ast.literal_eval(n.value) for n in ast.walk(child) if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", "") == "DURING" for t in n.targets)]
    asked = [w for v in variants if "--suspect" in v.child for w in v.child[v.child.index("--suspect") + 1].split(",")]
    made = [w for v in variants if "--during" in v.child for w in v.child[v.child.index("--during") + 1].split(",")]
    assert (asked or made) and set(asked) <= set(suspects) and set(made) <= set(during)
    rows = graph_residual.isolate_table({}, variants).splitlines()[2:]
    assert len(rows) == len(variants) and all("error" in r for r in rows)  # no runs: each row says so
