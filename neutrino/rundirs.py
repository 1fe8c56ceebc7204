"""Finding run directories: a run, the ranks of a job, the processes of an `-o` trace (spec/trace-format.md)."""

from __future__ import annotations

import re
from pathlib import Path

from neutrino.maps import TraceError

def find_run_dir(path) -> Path:
    """`path` itself if it is a run directory, else its only run subdirectory."""
    path = Path(path)
    if not path.is_dir():
        raise TraceError(f"{path}: no such trace directory")
    if (path / "event.log").exists():
        return path
    runs = sorted(p for p in _entries(path) if (p / "event.log").exists())
    if len(runs) == 1:
        return runs[0]
    ranks = find_rank_dirs(path)
    if ranks and len(ranks) == len(runs):
        raise TraceError(f"{path}: a job of {len(ranks)} rank(s) ({', '.join(p.name for _, p in ranks[:8])}): "
                         "name one of them, or read them all with neutrino.trace.load_job")
    if not runs:
        raise TraceError(f"{path}: not a trace directory (no event.log here or in a subdirectory)")
    if len(find_process_dirs(path)) == len(runs):
        raise TraceError(f"{path}: the trace of {len(runs)} processes of one program: name one of them, "
                         "or read them all with neutrino.trace.load_job")
    names = ", ".join(p.name for p in runs[-5:])
    raise TraceError(f"{path}: holds {len(runs)} runs ({names}); name one of them")


def _entries(path: Path) -> list[Path]:
    """The entries of a directory; TraceError (not OSError) when it cannot be listed."""
    try:
        return list(path.iterdir())
    except OSError as e:
        raise TraceError(f"{path}: cannot list the directory: {e.strerror or e}") from None


_RANK_DIR = re.compile(r"rank(\d+)(?:\.(\d+))?")


def find_rank_dirs(path) -> list[tuple[int, Path]]:
    """(rank, run directory) of each rank of a job directory (`<tracedir>/<job>/rank<R>[.<pid>]`,
    spec/trace-format.md), ordered by rank; [] when `path` is not a job directory."""
    path = Path(path)
    if not path.is_dir() or (path / "event.log").exists():
        return []
    found = []
    for sub in _entries(path):
        m = _RANK_DIR.fullmatch(sub.name)
        if m and (sub / "event.log").exists():
            found.append((int(m.group(1)), int(m.group(2) or -1), sub))
    return [(rank, sub) for rank, _, sub in sorted(found)]


_PROCESS_DIR = re.compile(r"(\d{8}-\d{6})_(\d+)")


def find_process_dirs(path) -> list[Path]:
    """The run directories of an `-o DIR` trace (spec/trace-format.md): DIR itself when its first
    process wrote it, then `DIR/<time>_<pid>` of every other process of the program, in order of
    start. DIR is one when it holds an event.log or the `.owner` of `-o`; otherwise [] (a plain
    trace directory holds separate runs, not one program's processes)."""
    path = Path(path)
    if not path.is_dir() or not ((path / "event.log").exists() or (path / ".owner").exists()):
        return []
    others = []
    for sub in _entries(path):
        m = _PROCESS_DIR.fullmatch(sub.name)
        if m and (sub / "event.log").exists():
            others.append((m.group(1), int(m.group(2)), sub))
    return [path] * (path / "event.log").exists() + [sub for *_, sub in sorted(others)]


def find_job_dir(path) -> Path | None:
    """`path` if it is a job directory, or its only job subdirectory when it holds no run of its
    own (a trace directory after one `neutrino ... -- torchrun ...`); else None."""
    path = Path(path)
    if find_rank_dirs(path):
        return path
    if not path.is_dir() or (path / "event.log").exists():
        return None
    subs = [p for p in _entries(path) if p.is_dir()]
    if any((p / "event.log").exists() for p in subs):
        return None
    jobs = [p for p in subs if find_rank_dirs(p)]
    return jobs[0] if len(jobs) == 1 else None
