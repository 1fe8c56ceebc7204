"""Reading timeline.bin (every kernel, copy and memset of a run; spec/trace-format.md,
"Context tables") and telling which library a kernel came from by its name."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from neutrino.maps import TraceError
from neutrino.timeline_format import (  # noqa: F401 - the format's names, re-exported for readers of neutrino.timeline
    CLOCK_KERNEL, FLAG_GRAPH, FLAG_NO_GPU_TIME, FLAG_PROBED, GRAPH_REPLAY, HEADER_BYTES, KERNEL, MAGIC, MAX_NAMES_BYTES,
    MEMCPY, MEMSET, NO_NAME, ORIGINS, RECORD_MIN_BYTES, VERSION, origin, read_header, read_names)

_FIELDS_80 = [
    ("kind", "<u1"), ("copy_kind", "<u1"), ("flags", "<u2"), ("device", "<u4"), ("stream", "<u4"),
    ("tid", "<u4"), ("start_ns", "<u8"), ("end_ns", "<u8"), ("correlation", "<u8"), ("bytes", "<u8"),
    ("name_id", "<u4"), ("probe_launch", "<i4"), ("grid", "<u4", (3,)), ("block", "<u4", (3,)),
]
_FIELDS_88 = _FIELDS_80 + [("host_ns", "<u8")]  # host_ns appended at offset 80 (2026-11-26)
# graph_exec, graph_replay appended at 88 (2026-11-27): a graph replay's executable graph (the shim's number, 1 up)
# and the replay's number among that graph's (1 up); 0 unknown or not a graph replay
RECORD = np.dtype(_FIELDS_88 + [("graph_exec", "<u4"), ("graph_replay", "<u4")])
assert RECORD.itemsize == 96


def record_dtype(size: int) -> np.dtype:
    """RECORD's fields laid over records of `size` bytes (the header's), for memory-mapping a file in
    place; host_ns, graph_exec and graph_replay only when the records have them."""
    fields = RECORD.descr if size >= RECORD.itemsize else _FIELDS_88 if size >= 88 else _FIELDS_80
    d = np.dtype(fields)
    return np.dtype({"names": d.names, "formats": [d.fields[n][0] for n in d.names],
                     "offsets": [d.fields[n][1] for n in d.names], "itemsize": size})


CHUNK_RECORDS = 1 << 18  # records read at a time: memory follows the valid records, not the file's length


def _record_count(path: Path) -> tuple[int, int]:
    """(record size, whole records) of a timeline file, its header checked; a record cut short at the end
    (a crash) is not counted."""
    if path.exists() and not path.is_file():
        raise TraceError(f"{path}: not a regular file")
    with open(path, "rb") as fh:
        size = read_header(fh.read(HEADER_BYTES), path)
    return size, (path.stat().st_size - HEADER_BYTES) // size


def _records(path: Path, kinds=(KERNEL, MEMCPY, MEMSET)) -> np.ndarray:
    """The valid records of a timeline file (of `kinds`). A hole of NULs (a full disk, a sparse copy) has
    kind 0 and is skipped, a chunk at a time; a record cut short at the end (a crash) is ignored."""
    size, n = _record_count(path)
    if n <= 0:
        return np.zeros(0, RECORD)
    body = np.memmap(path, dtype=np.uint8, mode="r", offset=HEADER_BYTES, shape=(n * size,)).reshape(n, size)
    kept, width = [], min(size, RECORD.itemsize)
    for at in range(0, n, CHUNK_RECORDS):
        part = body[at:at + CHUNK_RECORDS]
        raw = np.zeros((len(part), RECORD.itemsize), np.uint8)  # appended fields 0 in records without them
        raw[:, :width] = part[:, :width]
        rows = raw.view(RECORD).reshape(-1)
        kept.append(rows[np.isin(rows["kind"], kinds)])
    return np.concatenate(kept)


GRAPHS_FILE = "timeline_graphs.tsv"  # per executable graph, its replays as the shim launched them (quiet included)
GRAPH_COUNT_COLUMNS = ("graph_exec", "replays", "node_replays", "quiet_replays", "whole_replays")
GRAPH_COUNTS = np.dtype([("graph_exec", "<u4")] + [(c, "<u8") for c in GRAPH_COUNT_COLUMNS[1:]])
MAX_GRAPHS_BYTES = 16 << 20  # a row per executable graph the shim numbered: far below this


def read_graph_counts(run_dir) -> np.ndarray | None:
    """The rows of run_dir/timeline_graphs.tsv (spec/trace-format.md, "timeline_graphs.tsv") as GRAPH_COUNTS,
    by graph_exec; None when the run has no such file (older runs, no timeline, no graph launched). A file
    that breaks the format is a TraceError naming it and the line."""
    path = Path(run_dir) / GRAPHS_FILE
    if not path.exists():
        return None
    if not path.is_file() or path.stat().st_size > MAX_GRAPHS_BYTES:
        raise TraceError(f"{path}: not a graph counts table (not a regular file, or over {MAX_GRAPHS_BYTES >> 20} MiB)")
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    if lines[-1] != "":
        raise TraceError(f"{path}: line {len(lines)}: no line end (the file was cut short)")
    header = lines[0].split("\t")
    if tuple(header[:len(GRAPH_COUNT_COLUMNS)]) != GRAPH_COUNT_COLUMNS:
        raise TraceError(f"{path}: line 1: expected the header {chr(9).join(GRAPH_COUNT_COLUMNS)!r}, got {lines[0][:120]!r}")
    rows, seen = [], set()
    for number, line in enumerate(lines[1:-1], start=2):
        row = _graph_count_row(line, len(header), path, number)
        if row[0] in seen:
            raise TraceError(f"{path}: line {number}: graph_exec {row[0]} listed twice")
        seen.add(row[0])
        rows.append(row)
    out = np.array(rows, dtype=GRAPH_COUNTS) if rows else np.zeros(0, GRAPH_COUNTS)
    return out[np.argsort(out["graph_exec"], kind="stable")]


def _graph_count_row(line: str, width: int, path: Path, number: int) -> tuple:
    """One row of timeline_graphs.tsv: unsigned decimal fields, as many as the header's (columns after the
    five known ones, a later writer's, are read and dropped); replays = node + quiet + whole."""
    fields = line.split("\t")
    if len(fields) != width:
        raise TraceError(f"{path}: line {number}: {len(fields)} field(s), the header has {width}")
    if not all(f.isascii() and f.isdigit() for f in fields):
        raise TraceError(f"{path}: line {number}: not unsigned decimal integers: {line[:120]!r}")
    values = [int(f) for f in fields[:len(GRAPH_COUNT_COLUMNS)]]
    graph, replays, nodes, quiet, whole = values
    if not 1 <= graph < 1 << 32 or max(values[1:]) >= 1 << 64:
        raise TraceError(f"{path}: line {number}: graph_exec {graph} not in 1..2^32-1, or a count over 2^64-1")
    if replays != nodes + quiet + whole:
        raise TraceError(f"{path}: line {number}: replays {replays} != node_replays {nodes} + quiet_replays {quiet} "
                         f"+ whole_replays {whole}")
    return tuple(values)


def has_gpu_time(records: np.ndarray) -> np.ndarray:
    """Mask of the records with GPU times: not flagged "no GPU time", start and end not 0, end >= start
    (CUPTI's 0 is "no timestamp", never a time; spec/trace-format.md, "timeline.bin")."""
    start, end = records["start_ns"], records["end_ns"]
    return ((records["flags"] & FLAG_NO_GPU_TIME) == 0) & (start > 0) & (end > 0) & (end >= start)


def read_timeline(run_dir, *, own: bool = False, untimed: bool = False, graphs: bool = False) -> np.ndarray:
    """Every record of run_dir/timeline.bin with GPU times and its kernel `name` ("" for copies and
    memsets), ordered by start_ns; Neutrino's own clock-calibration kernel only with own=True. With
    untimed=True also the records without GPU time (has_gpu_time false), flagged FLAG_NO_GPU_TIME with
    both times 0, first. With graphs=True also the graph replay records (kind GRAPH_REPLAY, level
    `graphs`; name ""). FileNotFoundError when the run has no timeline."""
    run_dir = Path(run_dir)
    recs = _records(run_dir / "timeline.bin", (KERNEL, MEMCPY, MEMSET) + ((GRAPH_REPLAY,) if graphs else ()))
    names = read_names(run_dir)
    dtype = np.dtype(RECORD.descr + [("name", object)])
    out = np.empty(len(recs), dtype=dtype)
    for field in RECORD.names:
        out[field] = recs[field]
    lookup = np.array(names + [""], dtype=object)
    ids = recs["name_id"].astype(np.int64)
    ids[(ids < 0) | (ids >= len(names))] = len(names)  # copies, memsets, a name line lost
    out["name"] = lookup[ids]
    if not own:
        out = out[out["name"] != CLOCK_KERNEL]
    timed = has_gpu_time(out)
    if untimed:
        out["flags"][~timed] |= FLAG_NO_GPU_TIME
        out["start_ns"][~timed] = out["end_ns"][~timed] = 0
    else:
        out = out[timed]
    return out[np.argsort(out["start_ns"], kind="stable")]


def probed_gpu_ns(run_dir) -> dict[int, int]:
    """Probed launch index -> the GPU time (ns) of its kernel record: the record whose `probe_launch` is that
    index, end_ns - start_ns (CUPTI's time of the kernel alone), for the records with GPU times. Read in place
    (memory-mapped, a chunk at a time): memory in the probed records, not the file. FileNotFoundError when the
    run has no timeline."""
    path = Path(run_dir) / "timeline.bin"
    size, n = _record_count(path)
    if n <= 0:
        return {}
    recs = np.memmap(path, dtype=record_dtype(size), mode="r", offset=HEADER_BYTES, shape=(n,))
    out: dict[int, int] = {}
    for at in range(0, n, CHUNK_RECORDS):
        part = recs[at:at + CHUNK_RECORDS]
        probed = part[(part["kind"] == KERNEL) & (part["probe_launch"] >= 0) & has_gpu_time(part)]
        out.update(zip(probed["probe_launch"].tolist(), (probed["end_ns"] - probed["start_ns"]).tolist()))
    return out


def clock_calibrations(run_dir) -> list[tuple[int, int]]:
    """(%globaltimer, CUPTI time) pairs of the run's calibration launches (neutrino.runtime.context_tables.clock):
    each `timeline_clock` event's reads paired, in order, with the CUPTI record of that launch
    (mid-times of both)."""
    import json

    run_dir = Path(run_dir)
    reads = []
    for line in (run_dir / "event.log").read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "timeline_clock" and ev.get("globaltimer_ns"):
            reads.append(ev["globaltimer_ns"])
    tl = read_timeline(run_dir, own=True)
    recs = tl[tl["name"] == CLOCK_KERNEL]
    return [((int(g[0]) + int(g[1])) // 2, (int(r["start_ns"]) + int(r["end_ns"])) // 2) for g, r in zip(reads, recs)]


def globaltimer_offset(run_dir) -> int | None:
    """Nanoseconds to add to a %globaltimer value to put it on the timeline's clock: the median
    over the run's calibrations. None without one. globaltimer_to_ns() follows the drift."""
    pairs = clock_calibrations(run_dir)
    return int(np.median([cupti - gt for gt, cupti in pairs])) if pairs else None


def globaltimer_to_ns(values, run_dir) -> np.ndarray:
    """%globaltimer values on the timeline's clock: the offset interpolated linearly between the
    calibrations at timeline start and stop (the GPU timer drifts from CLOCK_REALTIME by ppm), held
    constant outside them. ValueError without a calibration."""
    pairs = sorted(clock_calibrations(run_dir))
    if not pairs:
        raise ValueError(f"{run_dir}: no clock calibration (timeline_clock events) in this run")
    gts = np.array([gt for gt, _ in pairs], dtype=np.float64)
    offsets = np.array([cupti - gt for gt, cupti in pairs], dtype=np.float64)
    v = np.asarray(values, dtype=np.int64)
    return v + np.rint(np.interp(v.astype(np.float64), gts, offsets)).astype(np.int64)


def kernels_by_origin(timeline: np.ndarray) -> dict[str, int]:
    """Kernel records per origin, most first (one origin() call per distinct name)."""
    kernels = timeline[timeline["kind"] == KERNEL]
    ids, first, counts = np.unique(kernels["name_id"], return_index=True, return_counts=True)
    totals: dict[str, int] = {}
    for i, n in zip(first, counts):
        label = origin(kernels["name"][i])
        totals[label] = totals.get(label, 0) + int(n)
    return dict(sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])))


def untimed_by_name(run_dir) -> dict[str, int]:
    """Records of the run without GPU time (has_gpu_time false) per kernel name ("" for copies and
    memsets), most first: counted, never placed in time."""
    tl = read_timeline(run_dir, untimed=True)
    names, counts = np.unique(tl["name"][~has_gpu_time(tl)].astype(str), return_counts=True)
    return dict(sorted(zip(names.tolist(), (int(c) for c in counts)), key=lambda kv: (-kv[1], kv[0])))
