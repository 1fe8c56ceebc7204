"""The report's graph replays at scale: a synthetic run of G executable graphs, each replayed R times with K
kernel nodes, of which the first 3 and every 100th replay are recorded node by node (the shim's default since
issue 24) and the others quiet; timeline.bin and timeline_graphs.tsv written per spec/trace-format.md. Times
neutrino.analysis.context.graph_times (the per-graph table) and context.load (the whole "Where GPU time went"
section) on it, best of --repeat, in one process.

    python benchmarks/graph_replays_scale.py                          # 5,000 graphs x 1,000 replays x 4 kernels
    python benchmarks/graph_replays_scale.py --graphs 500 --replays 100000

Prints a Markdown row (docs/analysis-scale.md, "Graph replays"): records, graphs, sampled replays, quiet replays,
seconds for graph_times and for load. The quiet count printed is read back from the report and checked against
the known answer (G x (R - sampled per graph)).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neutrino import timeline as T  # noqa: E402
from neutrino.analysis import context  # noqa: E402


def sampled_replays(replays: int, first: int = 3, every: int = 100) -> np.ndarray:
    r = np.arange(1, replays + 1)
    return r[(r <= first) | (r % every == 0)]


def write_run(run: Path, graphs: int, replays: int, kernels: int) -> tuple[int, int, int]:
    """(records, sampled replays, quiet replays) of the run written to `run`."""
    sampled = sampled_replays(replays)
    g = np.repeat(np.arange(1, graphs + 1), len(sampled) * kernels)
    r = np.tile(np.repeat(sampled, kernels), graphs)
    k = np.tile(np.arange(kernels), graphs * len(sampled))
    recs = np.zeros(len(g), T.RECORD)
    recs["kind"], recs["flags"], recs["stream"], recs["tid"] = T.KERNEL, T.FLAG_GRAPH, 7, 100
    start = 1_000_000 + (np.arange(len(g)) // kernels) * 10_000 + k * 1_000  # one replay every 10 us, 1 us per node
    recs["start_ns"], recs["end_ns"] = start, start + 800
    recs["name_id"], recs["probe_launch"] = k, -1
    recs["graph_exec"], recs["graph_replay"] = g, r
    run.mkdir(parents=True, exist_ok=True)
    (run / "timeline.bin").write_bytes(T.MAGIC + np.array([T.VERSION, T.RECORD.itemsize], "<u4").tobytes() + recs.tobytes())
    (run / "timeline_names.txt").write_text("".join(f"kernel_{i}\n" for i in range(kernels)))
    quiet = replays - len(sampled)
    rows = "".join(f"{i}\t{replays}\t{len(sampled)}\t{quiet}\t0\n" for i in range(1, graphs + 1))
    (run / T.GRAPHS_FILE).write_text("\t".join(T.GRAPH_COUNT_COLUMNS) + "\n" + rows)
    return len(recs), graphs * len(sampled), graphs * quiet


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=5000)
    ap.add_argument("--replays", type=int, default=1000)
    ap.add_argument("--kernels", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        n, sampled, quiet = write_run(run, a.graphs, a.replays, a.kernels)
        tl = context.read_timeline(run, untimed=True, graphs=True)
        counts = T.read_graph_counts(run)
        t_graphs, graphs = best(lambda: context.graph_times(tl, counts), a.repeat)
        t_load, ctx = best(lambda: context.load(run), a.repeat)
    assert ctx.quiet == quiet and sum(g.sampled for g in graphs) == sampled, (ctx.quiet, quiet)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"numpy {np.__version__}")
    print("| records | graphs | sampled replays | quiet replays | graph_times (s) | context.load (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| {n:,} | {a.graphs:,} | {sampled:,} | {quiet:,} | {t_graphs:.2f} | {t_load:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
