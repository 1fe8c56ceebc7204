"""Readers of the ranges and launch-argument tables of a run directory.

Normative format: spec/trace-format.md, "Context tables" (ranges.bin + ranges_names.txt,
launch_args.jsonl). The writers are the shim (shim/nvtx.c, shim/argtrace.c) and
`neutrino.runtime.context`. numpy is imported when a table is read.
"""

from __future__ import annotations

import json
from pathlib import Path

from neutrino.trace import TraceError

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
    text = path.read_text(encoding="utf-8", errors="replace")
    return [line.replace("\\n", "\n") for line in text.split("\n")[:-1]] if text else []


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
    raw = path.read_bytes()
    if len(raw) < 16 or raw[:8] != RANGES_MAGIC:
        raise RangesError(f"{path}: not a ranges table (magic {raw[:8]!r}, expected {RANGES_MAGIC!r})")
    version, size = (int(v) for v in np.frombuffer(raw[8:16], "<u4"))
    if version != RANGES_VERSION or size != RANGE_RECORD_BYTES:
        raise RangesError(f"{path}: version {version} with {size}-byte records; this reader knows version "
                          f"{RANGES_VERSION} with {RANGE_RECORD_BYTES}-byte records")
    recs = np.frombuffer(raw, dtype, count=(len(raw) - 16) // size, offset=16)  # a record cut short is ignored
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


def _lines(path: Path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue  # a line cut short by a crash
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
    """probed launch index -> names of its enclosing ranges, outermost first (launches with a host time)."""
    ranges = read_ranges(run_dir)
    return {launch: list(enclosing(ranges, tid, t)["name"]) for launch, (tid, t) in read_launch_hosts(run_dir).items()}
