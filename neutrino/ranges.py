"""Readers of the ranges and launch-argument tables of a run directory.

Normative format: spec/trace-format.md, "Context tables" (ranges.bin + ranges_names.txt,
launch_args.jsonl). The writers are the shim (shim/nvtx.c, shim/argtrace.c) and
`neutrino.runtime.context_tables.tables`. numpy is imported when a table is read.
"""

from __future__ import annotations

import json
from pathlib import Path

from neutrino.maps import TraceError

RANGES_MAGIC = b"NTRANGE1"
RANGES_VERSION = 1
RANGE_RECORD_BYTES = 40
NO_DOMAIN = 0xFFFFFFFF
SOURCES = {1: "nvtx", 2: "nvtx-start-end", 3: "annotate"}


class RangesError(TraceError):
    """A ranges table that is not one (bad magic, unknown version): a bad trace, named by its file."""


def record_dtype():
    import numpy as np

    return np.dtype([
        ("start_ns", "<u8"), ("end_ns", "<u8"), ("tid", "<u4"), ("depth", "<u2"), ("source", "u1"),
        ("reserved0", "u1"), ("name_id", "<u4"), ("domain_id", "<u4"), ("reserved1", "<u8"),
    ])


def read_names(path: Path) -> list[str]:
    """ranges_names.txt: one name per line, `\\n` standing for a newline inside a name."""
    if not path.exists():
        return []
    if not path.is_file() or path.stat().st_size > MAX_NAMES_BYTES:
        raise RangesError(f"{path}: not a names table (not a regular file, or over {MAX_NAMES_BYTES >> 20} MiB)")
    text = path.read_text(encoding="utf-8", errors="replace")
    return [line.replace("\\n", "\n") for line in text.split("\n")[:-1]] if text else []


CHUNK_RECORDS = 1 << 18
MAX_NAMES_BYTES = 64 << 20


def _valid_records(path: Path, dtype, n: int):
    """The records of ranges.bin but all-zero ones (a hole of NULs: a full disk, a sparse copy), read a
    chunk at a time so that memory follows the records kept, not the file's length."""
    import numpy as np

    if n <= 0:
        return np.zeros(0, dtype)
    body = np.memmap(path, dtype=dtype, mode="r", offset=16, shape=(n,))
    kept = []
    for at in range(0, n, CHUNK_RECORDS):
        rows = np.array(body[at:at + CHUNK_RECORDS])
        nonzero = rows.view(np.uint8).reshape(len(rows), dtype.itemsize).any(axis=1)
        kept.append(rows[nonzero])
    return np.concatenate(kept)


def read_ranges(run_dir):
    """run_dir/ranges.bin as a numpy structured array ordered by start_ns, with the record's fields
    and `name`, `domain` (str; "" for the default domain or a name the writer could not keep).
    An empty array when the run has no ranges; RangesError for a file that is not a ranges table."""
    import numpy as np

    run = Path(run_dir)
    dtype = record_dtype()
    out_dtype = np.dtype(dtype.descr + [("name", object), ("domain", object)])
    path = run / "ranges.bin"
    if not path.exists():
        return np.zeros(0, out_dtype)
    if not path.is_file():
        raise RangesError(f"{path}: not a regular file")
    with open(path, "rb") as fh:
        head = fh.read(16)
    if len(head) < 16 or head[:8] != RANGES_MAGIC:
        raise RangesError(f"{path}: not a ranges table (magic {head[:8]!r}, expected {RANGES_MAGIC!r})")
    version, size = (int(v) for v in np.frombuffer(head[8:16], "<u4"))
    if version != RANGES_VERSION or size != RANGE_RECORD_BYTES:
        raise RangesError(f"{path}: version {version} with {size}-byte records; this reader knows version "
                          f"{RANGES_VERSION} with {RANGE_RECORD_BYTES}-byte records")
    recs = _valid_records(path, dtype, (path.stat().st_size - 16) // size)  # a record cut short is ignored
    recs = recs[np.argsort(recs["start_ns"], kind="stable")]
    names = read_names(run / "ranges_names.txt")
    table = np.zeros(len(recs), out_dtype)
    for field in dtype.names:
        table[field] = recs[field]
    table["name"] = [names[i] if i < len(names) else "" for i in recs["name_id"].tolist()]
    table["domain"] = [names[i] if i != NO_DOMAIN and i < len(names) else "" for i in recs["domain_id"].tolist()]
    return table


def enclosing(ranges, tid: int, time_ns: int):
    """The ranges of thread `tid` whose interval holds `time_ns` (start ≤ t ≤ end), outermost first."""
    import numpy as np

    hit = (ranges["tid"] == tid) & (ranges["start_ns"] <= time_ns) & (ranges["end_ns"] >= time_ns)
    found = ranges[hit]
    order = np.lexsort((-found["end_ns"].astype("i8"), found["start_ns"]))  # earlier start, then longer, first
    return found[order]


def enclosing_all(ranges, tid, time_ns) -> list[tuple[int, ...]]:
    """Per query (tid[i], time_ns[i]): the indices in `ranges` of the ranges of that thread whose
    interval holds the time (start <= t <= end), outermost first; () for tid 0 (unknown) or none.
    One sweep per thread over its ranges and queries sorted by time (linear after sorting), the
    answer `enclosing` gives one query at a time."""
    import numpy as np

    tid, time_ns = np.asarray(tid, dtype=np.int64), np.asarray(time_ns, dtype=np.int64)
    out: list[tuple[int, ...]] = [()] * len(tid)
    if ranges is None or not len(ranges) or not len(tid):
        return out
    rtid = ranges["tid"].astype(np.int64)
    for t in np.unique(tid):
        mine = np.flatnonzero(rtid == t) if t else np.zeros(0, dtype=np.int64)
        if not len(mine):
            continue
        mine = mine[np.lexsort((-ranges["end_ns"][mine].astype(np.int64), ranges["start_ns"][mine].astype(np.int64)))]
        starts, ends = ranges["start_ns"][mine].astype(np.int64).tolist(), ranges["end_ns"][mine].astype(np.int64).tolist()
        queries = np.flatnonzero(tid == t)
        queries = queries[np.argsort(time_ns[queries], kind="stable")]
        open_, k = [], 0  # the ranges open at the query's time, in start order: outermost first
        for q, when in zip(queries.tolist(), time_ns[queries].tolist()):
            while k < len(starts) and starts[k] <= when:
                open_.append(k)
                k += 1
            open_ = [j for j in open_ if ends[j] >= when]  # closed before this query: before every later one
            out[q] = tuple(int(mine[j]) for j in open_)
    return out


def timeline_query_points(timeline, hosts: dict[int, tuple[int, int]] | None = None):
    """(tid, time_ns) at which each timeline record's enclosing ranges are looked up: its launch
    call's thread and host time (`host_ns`, every kernel and copy at the default timeline level);
    else, for a probed launch, those of launch_args.jsonl (`hosts`: read_launch_hosts); else the
    record's tid and GPU start (an approximation: the GPU starts after the launch call)."""
    import numpy as np

    tid = timeline["tid"].astype(np.int64).copy()
    when = timeline["start_ns"].astype(np.int64).copy()
    if hosts:
        for i in np.flatnonzero(timeline["probe_launch"] >= 0).tolist():
            host = hosts.get(int(timeline["probe_launch"][i]))
            if host is not None:
                tid[i], when[i] = host
    if "host_ns" in (timeline.dtype.names or ()):
        known = timeline["host_ns"] > 0
        when[known] = timeline["host_ns"][known].astype(np.int64)
    return tid, when


def timeline_ranges(run_dir) -> list[list[str]]:
    """Per record of `neutrino.timeline.read_timeline(run_dir)` (in its order): the names of its
    enclosing ranges, outermost first, found at timeline_query_points. Empty lists without ranges.bin."""
    from neutrino.timeline import read_timeline

    timeline = read_timeline(run_dir)
    if not (Path(run_dir) / "ranges.bin").exists():
        return [[] for _ in range(len(timeline))]
    ranges = read_ranges(run_dir)
    names = ranges["name"].tolist()
    found = enclosing_all(ranges, *timeline_query_points(timeline, read_launch_hosts(run_dir)))
    return [[str(names[j]) for j in hit] for hit in found]


MAX_LINE_BYTES = 16 << 20  # a longer "line" (a hole of NULs, binary garbage) is skipped, a piece at a time


def _lines(path: Path):
    """The JSON objects of a JSON-lines file; lines that are not one (cut short by a crash, over
    MAX_LINE_BYTES) are skipped. RangesError when the path is not a regular file."""
    if not path.is_file():
        raise RangesError(f"{path}: not a regular file")
    with open(path, "rb") as fh:
        while line := fh.readline(MAX_LINE_BYTES):
            if not line.endswith(b"\n") and len(line) == MAX_LINE_BYTES:
                while (rest := fh.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # the rest of an overlong line
                continue
            try:
                value = json.loads(line.decode("utf-8", errors="replace"))
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(value, dict):
                yield value


def read_launch_args(run_dir) -> tuple[dict[int, dict], dict[int, int]]:
    """(argument sets by number, probed launch index -> argument set number) of
    run_dir/launch_args.jsonl; both empty when the run has none. Launches whose set was not kept
    (too many distinct sets) are left out."""
    argsets: dict[int, dict] = {}
    uses: dict[int, int] = {}
    path = Path(run_dir) / "launch_args.jsonl"
    if not path.exists():
        return argsets, uses
    for value in _lines(path):
        if "launch" in value:
            if isinstance(value.get("launch"), int) and isinstance(value.get("argset"), int):
                uses[value["launch"]] = value["argset"]
        elif isinstance(value.get("argset"), int):
            argsets[value["argset"]] = value
    return argsets, uses


def read_launch_hosts(run_dir) -> dict[int, tuple[int, int]]:
    """probed launch index -> (tid, host_ns) of its launch call, from the use lines of launch_args.jsonl."""
    out: dict[int, tuple[int, int]] = {}
    path = Path(run_dir) / "launch_args.jsonl"
    if not path.exists():
        return out
    for value in _lines(path):
        if isinstance(value.get("launch"), int) and isinstance(value.get("tid"), int) \
                and isinstance(value.get("host_ns"), int):
            out[value["launch"]] = (value["tid"], value["host_ns"])
    return out


def launch_ranges(run_dir) -> dict[int, list[str]]:
    """probed launch index -> names of its enclosing ranges, outermost first (launches with a host
    time: from launch_args.jsonl, else from its timeline record's host_ns)."""
    ranges = read_ranges(run_dir)
    hosts = read_launch_hosts(run_dir)
    if (Path(run_dir) / "timeline.bin").exists():
        from neutrino.timeline import read_timeline

        tl = read_timeline(run_dir)
        known = tl[(tl["probe_launch"] >= 0) & (tl["host_ns"] > 0)]
        for launch, tid, t in zip(known["probe_launch"].tolist(), known["tid"].tolist(), known["host_ns"].tolist()):
            hosts.setdefault(launch, (tid, t))
    return {launch: list(enclosing(ranges, tid, t)["name"]) for launch, (tid, t) in hosts.items()}
