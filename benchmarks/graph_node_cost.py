"""Where a probed CUDA graph's extra time goes, node by node, from two runs' timelines.

    python benchmarks/graph_node_cost.py BASE_TRACE PROBED_TRACE [--top 12]

Both runs replay the same graph with every replay recorded node by node (`NEUTRINO_TIMELINE_GRAPH_NODES`
larger than the replays; the base run probes nothing, e.g. `-k neutrino_matches_no_kernel`). For each run the
executable graph with the most node-by-node replays is taken; its replays' kernel records, ordered by start,
give each node position a duration (end − start) and a gap (its start − the previous node's end; the first
node's gap is 0). Per position, the medians over replays; the table lists the positions whose duration or gap
grew most, then the sums: Σ Δ duration + Σ Δ gap against Δ of the median replay span (first start to last
end). Positions are matched by order; the script refuses runs whose node names differ. Kernels of ours in the
graph (an append node, `__neutrino_*`) are left out of the positions and of the span (one between the
program's nodes shows in the gap after it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from neutrino.timeline import KERNEL, read_timeline  # noqa: E402
from neutrino.timeline_format import origin  # noqa: E402


def run_dir(path: str) -> Path:
    """The directory holding timeline.bin: PATH itself or the one run below it."""
    p = Path(path)
    if (p / "timeline.bin").exists():
        return p
    found = sorted(q.parent for q in p.rglob("timeline.bin"))
    if len(found) != 1:
        sys.exit(f"{path}: expected one timeline.bin below it, found {len(found)}")
    return found[0]


def node_table(path: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(names, durations[replay, node], gaps[replay, node], spans[replay]) of the graph with the most
    node-by-node replays, in ns; replays whose node count differs from the most common one are left out."""
    t = read_timeline(run_dir(path))
    t = t[(t["kind"] == KERNEL) & (t["graph_exec"] > 0) & (t["graph_replay"] > 0)]
    if not len(t):
        sys.exit(f"{path}: no graph node records (was NEUTRINO_TIMELINE_GRAPH_NODES set?)")
    graphs, counts = np.unique(t["graph_exec"], return_counts=True)
    g = t[t["graph_exec"] == graphs[np.argmax(counts)]]
    replays = {}
    for r in np.unique(g["graph_replay"]):
        rows = g[g["graph_replay"] == r]
        replays[int(r)] = rows[np.argsort(rows["start_ns"], kind="stable")]
    sizes = np.array([len(v) for v in replays.values()])
    width = int(np.bincount(sizes).argmax())
    kept = [v for v in replays.values() if len(v) == width][1:]  # the first replay warms caches
    kept = [v[~np.char.startswith(v["name"].astype(str), "__neutrino")] for v in kept]  # (an append node of ours)
    names = list(kept[0]["name"])
    start = np.array([v["start_ns"].astype(np.int64) for v in kept])
    end = np.array([v["end_ns"].astype(np.int64) for v in kept])
    gaps = np.zeros_like(start)
    gaps[:, 1:] = start[:, 1:] - end[:, :-1]
    return names, end - start, gaps, end.max(axis=1) - start[:, 0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("probed")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args(argv)
    names_a, dur_a, gap_a, span_a = node_table(a.base)
    names_b, dur_b, gap_b, span_b = node_table(a.probed)
    if names_a != names_b:
        sys.exit(f"the runs' graphs differ: {len(names_a)} nodes against {len(names_b)}, or other names")
    md_a, md_b = np.median(dur_a, 0) / 1e3, np.median(dur_b, 0) / 1e3
    mg_a, mg_b = np.median(gap_a, 0) / 1e3, np.median(gap_b, 0) / 1e3
    print(f"replays: base {len(span_a)}, probed {len(span_b)}; nodes {len(names_a)}")
    print(f"median replay span: base {np.median(span_a) / 1e3:.2f} µs, probed {np.median(span_b) / 1e3:.2f} µs, "
          f"Δ {np.median(span_b) / 1e3 - np.median(span_a) / 1e3:+.2f} µs")
    print(f"Σ median duration: base {md_a.sum():.2f}, probed {md_b.sum():.2f}, Δ {md_b.sum() - md_a.sum():+.2f} µs")
    print(f"Σ median gap:      base {mg_a.sum():.2f}, probed {mg_b.sum():.2f}, Δ {mg_b.sum() - mg_a.sum():+.2f} µs")
    for who in sorted({origin(n) for n in names_a}):
        sel = np.array([origin(n) == who for n in names_a])
        print(f"  {who:8s} nodes {sel.sum():3d}: Δ duration {(md_b - md_a)[sel].sum():+.2f} µs, "
              f"Δ gap before them {(mg_b - mg_a)[sel].sum():+.2f} µs")
    order = np.argsort(-((md_b - md_a) + (mg_b - mg_a)))[:a.top]
    print(f"{'pos':>4} {'origin':8} {'dur base':>9} {'dur probed':>10} {'Δdur':>7} {'gap base':>9} "
          f"{'gap probed':>10} {'Δgap':>7}  name")
    for i in order:
        print(f"{i:4d} {origin(names_a[i]):8} {md_a[i]:9.2f} {md_b[i]:10.2f} {md_b[i] - md_a[i]:+7.2f} "
              f"{mg_a[i]:9.2f} {mg_b[i]:10.2f} {mg_b[i] - mg_a[i]:+7.2f}  {names_a[i][:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
