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
from neutrino.maps import TraceError

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
    """One executable graph of the run (graph_exec): its replays as the shim launched them (timeline_graphs.tsv)
    and as timeline.bin recorded them, node by node (sampled) and whole."""

    graph: int  # graph_exec: the shim's number of the executable graph
    sampled: int  # replays recorded node by node (with kernel records; a graph without any: with node records)
    whole: int  # replays recorded whole (one record each)
    whole_ns: int  # their total GPU time
    whole_mean_ns: float
    sampled_mean_ns: float  # a sampled replay's span, first node's start to last node's end, mean
    nodes: float  # node records per sampled replay, mean
    top: tuple  # (name, mean ns per sampled replay), by that time, largest first (at most 3)
    launched: tuple | None = None  # timeline_graphs.tsv: (replays, node_replays, quiet_replays, whole_replays)
    has_kernels: bool = True  # some sampled replay has a kernel record (else the graph has copies/memsets only)

    @property
    def quiet(self) -> int | None:
        """Replays launched quiet (kernel records off): in no row; None without timeline_graphs.tsv."""
        return None if self.launched is None else self.launched[2]

    @property
    def quiet_estimate_ns(self) -> float | None:
        """An estimate of the quiet replays' GPU time: sampled_mean_ns x quiet (spec/tools.md); None when it
        cannot be made (no file, no quiet or no sampled replay, or a graph without kernel records)."""
        if not self.quiet or not self.sampled or not self.has_kernels:
            return None
        return self.sampled_mean_ns * self.quiet


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
    graphs: tuple = ()  # GraphTime of each executable graph with a replay launched or recorded, by graph number
    counted: bool = False  # the run has timeline_graphs.tsv: quiet replays are counted
    counts_error: str = ""  # timeline_graphs.tsv could not be read (the TraceError): quiet replays not counted

    @property
    def quiet(self) -> int:
        """Graph replays launched quiet: in no row, busy time or window."""
        return sum(g.quiet or 0 for g in self.graphs)

    @property
    def quiet_estimate_ns(self) -> float | None:
        known = [g.quiet_estimate_ns for g in self.graphs if g.quiet_estimate_ns is not None]
        return sum(known) if known else None


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


def graph_times(timeline: np.ndarray, counts: np.ndarray | None = None) -> tuple:
    """Per executable graph with a replay recorded (graph_exec > 0 node records, or kind-4 records of any
    graph_exec) or launched (`counts`: neutrino.timeline.read_graph_counts): its replays recorded whole, what
    its sampled replays (recorded node by node) say about its nodes, and its counts as launched. A sampled
    replay is one with a kernel record; in a graph with no kernel record at all, one with a node record (a
    quiet replay's copies and memsets are recorded, spec/runtime.md "Graph replays"). Records without GPU
    time are left out."""
    if "graph_exec" not in (timeline.dtype.names or ()):
        return ()
    timed = timeline[has_gpu_time(timeline) & ((timeline["flags"] & FLAG_GRAPH) != 0)]
    whole = timed[timed["kind"] == KIND_GRAPH]
    nodes = _sampled_records(timed[(timed["kind"] != KIND_GRAPH) & (timed["graph_exec"] > 0)])
    launched = {} if counts is None else {int(r["graph_exec"]): tuple(int(r[c]) for c in counts.dtype.names[1:])
                                          for r in counts if int(r["replays"])}
    graphs = sorted(set(whole["graph_exec"].tolist()) | set(nodes["graph_exec"].tolist()) | set(launched))
    whole_by = _whole_by_graph(whole)
    sampled_by = _sampled_by_graph(nodes)
    out = []
    for g in graphs:
        n_whole, whole_ns = whole_by.get(g, (0, 0))
        n, mean_span, per_replay, top, has_kernels = sampled_by.get(g, (0, 0.0, 0.0, (), True))
        out.append(GraphTime(graph=int(g), sampled=n, whole=n_whole, whole_ns=whole_ns,
                             whole_mean_ns=whole_ns / n_whole if n_whole else 0.0, sampled_mean_ns=mean_span,
                             nodes=per_replay, top=top, launched=launched.get(g), has_kernels=has_kernels))
    return tuple(out)


def _replay_keys(records: np.ndarray) -> np.ndarray:
    return (records["graph_exec"].astype(np.uint64) << np.uint64(32)) | records["graph_replay"].astype(np.uint64)


def _sampled_records(nodes: np.ndarray) -> np.ndarray:
    """The node records of sampled replays: those of the replays with a kernel record, and every node record
    of a graph without any kernel record."""
    is_kernel = nodes["kind"] == KIND_KERNEL
    keys = _replay_keys(nodes)
    keep = np.isin(keys, np.unique(keys[is_kernel])) | ~np.isin(nodes["graph_exec"], np.unique(nodes["graph_exec"][is_kernel]))
    return nodes[keep]


def _whole_by_graph(whole: np.ndarray) -> dict[int, tuple[int, int]]:
    """graph_exec -> (replays recorded whole, Σ their end − start)."""
    graphs, inverse, n = np.unique(whole["graph_exec"], return_inverse=True, return_counts=True)
    totals = np.zeros(len(graphs), np.int64)  # exact sums (float weights would round past 2^53 ns)
    np.add.at(totals, inverse.reshape(-1), whole["end_ns"].astype(np.int64) - whole["start_ns"].astype(np.int64))
    return {int(g): (int(c), int(t)) for g, c, t in zip(graphs.tolist(), n.tolist(), totals.tolist())}


def _sampled_by_graph(nodes: np.ndarray) -> dict[int, tuple]:
    """graph_exec -> (sampled replays, their mean span, node records per replay, top 3 names by time per
    replay, whether it has kernel records), one pass over the records (no loop per graph or replay)."""
    if len(nodes) == 0:
        return {}
    start, end = nodes["start_ns"].astype(np.int64), nodes["end_ns"].astype(np.int64)
    replays, inverse = np.unique(_replay_keys(nodes), return_inverse=True)
    inverse = inverse.reshape(-1)
    first = np.full(len(replays), np.iinfo(np.int64).max)
    last = np.full(len(replays), np.iinfo(np.int64).min)
    np.minimum.at(first, inverse, start)
    np.maximum.at(last, inverse, end)
    replay_graph = (replays >> np.uint64(32)).astype(np.int64)
    graphs, graph_of_replay = np.unique(replay_graph, return_inverse=True)
    graph_of_replay = graph_of_replay.reshape(-1)
    n = np.bincount(graph_of_replay, minlength=len(graphs))
    spans = np.bincount(graph_of_replay, weights=(last - first).astype(np.float64), minlength=len(graphs))
    graph_of_record = graph_of_replay[inverse]
    records = np.bincount(graph_of_record, minlength=len(graphs))
    kernels = np.bincount(graph_of_record, weights=(nodes["kind"] == KIND_KERNEL), minlength=len(graphs))
    names, name_of = np.unique(activity_names(nodes).astype(str), return_inverse=True)
    pairs, pair_of = np.unique(graph_of_record * len(names) + name_of.reshape(-1), return_inverse=True)
    pair_ns = np.bincount(pair_of.reshape(-1), weights=(end - start).astype(np.float64), minlength=len(pairs))
    tops: dict[int, list] = {}
    for pair, ns in zip(pairs.tolist(), pair_ns.tolist()):  # one entry per (graph, name) present
        tops.setdefault(pair // len(names), []).append((-ns, str(names[pair % len(names)])))
    out = {}
    for i, g in enumerate(graphs.tolist()):
        count = int(n[i])
        top = tuple((name, -neg / count) for neg, name in sorted(tops.get(i, []))[:3])
        out[g] = (count, float(spans[i]) / count, float(records[i]) / count, top, bool(kernels[i]))
    return out


def summarize(timeline: np.ndarray, ranges: np.ndarray | None,
              hosts: dict[int, tuple[int, int]] | None = None, counts: np.ndarray | None = None) -> Context:
    """The context table of one run (spec/analysis.md, "Where GPU time went"); `hosts`: read_launch_hosts;
    `counts`: neutrino.timeline.read_graph_counts (None: the run has no timeline_graphs.tsv)."""
    start = timeline["start_ns"].astype(np.int64)
    end = np.maximum(timeline["end_ns"].astype(np.int64), start)
    kind = timeline["kind"]
    if len(timeline) == 0:
        return Context(0, 0, 0, 0, 0, 0, 0, 0 if ranges is None else len(ranges), (),
                       graphs=graph_times(timeline, counts), counted=counts is not None)
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
                   rows=tuple(rows), untimed=int(np.count_nonzero(~timed)), graphs=graph_times(timeline, counts),
                   counted=counts is not None)


def load(run_dir) -> Context | None:
    """The context of a run directory; None when it has no timeline.bin."""
    if not run_dir or not os.path.isdir(run_dir):
        return None
    timeline = read_timeline(run_dir, untimed=True, graphs=True)
    if timeline is None:
        return None
    counts, error = read_graph_counts(run_dir)
    return attrs.evolve(summarize(timeline, read_ranges(run_dir), read_launch_hosts(run_dir), counts),
                        counts_error=error)


def read_graph_counts(run_dir) -> tuple[np.ndarray | None, str]:
    """(timeline_graphs.tsv's rows or None when absent, "" or the TraceError's message when it cannot be read):
    a bad file costs the quiet counts, not the section."""
    try:
        return run_timeline.read_graph_counts(run_dir), ""
    except TraceError as e:
        return None, str(e)


def render(ctx: Context, top: int = 15) -> list[str]:
    """The report's opening section: a headline and the top rows by total GPU time."""
    from neutrino.analysis.tables import format_table, short

    whole = f", {sum(g.whole for g in ctx.graphs)} graph replay(s) recorded whole" if any(g.whole for g in ctx.graphs) else ""
    quiet = f", {ctx.quiet} graph replay(s) quiet (not recorded)" if ctx.quiet else ""
    head = (f"[where GPU time went] {ctx.kernels} kernel launch(es) ({ctx.probed} probed), {ctx.copies} copies, "
            f"{ctx.memsets} memsets{whole}{quiet} on {ctx.devices} device(s): GPU busy {ctx.busy_ns / 1e3:.1f} us "
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
    out += quiet_lines(ctx)
    if not ctx.ranges:
        out.append("(no ranges recorded: ranges.bin is absent or empty)")
    out += render_graphs(ctx.graphs)
    return out


def quiet_lines(ctx: Context) -> list[str]:
    """What the rows above leave out: the graph replays launched quiet (timeline_graphs.tsv), or that they could
    not be counted."""
    if ctx.counts_error:
        return ["(timeline_graphs.tsv could not be read (see the warning): graph replays launched quiet (not "
                "recorded) are not counted, and this table may leave some out)"]
    if not ctx.quiet:
        return []
    estimate = ctx.quiet_estimate_ns
    guess = ("no estimate of their GPU time (no sampled replay of their graphs)" if estimate is None else
             f"their GPU time is ESTIMATED at {estimate / 1e3:.1f} us (per graph: its sampled replays' mean span x "
             "its quiet replays; not in busy or share)")
    return [f"({ctx.quiet} graph replay(s) quiet: launched with kernel records off, so their kernels are in no row "
            f"above, nor in GPU busy, share or the window (their copies and memsets are); {guess})"]


def render_graphs(graphs: tuple) -> list[str]:
    """Per executable graph, its replays as launched (timeline_graphs.tsv, when the run has it) and as recorded
    (node by node: sampled; whole: `[graph #N replay]` rows), and its kernels as its sampled replays showed them."""
    if not graphs:
        return []
    from neutrino.analysis.tables import format_table, short

    counted = any(g.launched is not None for g in graphs)

    def cell(value, fmt="{}"):
        return "-" if value is None else fmt.format(value)

    headers, rows = ["graph"] + (["replays"] if counted else []) + ["sampled"] + (["quiet"] if counted else []) + \
        ["whole", "whole mean (us)", "sampled mean (us)", "kernels"] + (["quiet est. (us)"] if counted else []) + \
        ["top kernels, sampled (us per replay)"], []
    for g in graphs:
        row = [f"#{g.graph}" if g.graph else "?"] + ([cell(g.launched and g.launched[0])] if counted else [])
        row += [str(g.sampled)] + ([cell(g.quiet)] if counted else [])
        row += [str(g.whole), f"{g.whole_mean_ns / 1e3:.2f}" if g.whole else "-",
                f"{g.sampled_mean_ns / 1e3:.2f}" if g.sampled else "-", f"{g.nodes:.1f}" if g.sampled else "-"]
        if counted:
            row.append(cell(None if g.quiet_estimate_ns is None else g.quiet_estimate_ns / 1e3, "{:.1f}"))
        row.append(", ".join(f"{short(name, 40)} {ns / 1e3:.2f}" for name, ns in g.top) or "-")
        rows.append(row)
    whole = sum(g.whole for g in graphs)
    out = [f"({whole} graph replay(s) recorded whole, one record each: their kernels are not in the rows above)"] if whole else []
    launched = "launched (timeline_graphs.tsv), " if counted else ""
    quiet = ", quiet (not recorded)" if counted else ""
    out += [f"(graph replays {launched}recorded node by node (sampled){quiet} and recorded whole; "
            "per graph, what its sampled replays (recorded node by node) showed, per replay:)",
            format_table(headers, rows, left=(0, len(headers) - 1))]
    return out


def numbers(ctx: Context) -> list[dict]:
    """The rows as numbers, for `report --format json` (`gpu_time`)."""
    return [{"name": r.name, "origin": r.origin, "count": r.count, "probed": r.probed, "total_ns": r.total_ns,
             "share": r.share, "mean_ns": r.mean_ns, "range": r.range or None, "range_launches": r.range_launches}
            for r in ctx.rows]


def graph_numbers(ctx: Context) -> list[dict]:
    """The executable graphs, as numbers (`report --format json`: `graph_replays`)."""
    return [{"graph": g.graph, "sampled_replays": g.sampled, "whole_replays": g.whole, "whole_ns": g.whole_ns,
             "whole_mean_ns": g.whole_mean_ns, "sampled_mean_ns": g.sampled_mean_ns, "kernels_per_replay": g.nodes,
             "top_sampled": [{"name": n, "ns_per_replay": ns} for n, ns in g.top],
             "launched": None if g.launched is None else dict(zip(run_timeline.GRAPH_COUNT_COLUMNS[1:], g.launched)),
             "quiet_replays": g.quiet, "quiet_estimate_ns": g.quiet_estimate_ns} for g in ctx.graphs]
