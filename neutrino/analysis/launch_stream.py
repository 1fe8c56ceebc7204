"""The runs of a trace or job, and their probed launches streamed kernel by kernel.

`members(path)` names the run directories of a trace (one run, a job of ranks, or an `-o`
trace of several processes) with their rank. `launches_by_kernel(run, events)` yields the
launch events of one run (the `launch` events of the event log, then the records of
result/index.bin, read by `neutrino.trace.index_records`, the one reader of that file), grouped
by kernel and in launch order within a kernel, without holding every launch: the index is
memory-mapped and only the positions of its launches and their kernel ids and sequence numbers
are sorted (about 30 bytes a launch). Used by the columnar export and
`diff`, whose memory must not grow with the trace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from neutrino import trace as nt
from neutrino.analysis import _common as C


def members(path) -> list[tuple[int, Path]]:
    """(rank, run directory) of every run that `path` holds: the ranks of a job, the processes of
    an `-o` trace (numbered in order of start), or one run (its `start` event's rank, else 0)."""
    from neutrino.analysis.ranks import find_group

    path = Path(path)
    if not path.exists():
        raise nt.TraceError(f"{path}: no such trace directory")
    group = find_group(path)
    if group is not None:
        ranks = nt.find_rank_dirs(group)
        return ranks or list(enumerate(nt.find_process_dirs(group)))
    run = nt.find_run_dir(path)
    start = next((e for e in nt.read_events(run / "event.log") if e.get("event") == "start"), {})
    rank = start.get("rank")
    return [(rank if isinstance(rank, int) and not isinstance(rank, bool) else 0, run)]


def kernel_key(kernel: str) -> str:
    """The partition value of a kernel: a readable prefix of its name and a hash that tells apart
    names the prefix confuses (never a bare number, so that engines keep it a string)."""
    digest = hashlib.sha256(kernel.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{C.safe_name(kernel, 40)}-{digest}"


def launches_by_kernel(run: Path, events: list[dict]) -> Iterator[dict]:
    """Every probed launch event of a run, grouped by kernel, in launch order within a kernel."""
    logged = [e for e in events if e.get("event") == "launch" and isinstance(e.get("result"), str)]
    logged.sort(key=lambda e: (str(e.get("kernel", "")), as_int(e.get("index"))))
    yield from logged
    kernels, frames = nt.index_names(events)
    records, usable = nt.index_records(Path(run), kernels)
    if not len(usable):
        return
    order = usable[np.lexsort((np.asarray(records["seq"][usable]), np.asarray(records["kernel_id"][usable])))]
    del usable
    for i in order:
        yield nt.index_launch(records[i], kernels, frames)


def as_int(value) -> int:
    """An event field as an int; -1 when it is not one (a corrupt event log)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return -1


def dims(value) -> tuple[int, int, int]:
    """Three launch dimensions of an event field; (0, 0, 0) when it is not three integers."""
    try:
        out = tuple(int(v) for v in value)
    except (TypeError, ValueError, OverflowError):
        return (0, 0, 0)
    return out if len(out) == 3 else (0, 0, 0)


def read_frame(run: Path, ev: dict):
    """The result frame of one launch event (`neutrino.trace.ResultFile`); never cached."""
    return nt.read_result(Path(run) / ev["result"], as_int(ev.get("result_offset", 0) or 0))
