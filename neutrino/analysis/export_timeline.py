"""The content of `neutrino export --perfetto` (protobuf) and `--merge-into`: one timeline per run.

Times are the context tables' Unix-epoch nanoseconds (spec/trace-format.md).
A probed launch's blocks are placed inside its kernel's timeline.bin interval
(the record whose `probe_launch` is the launch's index): at their
`%globaltimer` times when the probe recorded them and they fall inside that
interval (1 ms slack), else anchored at the kernel's start with their
globaltimer durations; cycle counts (`%clock64`) are scaled so that the
blocks' span fills the interval (SM clocks aligned at each SM's first block).
Without timeline.bin, launches are laid out one after another from the host
time of the run's first `instrument` event (as the JSON export does). Every
placement is counted and said (`Placement`).
"""

from __future__ import annotations

from collections import Counter

import attrs
import numpy as np

from neutrino.analysis import block_sched, context, tool_for, writer_tool
from neutrino.analysis.perfetto_proto import ProtoWriter, warn
from neutrino.errors import NeutrinoError

SLACK_NS = 1_000_000  # a globaltimer block start this far outside its kernel's interval is not on its clock
LAUNCH_GAP_NS = 1000


@attrs.define
class Placement:
    """How the probed launches' blocks were put on the timeline: counts per way, for the summary line."""

    ways: Counter = attrs.Factory(Counter)

    def describe(self) -> str:
        return ", ".join(f"{n} {way}" for way, n in sorted(self.ways.items())) or "no probed launch with blocks"


PLACED_GLOBALTIMER = "at their %globaltimer times"
PLACED_ANCHORED = "globaltimer durations anchored at the kernel's start (values not on the timeline's clock)"
PLACED_SCALED = "cycles scaled into the kernel's timeline interval"
PLACED_NO_TIMELINE = "laid out from the host clock (no timeline.bin: cycles shown at the fitted rate)"


def block_clock(result: block_sched.LaunchResult, start_ns: int, end_ns: int | None) -> tuple[int, int, float, str]:
    """(anchor, first, scale, way): a block time t of `result.timeline` lies at
    anchor + round((t - first) * scale) ns (integers: Unix-epoch ns do not fit a float's 53 bits).
    `end_ns` None: the kernel's interval is unknown (only its start)."""
    tl = result.timeline
    first = int(tl.start.min()) if len(tl) else 0
    span = (int(tl.end.max()) - first) if len(tl) else 0
    if tl.synchronized:
        absolute = int(min(tl.origin.values()) if tl.origin else 0) + first
        if end_ns is not None and start_ns - SLACK_NS <= absolute <= end_ns + SLACK_NS:
            return absolute, first, 1.0, PLACED_GLOBALTIMER
        return int(start_ns), first, 1.0, PLACED_ANCHORED
    if end_ns is None:
        return int(start_ns), first, (1.0 / result.fit_ghz if result.fit_ghz else 1.0), PLACED_NO_TIMELINE
    return int(start_ns), first, ((end_ns - start_ns) / span if span > 0 else 1.0), PLACED_SCALED


class BlockTracks:
    """SM-slot tracks (and warp-rank tracks under them) below a parent track, shared by the launches
    placed under that parent, created on first use."""

    def __init__(self, writer: ProtoWriter):
        self.writer = writer
        self.uuids: dict[tuple, int] = {}

    def get(self, parent: int, sm: int, slot: int, warp: int | None = None) -> int:
        key = (parent, sm, slot, warp)
        if key not in self.uuids:
            name = f"SM {sm}" + (f" #{slot}" if slot else "")
            if warp is None:
                self.uuids[key] = self.writer.track(name, parent=parent, rank=sm * 1000 + slot)
            else:
                self.uuids[key] = self.writer.track(f"{name} w{warp}", parent=self.get(parent, sm, slot),
                                                    rank=warp)
        return self.uuids[key]


def write_blocks(tracks: BlockTracks, parent: int, result: block_sched.LaunchResult,
                 clock: tuple[int, int, float]) -> None:
    """Each block on its SM slot's track, each warp on its rank's track under it (the rank of the warp
    in its block by start); `clock` as block_clock. Encoded a batch at a time (write_slices)."""
    tl = result.timeline
    anchor, first, scale = clock

    def at(t: np.ndarray) -> np.ndarray:
        return anchor + np.rint((t.astype(np.int64) - first) * scale).astype(np.int64)

    def uuids(keys: np.ndarray, make) -> np.ndarray:
        """The track of each row of `keys` (rows of small non-negative ints: SM, slot, warp rank),
        created once per distinct row; rows packed into one int64 (21 bits a column) to sort fast."""
        packed = np.zeros(len(keys), dtype=np.int64)
        for col in range(keys.shape[1]):
            packed = (packed << 21) | keys[:, col]
        distinct, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        return np.array([make(*keys[i].tolist()) for i in first], dtype=np.int64)[inverse.reshape(-1)]

    sm, slot = tl.sm.astype(np.int64), tl.slot.astype(np.int64)
    block_track = uuids(np.stack([sm, slot], axis=1), lambda s, k: tracks.get(parent, s, k))
    unit = "ns" if tl.time_unit == "ns" else "cycles"
    tracks.writer.many(block_track, "block ", tl.block, at(tl.start), at(tl.end),
                 {"launch": np.full(len(tl), result.index), "warps": tl.warps,
                  f"start ({unit})": tl.start, f"end ({unit})": tl.end}, "block")
    if not len(tl.warp_unit):
        return
    wb = tl.warp_block.astype(np.int64)
    first_of_block = np.flatnonzero(np.r_[True, wb[1:] != wb[:-1]])
    rank = np.arange(len(wb)) - np.repeat(first_of_block, np.diff(np.r_[first_of_block, len(wb)]))
    warp_track = uuids(np.stack([sm[wb], slot[wb], rank], axis=1), lambda s, k, r: tracks.get(parent, s, k, r))
    tracks.writer.many(warp_track, "warp ", tl.warp_unit, at(tl.warp_start), at(tl.warp_end),
                 {"block": tl.block[wb]}, "warp")


def write_ranges(writer: ProtoWriter, pid: int, ranges: np.ndarray | None) -> int:
    """Host threads and their ranges: push/pop ranges on the thread's track (they nest); start/end
    ranges (source 2, free to overlap) on slot tracks under it. Returns the ranges written."""
    if ranges is None or len(ranges) == 0:
        return 0
    for tid in np.unique(ranges["tid"]).tolist():
        mine = ranges[ranges["tid"] == tid]
        mine = mine[np.lexsort((-mine["end_ns"].astype(np.int64), mine["start_ns"]))]
        thread = writer.track(f"thread {tid}", pid=pid, tid=int(tid))
        nested = mine[mine["source"] != 2]
        free = mine[mine["source"] == 2]
        for r in nested:
            writer.slice(thread, str(r["name"]), int(r["start_ns"]), int(r["end_ns"]), _range_args(r), category="range")
        if len(free):
            slots, _ = block_sched.assign_slots(np.zeros(len(free), np.int64), free["start_ns"].astype(np.int64),
                                                free["end_ns"].astype(np.int64))
            slot_tracks = {}
            for r, s in zip(free, slots.tolist()):
                if s not in slot_tracks:
                    slot_tracks[s] = writer.track(f"start/end ranges #{s}", parent=thread, rank=s)
                writer.slice(slot_tracks[s], str(r["name"]), int(r["start_ns"]), int(r["end_ns"]), _range_args(r),
                             category="range")
    return len(ranges)


def _range_args(r) -> dict:
    args = {"depth": int(r["depth"]), "source": {1: "nvtx push/pop", 2: "nvtx start/end", 3: "neutrino.annotate"}
            .get(int(r["source"]), int(r["source"]))}
    if r["domain"]:
        args["domain"] = str(r["domain"])
    return args


class StreamTracks:
    """One track per (device, stream); a record that starts before the previous one on its stream
    ended (programmatic dependent launch) goes to an overlap track under it, so slices nest."""

    def __init__(self, writer: ProtoWriter, process: int):
        self.writer, self.process = writer, process
        self.lanes: dict[tuple, list] = {}  # (device, stream) -> [[track uuid, last end]] per lane

    def place(self, device: int, stream: int, start: int, end: int) -> int:
        lanes = self.lanes.get((device, stream))
        if lanes is None:
            uuid = self.writer.track(f"GPU {device} stream {stream}", parent=self.process,
                                     rank=1_000_000 + device * 100_000 + stream)
            lanes = self.lanes[(device, stream)] = [[uuid, 0]]
        for lane in lanes:
            if lane[1] <= start:
                lane[1] = end
                return lane[0]
        uuid = self.writer.track(f"GPU {device} stream {stream} overlap #{len(lanes)}", parent=lanes[0][0],
                                 rank=len(lanes))
        lanes.append([uuid, end])
        return uuid


def write_timeline(writer: ProtoWriter, process: int, timeline: np.ndarray | None,
                   only_probed: bool = False, counts: np.ndarray | None = None) -> dict[int, tuple]:
    """Every kernel, copy and memset on its stream's track (`only_probed`: the probed kernels only, when
    the trace merged into already has the others; `counts`: timeline_graphs.tsv's rows, for the quiet replays
    of each graph). Returns probe launch index -> (stream track, start_ns, end_ns) for the probed kernels."""
    probed: dict[int, tuple] = {}
    if timeline is None:
        return probed
    streams = StreamTracks(writer, process)
    names = context.activity_names(timeline)
    sampled = {g.graph: g for g in context.graph_times(timeline, counts)}
    has_graphs = "graph_exec" in (timeline.dtype.names or ())
    for i in range(len(timeline)):
        rec = timeline[i]
        if only_probed and int(rec["probe_launch"]) < 0:
            continue
        start, end = int(rec["start_ns"]), max(int(rec["start_ns"]), int(rec["end_ns"]))
        track = streams.place(int(rec["device"]), int(rec["stream"]), start, end)
        args = {"correlation": int(rec["correlation"]), "tid": int(rec["tid"])}
        if has_graphs and int(rec["graph_exec"]):
            args.update({"graph": int(rec["graph_exec"]), "graph replay": int(rec["graph_replay"])})
            quiet = getattr(sampled.get(int(rec["graph_exec"])), "quiet", None)
            if quiet is not None:
                args["quiet replays of this graph"] = quiet  # launched unrecorded: on no track
        if rec["kind"] == context.KIND_KERNEL:
            args.update(grid="x".join(map(str, rec["grid"].tolist())), block="x".join(map(str, rec["block"].tolist())),
                        origin=context.origin(str(rec["name"])))
        elif rec["kind"] == context.KIND_GRAPH:
            args.update(graph_replay_args(sampled.get(int(rec["graph_exec"])) if has_graphs else None))
        else:
            args["bytes"] = int(rec["bytes"])
        if int(rec["probe_launch"]) >= 0:
            args["probed launch"] = int(rec["probe_launch"])
            probed[int(rec["probe_launch"])] = (track, start, end)
        writer.slice(track, str(names[i]), start, end, args, category="gpu")
    return probed


def graph_replay_args(graph) -> dict:
    """A replay recorded whole: what the sampled replays of its graph (context.GraphTime) showed of its nodes."""
    if graph is None or not graph.sampled:
        return {"recorded": "whole (one record: its kernels not recorded, and no sampled replay of this graph)"}
    return {"recorded": f"whole (one record); kernels from {graph.sampled} sampled replay(s) of this graph",
            "sampled kernels per replay": round(graph.nodes, 1),
            "sampled replay span (us)": round(graph.sampled_mean_ns / 1e3, 3),
            "sampled top kernels (us per replay)": "; ".join(f"{name} {ns / 1e3:.3f}" for name, ns in graph.top)}


def block_results(trace, launches):
    """(launch, block_sched result or None) per launch, one at a time (a bad launch is warned about)."""
    writer = writer_tool(trace)
    for launch in launches:
        try:
            mds = [md for md in launch.maps.values() if tool_for(md, writer) is block_sched]
            result = block_sched.analyze_launch(launch, mds[0], trace.probe_text) if mds else None
        except NeutrinoError as e:
            warn(f"launch {launch.index} ({launch.kernel}) left out: {e}")
            continue
        finally:
            _release(launch)
        yield launch, result


def _release(launch) -> None:
    """Forget the launch's result file once read: a Launch keeps it (and its memory maps) otherwise, and
    memory would grow with the trace."""
    if getattr(launch, "_result", None) is not None:
        launch._result = None


def write_probed(writer: ProtoWriter, process: int, trace, launches, kernels: dict[int, tuple],
                 placement: Placement) -> None:
    """The probed launches' blocks and warps, under their kernel's stream track (timeline.bin), else
    on a `probed launches` track laid out from the run's host anchor."""
    from neutrino.analysis.ranks import anchor_ns

    tracks = BlockTracks(writer)
    fallback, cursor = None, int(anchor_ns(trace))
    for launch, result in block_results(trace, launches):
        known = kernels.get(int(launch.index))
        if known is not None:
            if result is not None and len(result.timeline):
                *clock, way = block_clock(result, known[1], known[2])
                write_blocks(tracks, known[0], result, clock)
                placement.ways[way] += 1
            continue
        has_blocks = result is not None and len(result.timeline) > 0
        duration = int(launch.duration_ns) if launch.duration_ns else None
        if not has_blocks and not duration:
            continue  # nothing to show: no blocks, no measured time
        if fallback is None:
            fallback = writer.track("probed launches", parent=process, rank=0,
                                    description="no timeline.bin record for these launches: laid out one after "
                                                "another from the host time of the first instrumented kernel")
        if has_blocks:
            *clock, way = block_clock(result, cursor, None)
            span = int(round((int(result.timeline.end.max()) - int(result.timeline.start.min())) * clock[2]))
            duration = max(duration or 0, span)
            write_blocks(tracks, fallback, result, clock)
            placement.ways[way] += 1
        writer.slice(fallback, launch.kernel, cursor, cursor + duration,
                     {"launch": int(launch.index), "measured": launch.duration_ns is not None}, category="launch")
        cursor += duration + LAUNCH_GAP_NS


def write_run(writer: ProtoWriter, pid: int, label: str, trace, launches, placement: Placement,
              only_probed: bool = False) -> dict:
    """One run (a rank, a process, or the only run) as one Perfetto process. Returns its counts.
    `writer`: a ProtoWriter, or anything with its `track` and `slice` (kineto.JsonWriter)."""
    process = writer.track(label, pid=pid, process_name=label)
    run_dir = str(getattr(trace, "path", ""))
    timeline = ranges = None
    try:
        timeline = context.read_timeline(run_dir, graphs=True)
        ranges = context.read_ranges(run_dir)
    except (NeutrinoError, OSError, ValueError) as e:
        warn(f"{label}: context tables left out: {e}")
    counts, error = context.read_graph_counts(run_dir) if timeline is not None else (None, "")
    if error:
        warn(f"{label}: quiet graph replays not counted: {error}")
    n_ranges = write_ranges(writer, pid, ranges)
    kernels = write_timeline(writer, process, timeline, only_probed, counts)
    write_probed(writer, process, trace, launches, kernels, placement)
    return {"timeline": 0 if timeline is None else len(timeline), "ranges": n_ranges}


def export_protobuf(trace_dir: str, out_path: str) -> str:
    """Write the Perfetto protobuf trace of a run or a job (one process per rank, pid = rank + 1);
    returns the summary line. Raises AnalysisError for a bad trace or an unwritable file."""
    from neutrino.analysis import _common as C
    from neutrino.analysis import ranks
    from neutrino.analysis.tables import load_trace

    group = ranks.find_group(trace_dir)
    if group is not None:
        kind, members = ranks.load_job(str(group))
        runs = [(n + 1, ranks.describe_rank(n, t, kind), t, ls) for n, t, ls in members]
    else:
        trace, launches = load_trace(trace_dir)
        runs = [(1, ranks.describe_rank(0, trace, "run"), trace, launches)]
    placement, counts = Placement(), Counter()
    try:
        with open(out_path, "wb", buffering=1 << 20) as f:
            writer = ProtoWriter(f)
            for pid, label, trace, launches in runs:
                counts.update(write_run(writer, pid, label, trace, launches, placement))
    except OSError as e:
        raise C.AnalysisError(f"cannot write {out_path}: {e}") from e
    context_note = (f"{counts['timeline']} GPU activities, {counts['ranges']} ranges" if counts["timeline"] else
                    "no timeline.bin: probed launches only")
    return (f"wrote {out_path}: {len(runs)} process(es), {writer.slices} slices ({context_note}); "
            f"blocks placed: {placement.describe()}")


__all__ = ["export_protobuf", "write_run", "write_probed", "BlockTracks", "Placement", "StreamTracks", "block_clock", "block_results", "write_blocks",
           "write_ranges", "write_timeline", "graph_replay_args"]
