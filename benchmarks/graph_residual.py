"""Where a left-out graph replay's cost goes (issue 24): the twin against switching nodes, in one run.

    OVERHEAD_GPU_ONLY=1 python benchmarks/graph_residual.py [--iters 300] [--rounds 2] [--out FILE.md]

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    report = table(run(args.iters, args.rounds)) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
