"""Where a left-out graph replay's cost goes (issue 24): the twin against switching nodes, in one run.

    OVERHEAD_GPU_ONLY=1 python benchmarks/graph_residual.py [--iters 300] [--rounds 2] [--out FILE.md]
    OVERHEAD_GPU_ONLY=1 python benchmarks/graph_residual.py --isolate [next|third|fourth|fifth|sixth] [--iters 300] [--out FILE.md]

`--isolate` (below, "Isolating the residual") instead runs benchmarks/graph_residual_child.py: graph A
probed, graph B (the same kernels under another name, `--filter _plain`) the program's own graph in the
same process, their replays alternating, under variants that isolate the suspects; `--isolate next`, the
split that followed the first table (ISOLATE_NEXT: graph B replayed alone, against suspects made without
neutrino by the child's `--suspect`); `--isolate third`, the split after that (ISOLATE_THIRD: A's probed
module alone, A's probed capture without an executable graph, A's graph destroyed, no plan, A's probed cubin
and A's PTX through our ptxas loaded in a plain process); `--isolate fourth` (ISOLATE_FOURTH: what neutrino does
inside A's capture, done by a plain process inside A's capture, one thing a row); `--isolate fifth`
(ISOLATE_FIFTH: our stream's steps inside a capture, and neutrino with the fix); `--isolate bisect [--budget-s S]`
(session 11: neutrino's own capture steps switched off or moved, NEUTRINO_MEASURE_CAPTURE, and a search for a
smallest set of them that makes B as fast as plain; `bash benchmarks/graph_bisect_gpu.sh`).

graph8 (benchmarks/overhead_workloads.py: a CUDA graph of 8 tiny Triton kernels) replayed on the GPU
alone, one process per configuration, the configurations interleaved round by round:

* plain: no neutrino;
* block_sched `--graphs --launches every:50`, timeline off (`--no-timeline`) and on (the default), with
  the twin (the default: a replay left out launches the program's graph as it made it) and switching
  (`NEUTRINO_GRAPH_TWIN=0`: the probed graph's nodes switched to the program's kernels, its append node
  disabled, as before the twin).

Per configuration: the median per replay (under every:50 a replay left out), its ratio to plain, the
mean per replay (which also counts the selected replays and, when switching, the switches' cost at
the replay after them), its ratio, and whether the outputs equal plain's; then the shim's `graph_pick`
event (replays that ran the twin, switches). Each figure is the median over the rounds of each
process's figure. Times in µs per replay, from CUDA events around each replay (overhead_workloads.py,
timed_loop).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # noqa: E402 - benchmarks/overhead.py, beside this file

CONFIGS = ["plain", "block_sched graphs every:50 no-timeline", "block_sched graphs every:50",
           "block_sched graphs every:50 no-timeline switching", "block_sched graphs every:50 switching"]


def pick_event(trace_dir: str) -> dict:
    """The run's graph_pick event (empty when there is none or the trace cannot be read)."""
    try:
        from neutrino import trace as nt

        return next((e for e in nt.load(trace_dir).events if e["event"] == "graph_pick"), {})
    except Exception:  # noqa: BLE001 - a figure missing from the table, not a failed benchmark
        return {}


def run(iters: int, rounds: int) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for _ in range(rounds):
            for name in CONFIGS:
                res = overhead.run_config(name, overhead.CONFIGS[name], iters, tmp, "graph8")
                if "error" not in res and name != "plain":
                    res["_pick"] = pick_event(res["_trace"])
                runs[name].append(res)
                g = res.get("graph8", {})
                print(f"{name}: {g.get('us', res.get('error', '?'))}", file=sys.stderr, flush=True)
    return runs


def table(runs: dict[str, list[dict]]) -> str:
    def figure(name, key):
        vals = [r["graph8"][key] for r in runs[name] if "graph8" in r and key in r["graph8"]]
        return statistics.median(vals) if vals else None

    base_med, base_mean = figure("plain", "us"), figure("plain", "mean_us")
    base_hash = next((r["graph8"]["hash"] for r in runs["plain"] if "graph8" in r), None)
    rows = ["| configuration | median µs/replay | × plain | mean µs/replay | × plain | same outputs | "
            "twin launches / switches |", "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for name in CONFIGS:
        med, mean = figure(name, "us"), figure(name, "mean_us")
        if med is None:
            err = next((r.get("error", "") for r in runs[name] if "error" in r), "")[-200:].replace("\n", " ")
            rows.append(f"| {name} | error: {err} | | | | | |")
            continue
        same = all(r["graph8"]["hash"] == base_hash for r in runs[name] if "graph8" in r)
        pick = next((r["_pick"] for r in runs[name] if r.get("_pick")), {})
        picks = f"{pick.get('twin_launches', '—')} / {pick.get('switches', '—')}" if pick else "—"
        ratio = (lambda v, b: f"{v / b:.2f}x" if b else "—")
        rows.append(f"| {name} | {med:.1f} | {ratio(med, base_med)} | {mean:.1f} | {ratio(mean, base_mean)} | "
                    f"{'yes' if same else 'NO'} | {picks} |")
    return "\n".join(rows)


# ------------------------------------------------------------ isolating the residual

CHILD = Path(__file__).resolve().parent / "graph_residual_child.py"
REPO = Path(__file__).resolve().parent.parent
_PROBED = ["-p", "block_sched", "--filter", "_plain", "--no-timeline"]  # graph B never probed
_EVERY = [*_PROBED, "--graphs", "--launches", "every:50"]
_B_ONLY = ["--replay", "B"]


@dataclasses.dataclass(frozen=True)
class Variant:
    """One process of the child: neutrino's arguments (None: no neutrino), its environment, the child's own
    arguments, and the plain variant its A and B are compared with."""

    name: str
    args: list[str] | None
    env: dict = dataclasses.field(default_factory=dict)
    child: list[str] = dataclasses.field(default_factory=list)
    reference: str = "plain"


# Each isolates one suspect of B's slowdown under --graphs (docs/overhead.md, "Graph B under --graphs"): B's own
# driver calls are those of --no-graphs (tests/test_graph_pick.py), so what is left is what neutrino made for A.
ISOLATE = [
    Variant("plain", None),
    Variant("plain, B only replayed", None, child=_B_ONLY),
    Variant("shim, nothing in graphs probed (--no-graphs)", [*_PROBED, "--no-graphs"]),
    Variant("every:50 twin", _EVERY),
    Variant("every:50 twin, no poller thread", _EVERY, {"NEUTRINO_GRAPH_POLL_US": "0"}),
    Variant("every:50 twin, 2-slot rings", _EVERY, {"NEUTRINO_GRAPH_RING_SLOTS": "2"}),
    Variant("every:50 twin, B captured before A", _EVERY, child=["--order", "BA"]),
    Variant("every:50 twin, B only replayed", _EVERY, child=_B_ONLY, reference="plain, B only replayed"),
]

# The next split (`--isolate next`), after the measured table (docs/overhead.md): B's ~9% stays with no poller,
# 2-slot rings, B captured first and A never replayed, and the whole of --graphs is done for A alone (B's driver
# calls are unchanged). Left: what A's capture makes (memory, mapped memory, a stream, the append module) and
# the process's own probed kernel (torch's sleep, probed eagerly in every neutrino variant). All replay B alone.
_B_REF = "plain, B only replayed"
ISOLATE_NEXT = [
    Variant(_B_REF, None, child=_B_ONLY, reference=_B_REF),
    Variant("every:50 twin, B only replayed", _EVERY, child=_B_ONLY, reference=_B_REF),
    Variant("--graphs, A captured unprobed too", [*_EVERY, "--filter", "stream_kernel"], child=_B_ONLY,
            reference=_B_REF),
    Variant("every:50 twin, the sleep kernel unprobed", [*_EVERY, "--filter", "spin_kernel"], child=_B_ONLY,
            reference=_B_REF),
    *[Variant(f"plain + {s}", None, child=[*_B_ONLY, "--suspect", s], reference=_B_REF)
      for s in ("device", "mapped", "pinned", "stream", "module")],
    Variant("plain + device,mapped,stream,module", None, child=[*_B_ONLY, "--suspect", "device,mapped,stream,module"],
            reference=_B_REF),
]

# The third split (`--isolate third`), after ISOLATE_NEXT's table (docs/overhead.md): B's ~10% needs A's kernels
# probed (A captured unprobed: 1.004) and none of the resources we make, made in a plain process, gives it. Left:
# A's instrumented module (loaded, run), A's probed capture (its nodes, the append node), A's executable graph and
# twin. Each row below keeps one of them (B replayed alone, against plain B).
_NO_GRAPHS = [*_PROBED, "--no-graphs"]  # every launch probed; launches into a capture run unprobed
ISOLATE_THIRD = [
    Variant(_B_REF, None, child=_B_ONLY, reference=_B_REF),
    Variant("every:50 twin, B only replayed", _EVERY, child=_B_ONLY, reference=_B_REF),
    Variant("--no-graphs, A's kernel launched eagerly (probed) 3x", _NO_GRAPHS, child=[*_B_ONLY, "--eager-a", "3"],
            reference=_B_REF),
    Variant("every:50, A captured probed, never instantiated", _EVERY, child=[*_B_ONLY, "--a-uncompiled"],
            reference=_B_REF),
    Variant("every:50 twin, A's graph destroyed before B's replays", _EVERY, child=[*_B_ONLY, "--reset-a"],
            reference=_B_REF),
    Variant("every:50, no plan (NEUTRINO_GRAPH_PICK=0: no twin)", _EVERY, {"NEUTRINO_GRAPH_PICK": "0"},
            child=_B_ONLY, reference=_B_REF),
    *[Variant(f"plain + {s}", None, child=[*_B_ONLY, "--suspect", s], reference=_B_REF)
      for s in ("probed-cubin", "ptxas-original")],  # after a neutrino row: its code cache has A's probed cubin
    Variant("plain + probed-cubin, loaded before the captures", None,
            child=[*_B_ONLY, "--suspect", "probed-cubin", "--suspects-first"], reference=_B_REF),
]

# The fourth split (`--isolate fourth`), after ISOLATE_THIRD's table (docs/overhead.md, "Session 9"): A's probed
# module alone (eager, or loaded in a plain process) leaves B as fast as plain; A's probed capture never
# instantiated, or its graph destroyed before B's replays, leaves B ~9% slower. So it is what neutrino does inside
# A's capture. A plain process does each such thing inside A's (unprobed) capture, under the relaxed capture mode
# as neutrino does (graph_residual_child.py --during); the last rows: the append kernel got after the captures
# (lazy loading's control) and the reference again (the run's noise).
def _during(what: str) -> Variant:
    return Variant(f"plain + during A's capture: {what}", None, child=[*_B_ONLY, "--during", what], reference=_B_REF)


ISOLATE_FOURTH = [
    Variant(_B_REF, None, child=_B_ONLY, reference=_B_REF),
    Variant("every:50 twin, B only replayed", _EVERY, child=_B_ONLY, reference=_B_REF),  # also fills the code cache
    *[_during(w) for w in ("relaxed", "device", "mapped", "stream", "module", "module-cubin", "module,appendnode",
                           "probednode", "relaxed,device,mapped,stream,module,appendnode")],
    Variant("plain + append-function (after the captures)", None, child=[*_B_ONLY, "--suspect", "append-function"],
            reference=_B_REF),
    Variant("plain, B only replayed (again)", None, child=_B_ONLY, reference=_B_REF),
]

# The fifth (`--isolate fifth`), after ISOLATE_FOURTH's table: only our stream, made and used inside A's capture,
# slows B (1.118). Which of its steps does, and neutrino with the fix (our stream made before a capture begins,
# the nodes' memory zeroed after it ends: capture.py), B alone and A and B alternating, each against its plain.
ISOLATE_FIFTH = [
    Variant(_B_REF, None, child=_B_ONLY, reference=_B_REF),
    Variant("every:50 twin, B only replayed", _EVERY, child=_B_ONLY, reference=_B_REF),
    *[_during(w) for w in ("stream", "stream-create", "stream-ops", "stream-sync")],
    Variant("plain", None),
    Variant("every:50 twin", _EVERY),
]
# The sixth (`--isolate sixth`, session 10), after ISOLATE_FIFTH: the shim's count of stream work of ours inside a
# capture is 0 in the real process (benchmarks/capture_work_gpu.sh), yet B stays ~1.09. Left: work of ours on a
# stream of ours after a capture ends, before the program's next capture (the nodes' zeroing, the append node's
# descriptors). Measured (H200, docs/overhead.md "Session 10: the lead's GPU runs"): neutrino doing that work on the
# program's capture stream instead changed nothing (1.083 against 1.088), and a plain process doing a memset and a
# copy on a stream of its own between A's capture and B's costs nothing (1.005). Not yet measured: a plain process
# adding a kernel node to A's captured graph with the graph API (neutrino's append node is added so), the one step
# of neutrino's capture no plain row has done.
ISOLATE_SIXTH = [
    Variant(_B_REF, None, child=_B_ONLY, reference=_B_REF),
    Variant("every:50 twin, B only replayed", _EVERY, child=_B_ONLY, reference=_B_REF),
    Variant("plain + a stream's memset and copy between A's capture and B's", None,
            child=[*_B_ONLY, "--ops-between"], reference=_B_REF),
    Variant("plain + A captured (driver API, never instantiated)", None, child=[*_B_ONLY, "--a-uncompiled"],
            reference=_B_REF),
    Variant("plain + A captured, the append kernel added with the graph API", None,
            child=[*_B_ONLY, "--a-uncompiled", "--a-addnode"], reference=_B_REF),
    Variant("plain, B only replayed (again)", None, child=_B_ONLY, reference=_B_REF),
]
ISOLATE_SETS = {"first": ISOLATE, "next": ISOLATE_NEXT, "third": ISOLATE_THIRD, "fourth": ISOLATE_FOURTH,
                "fifth": ISOLATE_FIFTH, "sixth": ISOLATE_SIXTH}

# ------------------------------------------------------------ the bisect inside neutrino (`--isolate bisect`)
# Session 11: every plain process replicating a step of neutrino's capture costs B nothing, and the shim counts no
# stream work of ours inside a capture, yet B stays ~1.08 under every:50. So neutrino's own steps are switched off
# (or moved before the capture) one at a time inside the real runtime (NEUTRINO_MEASURE_CAPTURE: capture.py's
# MEASURE_KNOBS) while B alone is replayed, as the "every:50 twin, B only replayed" row. Two steps are switched by
# the runtime's existing variables: the host's plan and twin (NEUTRINO_GRAPH_PICK=0) and the poller thread
# (NEUTRINO_GRAPH_POLL_US=0). Rows: the reference, the baseline, all steps off, `unprobed` (nothing of ours in the
# capture at all), each step alone; then, where all steps drop B and no single one does, a search for the smallest
# set that does (`minimal_dropping`), within the call's time budget; the reference again.
BISECT_STEPS = ("original", "pool", "warm-append", "no-relax", "no-zero", "no-append", "no-record", "late-stream",
                "ordinary-edges", "no-node-query", "no-plan", "no-poller")
_ENV_STEPS = {"no-plan": {"NEUTRINO_GRAPH_PICK": "0"}, "no-poller": {"NEUTRINO_GRAPH_POLL_US": "0"}}
_NEEDS = {"no-relax": ("pool", "warm-append")}  # without them the driver refuses our allocations in the capture
# each alone, but the variables (measured alone in session 9: 1.107, 1.089), the launch-order edge (made in session 10,
# after the residual was found) and the node's capture query (a host query): those only in the sets
_SINGLES = tuple(s for s in BISECT_STEPS if s not in _ENV_STEPS and s not in ("ordinary-edges", "no-node-query"))
_BASELINE = "every:50 twin, B only replayed"


def bisect_variant(steps, name: str | None = None) -> Variant:
    """B alone under every:50 with `steps` (of BISECT_STEPS, or "unprobed") off: NEUTRINO_MEASURE_CAPTURE's words
    (with what no-relax needs) and the variables of the others."""
    steps = set(steps)
    for step, needs in _NEEDS.items():
        if step in steps:
            steps |= set(needs)
    env = {k: v for step in sorted(steps) for k, v in _ENV_STEPS.get(step, {}).items()}
    words = [s for s in (*BISECT_STEPS, "unprobed") if s in steps and s not in _ENV_STEPS]
    if words:
        env["NEUTRINO_MEASURE_CAPTURE"] = ",".join(words)
    label = name or "every:50, off: " + ",".join(s for s in (*BISECT_STEPS, "unprobed") if s in steps)
    return Variant(label, _EVERY, env, child=_B_ONLY, reference=_B_REF)


ISOLATE_BISECT = [
    Variant(_B_REF, None, child=_B_ONLY, reference=_B_REF),
    Variant(_BASELINE, _EVERY, child=_B_ONLY, reference=_B_REF),
    bisect_variant(BISECT_STEPS, "every:50, all steps off"),
    bisect_variant(["unprobed"], "every:50, unprobed (nothing of ours in the capture)"),
    bisect_variant(["unprobed", "late-stream"], "every:50, unprobed, late-stream (no stream of ours made)"),
    *[bisect_variant([s]) for s in _SINGLES],
]
_BISECT_TAIL = [Variant("plain, B only replayed (again)", None, child=_B_ONLY, reference=_B_REF),
                Variant("--no-graphs, B only replayed", [*_PROBED, "--no-graphs"], child=_B_ONLY, reference=_B_REF)]


# Session 11's bisect named the zeroing of the nodes' memory after the capture ends (`no-zero`, B 0.998 against
# 1.089). `--isolate zero` splits it: the memset replaced by a copy from zeroed pinned memory, the closed gate's copy
# left out; the reference again at the end.
ISOLATE_ZERO = [
    Variant(_B_REF, None, child=_B_ONLY, reference=_B_REF),
    Variant(_BASELINE, _EVERY, child=_B_ONLY, reference=_B_REF),
    bisect_variant(["no-zero"]),
    Variant("every:50, zeroed by copies (zero-by-copy)", _EVERY, {"NEUTRINO_MEASURE_CAPTURE": "zero-by-copy"},
            child=_B_ONLY, reference=_B_REF),
    Variant("every:50, memset kept, no gate copy (zero-no-gate)", _EVERY, {"NEUTRINO_MEASURE_CAPTURE": "zero-no-gate"},
            child=_B_ONLY, reference=_B_REF),
    Variant("plain, B only replayed (again)", None, child=_B_ONLY, reference=_B_REF),
]
ISOLATE_SETS["zero"] = ISOLATE_ZERO


def drop_level(ref_ratio: float, base_ratio: float) -> float:
    """A row "drops" B when its B / plain B is at most this: 40% of the way from plain (1) to the baseline's."""
    return 1.0 + 0.4 * (base_ratio - 1.0)


def minimal_dropping(steps, drops) -> tuple[list, bool]:
    """A smallest set of `steps` (all of which drop B; none of which does not) that drops B, by removing what it
    can: a chunk of steps whose removal still drops B goes at once, one that does not is halved and each half tried
    (about 2 log2(n) measurements per step needed). `drops(subset)` measures, or raises TimeoutError: the search
    stops with the set it has (a superset). Returns (subset, finished)."""
    keep = list(steps)
    cache = {frozenset(): False, frozenset(keep): True}

    def test(subset) -> bool:
        key = frozenset(subset)
        if key not in cache:
            cache[key] = drops(list(subset))
        return cache[key]

    def prune(chunk) -> None:
        nonlocal keep
        trial = [s for s in keep if s not in chunk]
        if test(trial):
            keep = trial
        elif len(chunk) > 1:
            prune(chunk[:len(chunk) // 2])
            prune([s for s in chunk[len(chunk) // 2:] if s in keep])

    try:
        prune(list(steps))
    except TimeoutError:
        return keep, False
    return keep, True


def bisect(iters: int, budget_s: float, out: str | None = None, clock=None) -> str:
    """The bisect's rows, in order: the reference, the baseline, all steps off, `unprobed` (and without our stream);
    where all steps off drops B, the search for the smallest set that does; each step alone (the rows the search did
    not already run); the reference again and --no-graphs. Each process's B against plain B. No process starts that
    would end past `budget_s` (estimated from the slowest of the last three). The table is rewritten to `out` after
    every row (a call cut short keeps what it measured)."""
    import time

    clock = clock or time.monotonic
    t0, runs, order, notes = clock(), {}, [], []

    def measure(variant: Variant) -> dict:
        if variant.name in runs:
            return runs[variant.name]
        slowest = max((runs[v.name].get("_wall_s", 0) for v in order[-3:]), default=20.0)  # (the caches warm)
        if clock() - t0 + slowest > budget_s:
            raise TimeoutError(variant.name)
        r = runs[variant.name] = run_isolated(variant, iters, Path(td))
        order.append(variant)
        print(f"{variant.name}: {r.get('B', {}).get('us', r.get('error', '?'))}", file=sys.stderr, flush=True)
        if out:
            Path(out).write_text(bisect_table(runs, order, notes) + "\n")
        return r

    def ratio(name: str) -> float | None:
        b, ref = runs.get(name, {}).get("B", {}).get("us"), runs.get(_B_REF, {}).get("B", {}).get("us")
        return b / ref if b and ref else None

    fixed, late, singles = ISOLATE_BISECT[:4], ISOLATE_BISECT[4], ISOLATE_BISECT[5:]
    with tempfile.TemporaryDirectory() as td:
        try:
            for variant in fixed:
                measure(variant)
            base, everything = ratio(_BASELINE), ratio("every:50, all steps off")
            level = drop_level(1.0, base) if base else None
            if level and (ratio(fixed[3].name) or 9.0) > level:  # unprobed keeps B slow: is it our stream's making?
                measure(late)
            notes.append(f"drops: B / plain B <= {level:.3f}" if level else "no baseline: no search")
            if level and everything is not None and everything > level:
                notes.append("all steps off does not drop B: the cause is outside these steps")
            if level and base > 1.03 and everything is not None and everything <= level:
                def drops(subset) -> bool:
                    variant = bisect_variant(subset)
                    measure(variant)
                    got = ratio(variant.name)
                    return got is not None and got <= level

                # no-relax brings pool and warm-append along: searched only if the others alone do not drop B
                steps = [s for s in BISECT_STEPS if s not in _NEEDS]
                found, finished = minimal_dropping(steps if drops(steps) else list(BISECT_STEPS), drops)
                found = bisect_variant(found).name.split(": ", 1)[1].split(",")  # (with what no-relax needs)
                notes.append(f"smallest set found that drops B: {','.join(found)}" +
                             ("" if finished else " (search cut short by the time budget: a superset)"))
            for variant in singles:
                measure(variant)
            alone = [v.name.split(": ", 1)[1] for v in singles if level and (ratio(v.name) or 9.0) <= level]
            if alone:
                notes.append(f"steps that drop B alone: {'; '.join(alone)}")
            for variant in _BISECT_TAIL:
                measure(variant)
        except TimeoutError as e:
            notes.append(f"time budget ({budget_s:.0f} s) spent before: {e}")
    return bisect_table(runs, order, notes)


def trace_counts(trace_dir: str) -> str:
    """graph_node / graph_append / fallback events of a run (what its switches left), or "—"."""
    try:
        from neutrino import trace as nt

        names = [e["event"] for e in nt.load(trace_dir).events]
    except Exception:  # noqa: BLE001 - a figure missing from the table
        return "—"
    return " / ".join(str(names.count(n)) for n in ("graph_node", "graph_append", "fallback"))


def bisect_table(runs: dict, order: list, notes: list) -> str:
    rows = ["| row | NEUTRINO_MEASURE_CAPTURE, other variables | B median µs | B / plain B | same outputs | "
            "graph_node / graph_append / fallback events | wall s |", "| --- | --- | ---: | ---: | --- | --- | ---: |"]
    ref = runs.get(_B_REF, {}).get("B", {})
    for v in order:
        r = runs[v.name]
        env = ", ".join(f"{k}={val}" for k, val in v.env.items()) or "—"
        if "error" in r or "B" not in r:
            rows.append(f"| {v.name} | {env} | error: {r.get('error', '?')[-160:]!r} | | | | |".replace("\n", " "))
            continue
        b = r["B"]
        same = "yes" if b.get("hash") == ref.get("hash") else "NO"
        rows.append(f"| {v.name} | {env} | {b['us']:.2f} | {b['us'] / ref['us']:.3f} | {same} | "
                    f"{r.get('_counts', '—')} | {r['_wall_s']:.0f} |" if ref.get("us") else f"| {v.name} | {env} | "
                    f"{b['us']:.2f} | — | — | {r.get('_counts', '—')} | {r['_wall_s']:.0f} |")
    return "\n".join(rows + [""] + [f"* {n}" for n in notes])


def run_isolated(variant: Variant, iters: int, tmp: Path) -> dict:
    """One process of graph_residual_child.py (under neutrino with the variant's arguments): its RESIDUAL_RESULT,
    the wall seconds it took, and its graph_pick event; or {"error": ...}."""
    import json
    import os
    import re
    import subprocess
    import time

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OVERHEAD_GPU_ONLY", "1")
    for key in ("NEUTRINO_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):  # shared: one compile
        env.setdefault(key, str(tmp / key.lower()))
    env.update(variant.env)
    cmd = [sys.executable, str(CHILD), "--iters", str(iters), *variant.child]
    tracedir = tmp / re.sub(r"\W", "_", variant.name)
    args = variant.args
    if args is not None:
        cmd = [sys.executable, "-m", "neutrino.runtime.start.launcher", *args, "--tracedir", str(tracedir), "--", *cmd]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESIDUAL_RESULT ")), None)
    if r.returncode != 0 or line is None:
        return {"error": f"rc={r.returncode}: {(r.stderr or r.stdout)[-600:]}"}
    out = json.loads(line[len("RESIDUAL_RESULT "):])
    out["_wall_s"] = time.monotonic() - t0
    out["_pick"] = pick_event(str(tracedir)) if args is not None else {}
    out["_counts"] = trace_counts(str(tracedir)) if args is not None else "—"
    return out


def context_cell(ctx: dict | None) -> str:
    """The child's context_state() in one cell ("—" for a child without it)."""
    if not ctx:
        return "—"
    return (f"{ctx.get('stack')} / {ctx.get('printf_fifo')} / {ctx.get('malloc_heap')}, "
            f"0x{ctx['flags']:x}, {ctx.get('cache_config')}" if ctx.get("flags") is not None else str(ctx))


def isolate_table(runs: dict[str, dict], variants: list[Variant] = ISOLATE) -> str:
    """Per variant: A's median µs per replay (under every:50, a replay left out), A / B in the same process,
    A and B against its reference (plain) process's, B's median and A's mean, whether the outputs of the graphs
    replayed equal the reference's, the twin's launches and the switches, and the process's wall seconds. A
    variant that replays only B has "—" for A's figures."""
    rows = ["| variant | A median µs | A / B (same process) | A / plain A | B / plain B | B median µs | A mean µs "
            "| same outputs | twin launches / switches | wall s | stack / printf / heap B, ctx flags, cache config |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |"]
    ratio = (lambda v, b: f"{v / b:.3f}" if v and b else "—")
    for variant in variants:
        r, ref = runs.get(variant.name, {}), runs.get(variant.reference, {})
        if "error" in r or "B" not in r:
            rows.append(f"| {variant.name} | error: {r.get('error', '?')[-200:]!r} | | | | | | | | | |".replace("\n", " "))
            continue
        a, b = r.get("A", {}), r["B"]
        same = bool(ref) and all(r[g]["hash"] == ref.get(g, {}).get("hash") for g in ("A", "B") if g in r)
        pick = r.get("_pick") or {}
        picks = f"{pick.get('twin_launches', '—')} / {pick.get('switches', '—')}" if pick else "—"
        cell = (lambda v: f"{v:.2f}" if v else "—")
        rows.append(f"| {variant.name} | {cell(a.get('us'))} | {ratio(a.get('us'), b['us'])} | "
                    f"{ratio(a.get('us'), ref.get('A', {}).get('us'))} | {ratio(b['us'], ref.get('B', {}).get('us'))} | "
                    f"{b['us']:.2f} | {cell(a.get('mean_us'))} | {'yes' if same else 'NO'} | {picks} | "
                    f"{r['_wall_s']:.0f} | {context_cell(r.get('ctx'))} |")
    return "\n".join(rows)


def isolate(iters: int, variants: list[Variant] = ISOLATE) -> str:
    runs = {}
    with tempfile.TemporaryDirectory() as td:
        for variant in variants:
            r = runs[variant.name] = run_isolated(variant, iters, Path(td))
            print(f"{variant.name}: {r.get('B', {}).get('us', r.get('error', '?'))}", file=sys.stderr, flush=True)
    return isolate_table(runs, variants)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--isolate", nargs="?", const="first", choices=[*ISOLATE_SETS, "bisect"],
                    help="graph A probed beside graph B unprobed, per variant (next, third, fourth: the later splits; "
                         "bisect: neutrino's capture steps switched off one at a time, NEUTRINO_MEASURE_CAPTURE)")
    ap.add_argument("--budget-s", type=float, default=135.0,
                    help="--isolate bisect: start no process that would end after this many seconds")
    ap.add_argument("--list", action="store_true",
                    help="--isolate bisect: print each fixed row's name and NEUTRINO_MEASURE_CAPTURE (tab-separated)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.isolate == "bisect":
        if args.list:
            for v in [*ISOLATE_BISECT, *_BISECT_TAIL, *(bisect_variant([s]) for s in _ENV_STEPS)]:
                print(f"{v.name}\t{v.env.get('NEUTRINO_MEASURE_CAPTURE', '')}")
            return
        report = bisect(args.iters, args.budget_s, args.out) + "\n"
        print(report)
        if args.out:
            Path(args.out).write_text(report)
        return
    variants = ISOLATE_SETS[args.isolate or "first"]
    report = (isolate(args.iters, variants) if args.isolate else table(run(args.iters, args.rounds))) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
