"""Where GPU time went: the context tables of a run (timeline.bin, ranges.bin) for `report` and `export`.

The readers follow spec/trace-format.md, "Context tables". The runtime's own
readers (`neutrino.timeline.read_timeline`, `neutrino.ranges.read_ranges`)
are used when they exist; `_read_timeline_file` and `_read_ranges_file` are
numpy parsers of the same contract so that analysis works on its own.

The report's first section (spec/analysis.md, "Where GPU time went") groups
every kernel, copy and memset of timeline.bin by name: count, total time,
share of the GPU's busy time, mean, origin, and the innermost range that the
launches ran under (the range on the launching thread that holds the
launch call's host time, `host_ns`; for records without one, the launch
arguments' host time of a probed launch, else the kernel's GPU start).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import attrs
import numpy as np

from neutrino import ranges as run_ranges  # the one reader of ranges.bin and launch_args.jsonl
from neutrino import timeline as run_timeline  # the one reader of timeline.bin

KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET = run_timeline.KERNEL, run_timeline.MEMCPY, run_timeline.MEMSET
KIND_GRAPH = run_timeline.GRAPH_REPLAY  # a graph replay recorded whole (one record, its nodes not recorded)
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 10: "PtoP"}
FLAG_PROBED, FLAG_GRAPH = run_timeline.FLAG_PROBED, run_timeline.FLAG_GRAPH
RANGES_DTYPE = run_ranges.record_dtype()
has_gpu_time = run_timeline.has_gpu_time
query_points = run_ranges.timeline_query_points
read_launch_hosts = run_ranges.read_launch_hosts


def read_timeline(run_dir, *, untimed: bool = False, graphs: bool = False) -> np.ndarray | None:
    """neutrino.timeline's records of the run (records without GPU time only with untimed=True; graph replays
    recorded whole, kind KIND_GRAPH, only with graphs=True); None when the run has no timeline.bin."""
    if not (Path(run_dir) / "timeline.bin").exists():
        return None
    return run_timeline.read_timeline(run_dir, untimed=untimed, graphs=graphs)


def read_ranges(run_dir) -> np.ndarray | None:
    """neutrino.ranges' records of the run; None when the run has no ranges.bin."""
    if not (Path(run_dir) / "ranges.bin").exists():
        return None
    return run_ranges.read_ranges(run_dir)


def origin(name: str) -> str:
    """The library a kernel comes from, by its name: cuBLAS, cuDNN, NCCL, ATen, Triton, XLA, CUTLASS or other
    (`neutrino.timeline.origin`, the contract's classifier)."""
    return run_timeline.origin(name)


def busy_ns(start: np.ndarray, end: np.ndarray, device: np.ndarray) -> int:
    """GPU busy time: per device, the length of the union of the activity intervals; summed over devices."""
    total = 0
    for d in np.unique(device):
        sel = device == d
        s, e = start[sel].astype(np.int64), end[sel].astype(np.int64)
        order = np.argsort(s, kind="stable")
        s, e = s[order], np.maximum.accumulate(e[order])  # the reach so far: overlaps merge
        gaps = np.maximum(s[1:] - e[:-1], 0)
        total += int(e[-1] - s[0] - gaps.sum())
    return total


def innermost_ranges(ranges: np.ndarray | None, tid: np.ndarray, time_ns: np.ndarray) -> np.ndarray:
    """Per query (tid, time), the index in `ranges` of the innermost range on thread `tid` whose
    [start, end) holds the time, -1 for none (tid 0 = unknown: none). Nesting is by thread: the
    open range that started last holds the query. One sweep per thread: linear after sorting."""
    out = np.full(len(tid), -1, dtype=np.int64)
    if ranges is None or len(ranges) == 0 or len(tid) == 0:
        return out
    for t in np.unique(tid):
        if t == 0:
            continue
        mine = np.flatnonzero(ranges["tid"] == t)
        if len(mine) == 0:
            continue
        mine = mine[np.lexsort((-ranges["end_ns"][mine].astype(np.int64), ranges["start_ns"][mine]))]
        starts, ends = ranges["start_ns"][mine].tolist(), ranges["end_ns"][mine].tolist()
        queries = np.flatnonzero(tid == t)
        queries = queries[np.argsort(time_ns[queries], kind="stable")]
        stack, k = [], 0
        for q, when in zip(queries.tolist(), time_ns[queries].tolist()):
            while k < len(starts) and starts[k] <= when:
                stack.append(k)
                k += 1
            while stack and ends[stack[-1]] <= when:
                stack.pop()
            # a closed range below the top (not nested) is dropped when it surfaces
            out[q] = mine[stack[-1]] if stack else -1
    return out


@attrs.frozen
class KernelTime:
    """One row of the context table: the activities of one name."""

    name: str
    origin: str
    count: int
    probed: int  # launches that ran Neutrino's probed code (flags bit 0)
    total_ns: int
    share: float  # total_ns / the GPU's busy time
    mean_ns: float
    range: str  # the innermost enclosing range most launches ran under ("" for none)
    range_launches: int  # how many launches ran under that range


@attrs.frozen
class GraphTime:
    """One executable graph of the run (graph_exec): its replays recorded node by node (sampled) and whole."""

    graph: int  # graph_exec: the shim's number of the executable graph
    sampled: int  # replays with node records
    whole: int  # replays recorded whole (one record each)
    whole_ns: int  # their total GPU time
    whole_mean_ns: float
    sampled_mean_ns: float  # a sampled replay's span, first node's start to last node's end, mean
    nodes: float  # kernel records per sampled replay, mean
    top: tuple  # (kernel name, mean ns per sampled replay), by that time, largest first (at most 3)


@attrs.frozen
class Context:
    kernels: int  # kernel records
    probed: int  # kernel records that ran probed code
    copies: int
    memsets: int
    busy_ns: int
    window_ns: int  # last end - first start over the records with GPU time
    devices: int
    ranges: int  # ranges in ranges.bin (0: none recorded)
    rows: tuple  # KernelTime, by total time, largest first
    untimed: int = 0  # records without GPU time (flags bit 2, or a 0 time): counted, in no time sum
    graphs: tuple = ()  # GraphTime of each executable graph with a replay recorded whole, by graph number


def activity_names(timeline: np.ndarray) -> np.ndarray:
    """Kernels by name; copies `[memcpy HtoD]`…; memsets `[memset]`."""
    names = timeline["name"].astype(object)
    kind = timeline["kind"]
    copy = [f"[memcpy {COPY_KINDS.get(int(k), k)}]" for k in timeline["copy_kind"][kind == KIND_MEMCPY]]
    names = names.copy()
    names[kind == KIND_MEMCPY] = np.array(copy, dtype=object) if copy else names[kind == KIND_MEMCPY]
    names[kind == KIND_MEMSET] = "[memset]"
    whole = np.flatnonzero(kind == KIND_GRAPH)
    if len(whole):
        execs = timeline["graph_exec"][whole].tolist() if "graph_exec" in timeline.dtype.names else [0] * len(whole)
        names[whole] = np.array([f"[graph #{g} replay]" if g else "[graph replay]" for g in execs], dtype=object)
    return names


def graph_times(timeline: np.ndarray) -> tuple:
    """Per executable graph with replays recorded whole: those replays' time, and what its sampled replays
    (node records of the same graph_exec) say about its nodes. Records without GPU time are left out."""
    if "graph_exec" not in (timeline.dtype.names or ()):
        return ()
    timed = timeline[has_gpu_time(timeline) & ((timeline["flags"] & FLAG_GRAPH) != 0)]
    out = []
    for g in np.unique(timed["graph_exec"][timed["kind"] == KIND_GRAPH]).tolist():
        mine = timed[timed["graph_exec"] == g]
        whole = mine[mine["kind"] == KIND_GRAPH]
        nodes = mine[mine["kind"] != KIND_GRAPH]
        whole_ns = int((whole["end_ns"].astype(np.int64) - whole["start_ns"].astype(np.int64)).sum())
        replays = np.unique(nodes["graph_replay"]) if g else np.zeros(0)
        spans, per_name = [], Counter()
        for r in replays.tolist():
            rec = nodes[nodes["graph_replay"] == r]
            spans.append(int(rec["end_ns"].max()) - int(rec["start_ns"].min()))
        for name, dur in zip(activity_names(nodes).tolist(),
                             (nodes["end_ns"].astype(np.int64) - nodes["start_ns"].astype(np.int64)).tolist()):
            per_name[name] += dur
        n = len(replays)
        top = tuple((name, total / n) for name, total in sorted(per_name.items(), key=lambda kv: (-kv[1], kv[0]))[:3]) if n else ()
        out.append(GraphTime(graph=int(g), sampled=n, whole=len(whole), whole_ns=whole_ns,
                             whole_mean_ns=whole_ns / len(whole), sampled_mean_ns=float(np.mean(spans)) if spans else 0.0,
                             nodes=len(nodes) / n if n else 0.0, top=top))
    return tuple(out)


def summarize(timeline: np.ndarray, ranges: np.ndarray | None,
              hosts: dict[int, tuple[int, int]] | None = None) -> Context:
    """The context table of one run (spec/analysis.md, "Where GPU time went"); `hosts`: read_launch_hosts."""
    start = timeline["start_ns"].astype(np.int64)
    end = np.maximum(timeline["end_ns"].astype(np.int64), start)
    kind = timeline["kind"]
    if len(timeline) == 0:
        return Context(0, 0, 0, 0, 0, 0, 0, 0 if ranges is None else len(ranges), ())
    timed = has_gpu_time(timeline)
    end = np.where(timed, end, start)  # a record without GPU time adds 0 to every sum
    busy = busy_ns(start[timed], end[timed], timeline["device"][timed])
    names = activity_names(timeline)
    enclosing = innermost_ranges(ranges, *query_points(timeline, hosts or {}))
    range_names = ranges["name"] if ranges is not None and len(ranges) else np.zeros(0, dtype=object)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names.tolist()):
        groups.setdefault(name, []).append(i)
    rows = []
    for name, members in groups.items():
        idx = np.array(members)
        total = int((end[idx] - start[idx]).sum())
        n_timed = int(np.count_nonzero(timed[idx]))
        under = Counter(str(range_names[j]) if j >= 0 else "" for j in enclosing[idx].tolist())
        top, top_n = max(under.items(), key=lambda kv: (kv[1], kv[0] != ""))
        row_origin = (origin(name) if kind[idx[0]] == KIND_KERNEL else "copy" if kind[idx[0]] == KIND_MEMCPY
                      else "graph" if kind[idx[0]] == KIND_GRAPH else "memset")
        rows.append(KernelTime(name=name, origin=row_origin, count=len(idx),
                               probed=int(np.count_nonzero(timeline["flags"][idx] & FLAG_PROBED)),
                               total_ns=total, share=total / busy if busy else float("nan"),
                               mean_ns=total / n_timed if n_timed else 0.0, range=top,
                               range_launches=top_n))
    rows.sort(key=lambda r: (-r.total_ns, r.name))
    is_kernel = kind == KIND_KERNEL
    return Context(kernels=int(is_kernel.sum()), probed=int(np.count_nonzero(timeline["flags"][is_kernel] & FLAG_PROBED)),
                   copies=int((kind == KIND_MEMCPY).sum()), memsets=int((kind == KIND_MEMSET).sum()),
                   busy_ns=busy, window_ns=int(end[timed].max() - start[timed].min()) if timed.any() else 0,
                   devices=len(np.unique(timeline["device"])), ranges=0 if ranges is None else len(ranges),
                   rows=tuple(rows), untimed=int(np.count_nonzero(~timed)), graphs=graph_times(timeline))


def load(run_dir) -> Context | None:
    """The context of a run directory; None when it has no timeline.bin."""
    if not run_dir or not os.path.isdir(run_dir):
        return None
    timeline = read_timeline(run_dir, untimed=True, graphs=True)
    if timeline is None:
        return None
    return summarize(timeline, read_ranges(run_dir), read_launch_hosts(run_dir))


def render(ctx: Context, top: int = 15) -> list[str]:
    """The report's opening section: a headline and the top rows by total GPU time."""
    from neutrino.analysis.tables import format_table, short

    whole = f", {sum(g.whole for g in ctx.graphs)} graph replay(s) recorded whole" if ctx.graphs else ""
    head = (f"[where GPU time went] {ctx.kernels} kernel launch(es) ({ctx.probed} probed), {ctx.copies} copies, "
            f"{ctx.memsets} memsets{whole} on {ctx.devices} device(s): GPU busy {ctx.busy_ns / 1e3:.1f} us "
            f"of a {ctx.window_ns / 1e3:.1f} us window")
    rows = []
    for r in ctx.rows[:top]:
        where = "-" if not r.range else (r.range if r.range_launches == r.count else f"{r.range} ({r.range_launches}/{r.count})")
        rows.append([short(r.name), r.origin, str(r.count), str(r.probed), f"{r.total_ns / 1e3:.1f}",
                     f"{100 * r.share:.1f}%", f"{r.mean_ns / 1e3:.2f}", short(where, 40)])
    out = [head, format_table(["kernel", "origin", "count", "probed", "total (us)", "share", "mean (us)", "range"],
                              rows, left=(0, 1, 7))]
    rest = ctx.rows[top:]
    if rest:
        out.append(f"({len(rest)} more: {sum(r.total_ns for r in rest) / 1e3:.1f} us, "
                   f"{100 * sum(r.total_ns for r in rest) / ctx.busy_ns:.1f}% of busy time)")
    if ctx.untimed:
        out.append(f"({ctx.untimed} record(s) without GPU time (CUPTI gave no timestamp): counted above, "
                   "left out of every time, share and the window)")
    if not ctx.ranges:
        out.append("(no ranges recorded: ranges.bin is absent or empty)")
    out += render_graphs(ctx.graphs)
    return out


def render_graphs(graphs: tuple) -> list[str]:
    """The graphs with replays recorded whole (`[graph #N replay]` rows): their kernels as the sampled replays
    (each graph's first replays, recorded node by node) showed them."""
    if not graphs:
        return []
    from neutrino.analysis.tables import format_table, short

    whole = sum(g.whole for g in graphs)
    rows = [[f"#{g.graph}" if g.graph else "?", str(g.sampled), str(g.whole), f"{g.whole_mean_ns / 1e3:.2f}",
             f"{g.sampled_mean_ns / 1e3:.2f}" if g.sampled else "-", f"{g.nodes:.1f}" if g.sampled else "-",
             ", ".join(f"{short(name, 40)} {ns / 1e3:.2f}" for name, ns in g.top) or "-"] for g in graphs]
    return [f"({whole} graph replay(s) recorded whole, one record each: their kernels are not in the rows above; "
            "per graph, what its sampled replays (recorded node by node) showed, per replay:)",
            format_table(["graph", "sampled", "whole", "whole mean (us)", "sampled mean (us)", "kernels",
                          "top kernels, sampled (us per replay)"], rows, left=(0, 6))]


def numbers(ctx: Context) -> list[dict]:
    """The rows as numbers, for `report --format json` (`gpu_time`)."""
    return [{"name": r.name, "origin": r.origin, "count": r.count, "probed": r.probed, "total_ns": r.total_ns,
             "share": r.share, "mean_ns": r.mean_ns, "range": r.range or None, "range_launches": r.range_launches}
            for r in ctx.rows]


def graph_numbers(ctx: Context) -> list[dict]:
    """The graphs with replays recorded whole, as numbers (`report --format json`: `graph_replays`)."""
    return [{"graph": g.graph, "sampled_replays": g.sampled, "whole_replays": g.whole, "whole_ns": g.whole_ns,
             "whole_mean_ns": g.whole_mean_ns, "sampled_mean_ns": g.sampled_mean_ns, "kernels_per_replay": g.nodes,
             "top_sampled": [{"name": n, "ns_per_replay": ns} for n, ns in g.top]} for g in ctx.graphs]
