"""NEUTRINO_MEASURE_CAPTURE (capture.py; a benchmark's switches for benchmarks/graph_residual.py --isolate bisect):
each word skips or moves exactly the step of a probed capture it names, on the fake libcuda that logs every driver
call (FAKECUDA_LOG_CALLS), so that the GPU run cannot fail on a word that does nothing. Graph A (3 probed saxpy4
launches) is captured first, then graph B (hscale, left unprobed by --filter); only A's capture is read here: from
its cuStreamBeginCapture_v2 to its cuStreamEndCapture ("inside"), from there to its instantiation ("after"), and
the program's thread's calls between the eager launch and that begin ("before")."""

from __future__ import annotations

import subprocess
import sys

import pytest

import neutrino.trace as nt
from neutrino.runtime.cudagraphs.capture import MEASURE_KNOBS
from neutrino.runtime.cudagraphs.ring import LAUNCH_ORDER_EDGE

from test_graph_pick import events, fakecuda_calls  # noqa: F401 - fixture
from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, shim  # noqa: F401 - fixture

REPLAYS = 6
SELECTED = [0, 3]  # --launches every:3


@pytest.fixture(autouse=True)
def _append_path(monkeypatch):
    """This module tests the append node: the chain (the default; tests/test_runtime_graph_chain.py and
    tests/test_graph_chain_*.py) is turned off."""
    monkeypatch.setenv("NEUTRINO_GRAPH_CHAIN", "0")


def run(tmp_path, fakecuda_calls, monkeypatch, knobs: str, **env):
    """(A's capture split into before / inside / after, as call names on the program's thread; the trace; the fake's
    kernel log)."""
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("FAKECUDA_LOG_CALLS", str(calls))
    monkeypatch.setenv("NEUTRINO_PTXAS", str(FAKE / "fake_ptxas.py"))
    monkeypatch.setenv("GRAPH_APP_OUT", str(tmp_path / "app.out"))
    monkeypatch.setenv("GRAPH_APP_PLAIN", "hscale")
    monkeypatch.setenv("GRAPH_APP_KERNELS", "3")
    monkeypatch.setenv("NEUTRINO_MEASURE_CAPTURE", knobs)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    rc, log = _run_under_fake(tmp_path, fakecuda_calls, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX),
                                                         "saxpy4", "1", str(REPLAYS)],
                              "--graphs", "--filter", "hscale", "--launches", "every:3")
    assert rc == 0 and (tmp_path / "app.out").read_text().splitlines()[-1] == "app done"
    lines = [line.split()[:2] for line in calls.read_text().splitlines() if not line.startswith("==")]
    lines = [words for words in lines if words[1] != "="]  # (a call's details: "t0   = ...")
    begin = next(i for i, (_, call) in enumerate(lines) if call == "cuStreamBeginCapture_v2")
    program = lines[begin][0]
    mine = [(i, call) for i, (thread, call) in enumerate(lines) if thread == program]
    eager = max(i for i, call in mine if i < begin and call == "cuLaunchKernel")
    end = next(i for i, call in mine if i > begin and call == "cuStreamEndCapture")
    inst = next(i for i, call in mine if i > end and call.startswith("cuGraphInstantiate"))
    split = {"before": [c for i, c in mine if eager < i < begin], "inside": [c for i, c in mine if begin < i < end],
             "after": [c for i, c in mine if end < i < inst]}
    said = (tmp_path / "app.out").read_text().splitlines()
    split["threads"] = int(next(line for line in said if line.startswith("threads ")).split()[1])
    return split, nt.load(tmp_path / "trace"), log


def written(t):
    return sorted({la.event["replay"] for la in t.launches if la.graph is not None and la.graph[0] == 1})


@pytest.fixture(scope="module")
def control(tmp_path_factory, fakecuda_calls, shim):  # noqa: F811
    """The same run with the variable unset: what each knob is compared with."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("NEUTRINO_GRAPH_CHAIN", "0")  # (module scope: _append_path does not reach here)
        return run(tmp_path_factory.mktemp("control"), fakecuda_calls, mp, "")
    finally:
        mp.undo()


def test_unset_changes_nothing_and_the_control_does_every_step(control):
    split, t, _ = control
    inside, after = split["inside"], split["after"]
    assert inside.count("cuMemAlloc_v2") == 3 and inside.count("cuMemHostAlloc") == 3
    assert inside.count("cuModuleLoadDataEx") == 1 and "cuThreadExchangeStreamCaptureMode" in inside
    assert inside.count("cuStreamGetCaptureInfo_v2") >= 6  # per node: the group's, then the node's handle
    assert "cuMemsetD8Async" not in after and after.count("cuMemcpyHtoDAsync_v2") >= 3  # zeroed by copies
    assert after.count("cuMemAlloc_v2") == 1
    assert ("cuGraphAddNode_v2" if LAUNCH_ORDER_EDGE else "cuGraphAddKernelNode_v2") in after
    assert written(t) == SELECTED and len(events(t, "graph_append")) == 1


def test_every_word_is_tested():
    assert set(MEASURE_KNOBS) == set(EXPECT) | {"no-relax"}


def _unprobed(split, t, log, control):
    assert not {"cuMemAlloc_v2", "cuMemHostAlloc", "cuModuleLoadDataEx"} & set(split["inside"])
    assert not {"cuMemsetD8Async", "cuGraphAddNode_v2", "cuGraphAddKernelNode_v2"} & set(split["after"])
    assert not events(t, "graph_node") and any("NEUTRINO_MEASURE_CAPTURE" in e["reason"] for e in events(t, "fallback"))


def _original(split, t, log, control):
    assert len(events(t, "graph_node")) == 3 and len(events(t, "graph_append")) == 1
    assert split["inside"].count("cuMemAlloc_v2") == 3
    runs = [line for line in log[1:] if line.startswith("saxpy4 ")]  # (log[0]: the eager launch)
    assert len(runs) == 3 * REPLAYS and all("probed=0" in line for line in runs), runs  # the program's kernel


def _pool(split, t, log, control):
    assert not {"cuMemAlloc_v2", "cuMemHostAlloc"} & set(split["inside"])
    assert split["before"].count("cuMemAlloc_v2") == 1 and split["before"].count("cuMemHostAlloc") == 1
    assert written(t) == SELECTED  # the carved memory works


def _warm_append(split, t, log, control):
    assert "cuModuleLoadDataEx" not in split["inside"] and split["before"].count("cuModuleLoadDataEx") == 1
    assert written(t) == SELECTED


def _quiet(split, t, log, control):  # no-relax with pool and warm-append: nothing of ours needs the relaxed mode
    assert "cuThreadExchangeStreamCaptureMode" not in split["inside"]
    assert not {"cuMemAlloc_v2", "cuMemHostAlloc", "cuModuleLoadDataEx"} & set(split["inside"])
    assert written(t) == SELECTED


def _no_zero(split, t, log, control):
    after, before = split["after"], control[0]["after"]
    assert "cuMemsetD8Async" not in after and len(events(t, "graph_append")) == 1
    assert after.count("cuMemcpyHtoDAsync_v2") <= before.count("cuMemcpyHtoDAsync_v2") - 3  # no zeroing copies


def _zero_by_memset(split, t, log, control):
    after, before = split["after"], control[0]["after"]
    assert after.count("cuMemsetD8Async") == 3 and written(t) == SELECTED
    assert after.count("cuMemcpyHtoDAsync_v2") == before.count("cuMemcpyHtoDAsync_v2") - 3


def _zero_no_gate(split, t, log, control):
    after, before = split["after"], control[0]["after"]
    assert "cuMemsetD8Async" not in after
    assert after.count("cuMemcpyHtoDAsync_v2") <= before.count("cuMemcpyHtoDAsync_v2")


def _no_append(split, t, log, control):
    after = split["after"]
    assert not {"cuGraphAddNode_v2", "cuGraphAddKernelNode_v2", "cuMemAlloc_v2", "cuGraphGetEdges_v2"} & set(after)
    assert after.count("cuMemcpyHtoDAsync_v2") >= 3 and not events(t, "graph_append") and len(events(t, "graph_node")) == 3


def _ordinary_edges(split, t, log, control):
    assert "cuGraphGetEdges_v2" not in split["after"] and "cuGraphAddNode_v2" not in split["after"]
    assert "cuGraphAddKernelNode_v2" in split["after"] and written(t) == SELECTED


def _no_node_query(split, t, log, control):
    queries = split["inside"].count("cuStreamGetCaptureInfo_v2")
    assert queries == control[0]["inside"].count("cuStreamGetCaptureInfo_v2") - 3
    assert not events(t, "graph_append") and len(events(t, "graph_node")) == 3


def _no_record(split, t, log, control):
    assert len(events(t, "graph_node")) == 3 and not events(t, "graph_append")
    assert split["after"].count("cuMemcpyHtoDAsync_v2") >= 3  # the rest of the capture's end as usual (the zeroing)
    assert split["threads"] == control[0]["threads"] - 1  # no ring to poll: no poller thread


def _late_stream(split, t, log, control):
    assert "cuStreamCreate" in control[0]["before"]  # (made before the capture begins, by default)
    assert "cuStreamCreate" not in split["before"] + split["inside"] and "cuStreamCreate" in split["after"]
    assert written(t) == SELECTED  # (the fake's legacy stream copies as well)


def _all(split, t, log, control):
    inside = set(split["inside"])
    assert not {"cuMemAlloc_v2", "cuMemHostAlloc", "cuModuleLoadDataEx", "cuThreadExchangeStreamCaptureMode"} & inside
    assert not {"cuMemsetD8Async", "cuMemAlloc_v2", "cuGraphAddNode_v2", "cuGraphAddKernelNode_v2"} & set(split["after"])
    assert "cuStreamCreate" not in split["before"] + split["inside"] + split["after"]  # no stream of ours at all
    assert len(events(t, "graph_node")) == 3


EXPECT = {"unprobed": _unprobed, "original": _original, "pool": _pool, "warm-append": _warm_append,
          "no-zero": _no_zero, "zero-by-memset": _zero_by_memset, "zero-no-gate": _zero_no_gate, "no-append": _no_append, "ordinary-edges": _ordinary_edges,
          "no-node-query": _no_node_query, "no-record": _no_record, "late-stream": _late_stream}
CASES = [(k, EXPECT[k], {}) for k in EXPECT]
CASES[1] = ("original", _original, {"NEUTRINO_GRAPH_PICK": "0"})  # every replay on the captured node: the program's
CASES += [("no-relax,pool,warm-append", _quiet, {}),
          (",".join(k for k in MEASURE_KNOBS if k != "unprobed"), _all, {})]


@pytest.mark.parametrize("knobs, check, env", CASES, ids=[c[0] for c in CASES])
def test_each_word_does_its_step(tmp_path, fakecuda_calls, shim, monkeypatch, control, knobs, check, env):  # noqa: F811
    split, t, log = run(tmp_path, fakecuda_calls, monkeypatch, knobs, **env)
    check(split, t, log, control)
    (ex,) = events(t, "exit")
    assert ex["captures"] == 2  # graph B captured too, as in every run


def test_no_relax_alone_lets_the_driver_refuse_the_allocations(tmp_path, fakecuda_calls, shim, monkeypatch):  # noqa: F811
    """Without the relaxed mode the program's global capture forbids cuMemAlloc (the fake refuses it as CUDA does):
    the launch falls back to the original, counted; the program runs on. Why no-relax goes with pool and warm-append."""
    split, t, _ = run(tmp_path, fakecuda_calls, monkeypatch, "no-relax")
    assert not events(t, "graph_node") and any(e["stage"] == "graph-alloc" for e in events(t, "fallback"))


def test_the_benchmark_asks_only_for_words_the_runtime_knows():
    """graph_residual.py --isolate bisect: every word of every variant is one of MEASURE_KNOBS (its typo would
    silently measure nothing), and the rows' names are distinct."""
    out = subprocess.run([sys.executable, str(FAKE.parents[1] / "benchmarks" / "graph_residual.py"), "--isolate",
                          "bisect", "--list"], capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows and len({r[0] for r in rows}) == len(rows)
    for _, words in rows:
        assert set(filter(None, words.split(","))) <= set(MEASURE_KNOBS)


def _bisect_module():
    sys.path.insert(0, str(FAKE.parents[1] / "benchmarks"))
    import graph_residual

    return graph_residual


def _model(culprits, base=16.2, plain=14.8, wall=7.0, unprobed_drops=True):
    """run_isolated's stand-in: B costs `base` µs under neutrino unless every step of one of the `culprits` sets is
    off (then plain's): a known answer for the bisect's table and search."""
    gr = _bisect_module()
    seen = []

    def run_isolated(variant, iters, tmp):
        seen.append(variant.name)
        off = set(filter(None, variant.env.get("NEUTRINO_MEASURE_CAPTURE", "").split(",")))
        off |= {step for step, env in gr._ENV_STEPS.items() if set(env.items()) <= set(variant.env.items())}
        us = plain if variant.args is None or "--no-graphs" in variant.args or unprobed_drops and "unprobed" in off \
            or any(set(c) <= off for c in culprits) else base
        return {"B": {"us": us, "mean_us": us, "hash": "hb"}, "_wall_s": wall, "_counts": "8 / 1 / 0"}

    return gr, run_isolated, seen


@pytest.mark.parametrize("culprits, found", [
    ([("no-zero", "pool")], "pool,no-zero"),  # two steps, both needed: the search finds them, no single drops B
    ([("no-append",)], "no-append"),  # one step: the search and its single row say so
    ([("no-relax",)], "pool,warm-append,no-relax"),  # (no-relax runs with what it needs)
    ([], None),  # nothing drops B but unprobed: all steps off says so, no search
    ([], "outside"),  # nothing drops B, unprobed neither: the row without our stream is run too
])
def test_the_bisect_finds_the_steps_that_drop_b(monkeypatch, tmp_path, culprits, found):
    gr, fake, seen = _model(culprits, unprobed_drops=found != "outside")
    monkeypatch.setattr(gr, "run_isolated", fake)
    report = gr.bisect(300, budget_s=1e9, out=str(tmp_path / "t.md"))
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in report.splitlines() if line.startswith("| ")}
    assert rows["every:50 twin, B only replayed"][3] == f"{16.2 / 14.8:.3f}"
    assert rows["every:50, unprobed (nothing of ours in the capture)"][3] == ("1.095" if found == "outside" else "1.000")
    assert ("every:50, unprobed, late-stream (no stream of ours made)" in rows) is (found == "outside")
    assert (tmp_path / "t.md").read_text().strip() == report.strip()  # rewritten after every row
    if found and found != "outside":
        assert f"smallest set found that drops B: {found}" in report
        assert rows[f"every:50, off: {found}"][3] == "1.000"
        assert ("steps that drop B alone" in report) is ("," not in found or "no-relax" in found)
    else:
        assert "all steps off does not drop B" in report and "smallest set" not in report
    assert len(seen) == len(set(seen))  # no row measured twice
    assert seen[-2:] == ["plain, B only replayed (again)", "--no-graphs, B only replayed"]


def test_the_bisect_stops_at_its_time_budget(monkeypatch):
    """A process of 7 s and a budget of 30 s: four rows, then a note naming the first row not run; the rows
    measured are in the table."""
    gr, fake, seen = _model([("no-zero", "pool")])
    now = [0.0]

    def timed(*args):
        now[0] += 7.0  # the process's wall time passes
        return fake(*args)

    monkeypatch.setattr(gr, "run_isolated", timed)
    report = gr.bisect(300, budget_s=30, clock=lambda: now[0])
    assert sum(line.startswith("| every:50") or line.startswith("| plain") for line in report.splitlines()) == 4
    # (unprobed drops B in this model: no row without our stream; all steps off drops it: the search is next)
    assert len(seen) == 4 and "time budget (30 s) spent before: every:50, off: original,pool" in report
