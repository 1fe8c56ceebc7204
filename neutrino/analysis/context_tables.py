"""The context tables of a run directory (timeline.bin, ranges.bin, launch_args.jsonl) for the
columnar export and `diff`.

Normative format: spec/trace-format.md, "Context tables". The readers of record are
`neutrino.timeline.read_timeline` and `neutrino.ranges.read_ranges` / `read_launch_args`;
this module uses them when they are installed and otherwise parses the files itself with
numpy, following the spec, so that an export never depends on which modules a tree has.
Every function returns None when the run has no such file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from neutrino.maps import TraceError

TIMELINE_MAGIC = b"NTTIMEL1"
RANGES_MAGIC = b"NTRANGE1"
NO_NAME = 0xFFFFFFFF
CLOCK_KERNEL = "__neutrino_globaltimer"  # neutrino.runtime.context_tables.clock's calibration kernel (not the program's)

TIMELINE_RECORD = np.dtype([
    ("kind", "u1"), ("copy_kind", "u1"), ("flags", "<u2"), ("device", "<u4"), ("stream", "<u4"), ("tid", "<u4"),
    ("start_ns", "<u8"), ("end_ns", "<u8"), ("correlation", "<u8"), ("bytes", "<u8"), ("name_id", "<u4"),
    ("probe_launch", "<i4"), ("grid", "<u4", (3,)), ("block", "<u4", (3,)),
])
RANGE_RECORD = np.dtype([
    ("start_ns", "<u8"), ("end_ns", "<u8"), ("tid", "<u4"), ("depth", "<u2"), ("source", "u1"),
    ("reserved", "u1"), ("name_id", "<u4"), ("domain_id", "<u4"), ("reserved2", "<u8"),
])
assert TIMELINE_RECORD.itemsize == 80 and RANGE_RECORD.itemsize == 40


def _records(path: Path, magic: bytes, dtype: np.dtype) -> np.ndarray:
    """The records of a context file after its 16-byte header; a record cut short is ignored, and
    a longer record (a later writer's) read for its first `dtype.itemsize` bytes."""
    raw = path.read_bytes()
    if len(raw) < 16 or raw[:8] != magic:
        raise TraceError(f"{path}: not a {magic.decode()} file (bad magic)")
    version, size = (int(v) for v in np.frombuffer(raw[8:16], "<u4"))
    if version != 1 or size < dtype.itemsize:
        raise TraceError(f"{path}: version {version} with {size}-byte records; this reader knows version 1 "
                         f"with {dtype.itemsize}-byte records")
    n = (len(raw) - 16) // size
    rows = np.frombuffer(raw, np.uint8, count=n * size, offset=16).reshape(n, size)[:, : dtype.itemsize]
    return np.ascontiguousarray(rows).view(dtype).reshape(n)


def _names(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line.replace("\\n", "\n") for line in path.read_text(encoding="utf-8", errors="replace").split("\n")]


def _name_of(names: list[str], ids: np.ndarray) -> np.ndarray:
    out = np.full(len(ids), "", dtype=object)
    for i, name_id in enumerate(ids.tolist()):
        if name_id != NO_NAME and name_id < len(names):
            out[i] = names[name_id]
    return out


def read_timeline(run: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(records sorted by start_ns, their kernel names) of run/timeline.bin, or None when absent."""
    run = Path(run)
    if not (run / "timeline.bin").exists():
        return None
    try:
        from neutrino import timeline as reader  # the reader of record, when this tree has it
    except ImportError:
        reader = None
    if reader is not None and hasattr(reader, "read_timeline"):
        table = reader.read_timeline(run)
        return table, np.asarray(table["name"], dtype=object)
    recs = _records(run / "timeline.bin", TIMELINE_MAGIC, TIMELINE_RECORD)
    recs = recs[np.argsort(recs["start_ns"], kind="stable")]
    names = _name_of(_names(run / "timeline_names.txt"), recs["name_id"])
    ours = names == CLOCK_KERNEL  # the runtime's clock calibration, as the reader of record leaves it out
    return recs[~ours], names[~ours]


def read_graph_replays(run: Path) -> np.ndarray | None:
    """The rows of run/timeline_graphs.tsv (`neutrino.timeline.read_graph_counts`, the reader of record: a
    small text table, parsed in one place), or None when absent."""
    try:
        from neutrino import timeline as reader
    except ImportError:  # a tree without the reader has no shim that writes the file either
        return None
    return reader.read_graph_counts(Path(run))


def read_ranges(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(records, names, domains) of run/ranges.bin, or None when absent."""
    run = Path(run)
    if not (run / "ranges.bin").exists():
        return None
    try:
        from neutrino import ranges as reader
    except ImportError:
        reader = None
    if reader is not None and hasattr(reader, "read_ranges"):
        table = reader.read_ranges(run)
        return table, np.asarray(table["name"], dtype=object), np.asarray(table["domain"], dtype=object)
    recs = _records(run / "ranges.bin", RANGES_MAGIC, RANGE_RECORD)
    names = _names(run / "ranges_names.txt")
    return recs, _name_of(names, recs["name_id"]), _name_of(names, recs["domain_id"])


def read_launch_args(run: Path) -> tuple[dict[int, dict], dict[int, int]] | None:
    """(argument sets by id, launch index -> argument set) of run/launch_args.jsonl, or None when absent.
    A line that is not JSON (cut short by a crash) is skipped."""
    path = Path(run) / "launch_args.jsonl"
    if not path.exists():
        return None
    try:
        from neutrino import ranges as reader
    except ImportError:
        reader = None
    if reader is not None and hasattr(reader, "read_launch_args"):
        return reader.read_launch_args(Path(run))
    argsets: dict[int, dict] = {}
    uses: dict[int, int] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if not isinstance(value, dict):
                continue
            if isinstance(value.get("argset"), int) and "kernel" in value:
                argsets[value["argset"]] = value
            elif isinstance(value.get("launch"), int) and isinstance(value.get("argset"), int):
                uses[value["launch"]] = value["argset"]
    return argsets, uses
