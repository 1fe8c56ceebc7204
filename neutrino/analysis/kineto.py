"""`neutrino export TRACE --merge-into KINETO.json [-o OUT]`: our tracks in a torch.profiler trace.

A torch.profiler (Kineto) Chrome-trace JSON has `traceEvents` whose `ts`/`dur`
are microseconds; since PyTorch 2.4 they are relative to the top-level
`baseTimeNanoseconds` (absolute = baseTimeNanoseconds + ts × 1000, Unix-epoch
nanoseconds), before that they were absolute Unix microseconds (base 0). Which one a
trace uses is checked on the matched kernels: when adding the base puts Kineto's kernels
more than a day away from ours and leaving it out does not, the base is left out
(torch 2.11's traces have absolute `ts` beside a `baseTimeNanoseconds`). Our
context tables are Unix-epoch nanoseconds too, so an event at `t` ns goes to
`ts = (t − base) / 1000`. The clocks are checked: the n-th GPU kernel of a
name in our timeline is matched with the n-th Kineto event of category
`kernel` with that name; when the median difference of their starts exceeds
1 µs our events are shifted by it, and the summary line says so.

Added (spec/analysis.md, "Merging into a torch.profiler trace"): per run, one
process (pid above Kineto's) with its host threads' ranges, the probed
kernels on their stream tracks and their blocks and warps on SM-slot tracks;
Kineto's own events are copied unchanged. The output is written as a stream.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from neutrino.analysis import _common as C
from neutrino.analysis import context
from neutrino.errors import NeutrinoError

ALIGN_TOLERANCE_NS = 1000
ABSOLUTE_TS_NS = 86_400 * 10**9  # a clock shift above a day: Kineto's ts were not relative to its base


class JsonWriter:
    """ProtoWriter's interface (`track`, `slice`) producing Chrome trace events: a process track is a
    pid, a thread track its tid, any other track a thread of its process named by its path."""

    def __init__(self, out, base_ns: int, shift_ns: int, first_pid: int, comma: bool = True):
        self.out, self.base_ns, self.shift_ns, self.comma = out, base_ns, shift_ns, comma
        self.next_pid = first_pid
        self.where: dict[int, tuple[int, int, str]] = {}  # uuid -> (pid, tid, name)
        self.next_tid: dict[int, int] = defaultdict(lambda: 1_000_000)
        self.slices = 0
        self._uuid = 0

    def _event(self, event: dict) -> None:
        self.out.write((",\n" if self.comma else "") + json.dumps(event))
        self.comma = True

    def track(self, name: str, *, parent: int | None = None, pid: int | None = None, tid: int | None = None,
              process_name: str | None = None, description: str | None = None, rank: int | None = None) -> int:
        self._uuid += 1
        if process_name is not None:
            pid_, tid_, full = self.next_pid, 0, process_name
            self.next_pid += 1
            self._event({"ph": "M", "pid": pid_, "name": "process_name", "args": {"name": f"neutrino: {process_name}"}})
            self._event({"ph": "M", "pid": pid_, "name": "process_sort_index", "args": {"sort_index": pid_}})
        else:
            owner = self.where[parent] if parent is not None else self._process_of_pid(pid)
            pid_ = owner[0]
            if tid is not None:
                tid_, full = int(tid), name
            else:
                tid_ = self.next_tid[pid_]
                self.next_tid[pid_] += 1
                full = f"{owner[2]} / {name}" if owner[1] else name
            self._event({"ph": "M", "pid": pid_, "tid": tid_, "name": "thread_name", "args": {"name": full}})
            if rank is not None:
                self._event({"ph": "M", "pid": pid_, "tid": tid_, "name": "thread_sort_index",
                             "args": {"sort_index": tid_}})
        self.where[self._uuid] = (pid_, tid_, full)
        return self._uuid

    def _process_of_pid(self, pid: int | None) -> tuple[int, int, str]:
        """Thread tracks name their process by our pid (rank + 1): the latest process track."""
        return next(w for w in reversed(list(self.where.values())) if w[1] == 0)

    def slice(self, track: int, name: str, start_ns: int, end_ns: int, args: dict | None = None,
              category: str | None = None) -> None:
        pid, tid, _ = self.where[track]
        ts = (int(start_ns) + self.shift_ns - self.base_ns) / 1e3
        self._event({"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": f"neutrino {category or ''}".strip(),
                     "ts": ts, "dur": max(0, int(end_ns) - int(start_ns)) / 1e3,
                     "args": {k: (v.item() if hasattr(v, "item") else v) for k, v in (args or {}).items()}})
        self.slices += 1


    def many(self, track, name_prefix: str, name_number, start_ns, end_ns, int_args: dict, category: str) -> None:
        """ProtoWriter.many's interface, one event at a time."""
        tracks = np.broadcast_to(np.asarray(track), (len(start_ns),))
        for i in range(len(start_ns)):
            self.slice(int(tracks[i]), f"{name_prefix}{int(name_number[i])}", int(start_ns[i]), int(end_ns[i]),
                       {k: int(v[i]) for k, v in int_args.items()}, category)


def load_kineto(path: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise C.AnalysisError(f"{path}: cannot read a torch.profiler JSON trace: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise C.AnalysisError(f"{path}: not a torch.profiler (Kineto) JSON trace: no traceEvents list")
    return doc


def kineto_base_ns(doc: dict) -> int:
    base = doc.get("baseTimeNanoseconds", 0)
    return int(base) if isinstance(base, (int, float)) else 0


MAX_ALIGNMENTS = 256  # offsets tried when one side has more kernels of a name than the other


def matched_differences(ours: list, theirs: list) -> list:
    """(theirs - ours) start differences of one kernel name's launches, both sorted. Kineto's window
    usually holds fewer launches than ours (the program's profile covers some steps): the shorter list
    is laid against each run of the longer (up to MAX_ALIGNMENTS offsets) and the run whose differences
    spread least (max - min: one clock offset fits them) is kept."""
    short, long_, sign = (theirs, ours, -1.0) if len(theirs) <= len(ours) else (ours, theirs, 1.0)
    if not short:
        return []
    s = np.asarray(short, dtype=np.float64)
    best = None
    for k in range(min(len(long_) - len(s), MAX_ALIGNMENTS) + 1):
        d = (np.asarray(long_[k:k + len(s)], dtype=np.float64) - s) * sign
        if best is None or np.ptp(d) < np.ptp(best):
            best = d
    return best.tolist()


def clock_shift_ns(doc: dict, base_ns: int, timelines: list[np.ndarray]) -> tuple[int, int]:
    """(shift to add to our times, kernels matched): the median start difference of kernels matched
    by name and order; 0 when none match or the clocks agree within ALIGN_TOLERANCE_NS."""
    theirs: dict[str, list[float]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X" and "ts" in e:
            theirs[str(e.get("name"))].append(base_ns + float(e["ts"]) * 1e3)
    ours: dict[str, list[int]] = defaultdict(list)
    for tl in timelines:
        kernels = tl[tl["kind"] == context.KIND_KERNEL]
        for name, start in zip(kernels["name"].tolist(), kernels["start_ns"].tolist()):
            ours[str(name)].append(int(start))
    diffs = []
    for name, starts in ours.items():
        diffs += matched_differences(sorted(starts), sorted(theirs.get(name, ())))
    if not diffs:
        return 0, 0
    median = int(round(float(np.median(diffs))))
    return (median if abs(median) > ALIGN_TOLERANCE_NS else 0), len(diffs)


def merge_into(trace_dir: str, kineto_path: str, out_path: str | None = None) -> str:
    """Write KINETO's events and ours to `out_path` (default: KINETO with `.neutrino.json`); the summary."""
    from neutrino.analysis import ranks
    from neutrino.analysis.export_timeline import Placement, write_run
    from neutrino.analysis.tables import load_trace

    doc = load_kineto(kineto_path)
    out_path = out_path or (kineto_path[:-5] if kineto_path.endswith(".json") else kineto_path) + ".neutrino.json"
    group = ranks.find_group(trace_dir)
    if group is not None:
        kind, members = ranks.load_job(str(group))
        runs = [(ranks.describe_rank(n, t, kind), t, ls) for n, t, ls in members]
    else:
        trace, launches = load_trace(trace_dir)
        runs = [(ranks.describe_rank(0, trace, "run"), trace, launches)]
    base = kineto_base_ns(doc)
    timelines = [tl for tl in (_timeline(t) for _, t, _ in runs) if tl is not None]
    shift, matched = clock_shift_ns(doc, base, timelines)
    if matched and base and abs(shift) > ABSOLUTE_TS_NS:  # ts already absolute beside a base (torch 2.11 did)
        shift0, matched0 = clock_shift_ns(doc, 0, timelines)
        if abs(shift0) < abs(shift):
            base, shift, matched = 0, shift0, matched0
    pids = [e.get("pid") for e in doc["traceEvents"] if isinstance(e, dict) and isinstance(e.get("pid"), int)]
    placement = Placement()
    try:
        with open(out_path, "w", buffering=1 << 20) as f:
            head = {k: v for k, v in doc.items() if k != "traceEvents"}
            f.write(json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [\n')
            f.write(",\n".join(json.dumps(e) for e in doc["traceEvents"]))
            writer = JsonWriter(f, base, shift, max(pids, default=0) + 1, comma=bool(doc["traceEvents"]))
            for label, trace, launches in runs:
                write_run(writer, 0, label, trace, launches, placement, only_probed=True)
            f.write("\n]}\n")
    except OSError as e:
        raise C.AnalysisError(f"cannot write {out_path}: {e}") from e
    clock = (f"clocks checked on {matched} matched kernel(s)" + (f", ours shifted by {shift} ns" if shift else "")
             if matched else "no kernel matched by name: aligned on baseTimeNanoseconds alone")
    return (f"wrote {out_path}: {len(doc['traceEvents'])} torch.profiler events and {writer.slices} of ours "
            f"({len(runs)} run(s)); {clock}; blocks placed: {placement.describe()}")


def _timeline(trace):
    try:
        return context.read_timeline(str(getattr(trace, "path", "")))
    except (NeutrinoError, OSError, ValueError):
        return None  # write_run warns about it
