"""`neutrino export TRACE_DIR --perfetto out.json`: block/warp timelines.

Writes the Chrome trace-event JSON format (`{"traceEvents": [...]}`) that
Perfetto (ui.perfetto.dev) and chrome://tracing open. Mapping (see
spec/analysis.md):

* one process per launch (`pid = launch index + 1`), named after the kernel;
* thread 0 of the process: the launch itself (when its duration is known);
* one thread per SM *slot*: the blocks resident on an SM at the same time
  overlap, and slices of one thread must nest, so concurrent blocks go to
  separate tracks named `SM 3`, `SM 3 #1`, ...; each block is one complete
  ("X") event;
* with `warps=True`, each warp of a block is an event on its own track under
  the block's track (`SM 3 #1 w2` = warp 2 of the blocks of that slot).

Timestamps are microseconds. Block times in cycles are converted with the
clock rate `clock_ghz` when given, else the rate that makes the blocks' span
fit the launch's measured duration, else 1 GHz (1 cycle shown as 1 ns); the
rate used is in each process's metadata. Launches are laid out one after the
other.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from neutrino.analysis import block_sched, tool_for, writer_tool
from neutrino.analysis import _common as C
from neutrino.errors import NeutrinoError

LAUNCH_GAP_NS = 1000.0  # space between consecutive launches on the timeline


def _meta(pid: int, name: str, args: dict, tid: int | None = None) -> dict:
    """A metadata ("M") event: process/thread names and sort order."""
    event = {"ph": "M", "pid": pid, "name": name, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def ns_per_unit(result: block_sched.LaunchResult, clock_ghz: float | None) -> tuple[float, str]:
    """Nanoseconds per timeline unit and where the rate comes from."""
    if result.timeline.time_unit == "ns":
        return 1.0, "globaltimer"
    if clock_ghz:
        return 1.0 / clock_ghz, f"given clock {clock_ghz} GHz"
    if result.fit_ghz:
        return 1.0 / result.fit_ghz, f"block span fitted to the launch duration: {result.fit_ghz:.3f} cycles/ns"
    return 1.0, "unknown clock: 1 cycle shown as 1 ns"


def launch_events(result: block_sched.LaunchResult, *, pid: int, offset_ns: float,
                  clock_ghz: float | None = None, warps: bool = False) -> tuple[list[dict], float]:
    """Events of one launch's block timeline and the time it occupies (ns)."""
    tl = result.timeline
    scale, rate_note = ns_per_unit(result, clock_ghz)
    labels = f"{tl.time_unit}; {rate_note}"
    if not tl.synchronized:
        labels += "; SM clocks aligned at each SM's first block"
    events = [_meta(pid, "process_name", {"name": f"launch {result.index}: {result.kernel}"}),
              _meta(pid, "process_sort_index", {"sort_index": pid}),
              _meta(pid, "process_labels", {"labels": labels})]
    t0 = int(tl.start.min()) if len(tl) else 0
    span_ns = (int(tl.end.max()) - t0) * scale if len(tl) else 0.0
    duration = float(result.duration_ns) if result.duration_ns else span_ns
    events.append(_meta(pid, "thread_name", {"name": "launch"}, tid=0))
    events.append({"ph": "X", "pid": pid, "tid": 0, "name": result.kernel, "cat": "launch",
                   "ts": offset_ns / 1e3, "dur": duration / 1e3,
                   "args": {"launch": result.index, "blocks": len(tl),
                            "measured": result.duration_ns is not None}})

    def us(t) -> float:
        return (offset_ns + (int(t) - t0) * scale) / 1e3

    tids: dict[tuple, int] = {}

    def track(key: tuple, name: str) -> int:
        """The tid of track (sm, slot[, warp rank]); warp tracks sort under their slot."""
        if key not in tids:
            tids[key] = len(tids) + 1
            sm, slot, rank = (key + (-1,))[:3]
            order = 1 + sm * 1_000_000 + slot * 1_000 + rank + 1
            events.append(_meta(pid, "thread_name", {"name": name}, tid=tids[key]))
            events.append(_meta(pid, "thread_sort_index", {"sort_index": order}, tid=tids[key]))
        return tids[key]

    order = sorted(range(len(tl)), key=lambda i: (int(tl.sm[i]), int(tl.slot[i]), int(tl.start[i])))
    for i in order:
        sm, slot = int(tl.sm[i]), int(tl.slot[i])
        tid = track((sm, slot), f"SM {sm}" + (f" #{slot}" if slot else ""))
        events.append({"ph": "X", "pid": pid, "tid": tid, "name": f"block {int(tl.block[i])}",
                       "cat": "block", "ts": us(tl.start[i]), "dur": (int(tl.end[i]) - int(tl.start[i])) * scale / 1e3,
                       "args": {"block": int(tl.block[i]), "sm": sm, "warps": int(tl.warps[i]),
                                f"start ({tl.time_unit})": int(tl.start[i]),
                                f"end ({tl.time_unit})": int(tl.end[i])}})
    if warps:
        first_warp = _first_warp_of_block(tl)
        for j in range(len(tl.warp_unit)):
            i = int(tl.warp_block[j])
            sm, slot = int(tl.sm[i]), int(tl.slot[i])
            rank = j - int(first_warp[i])  # warps of a block sorted by start
            tid = track((sm, slot, rank), f"SM {sm}" + (f" #{slot}" if slot else "") + f" w{rank}")
            events.append({"ph": "X", "pid": pid, "tid": tid, "name": f"warp {int(tl.warp_unit[j])}",
                           "cat": "warp", "ts": us(tl.warp_start[j]),
                           "dur": (int(tl.warp_end[j]) - int(tl.warp_start[j])) * scale / 1e3,
                           "args": {"block": int(tl.block[i]), "unit": int(tl.warp_unit[j])}})
    return events, max(duration, span_ns)


def _first_warp_of_block(tl: block_sched.BlockTimeline) -> np.ndarray:
    """Index into the warp arrays of each block's first warp (warps are sorted by block index)."""
    first = np.full(len(tl), -1, dtype=np.int64)
    seen = np.r_[True, tl.warp_block[1:] != tl.warp_block[:-1]] if len(tl.warp_block) else np.zeros(0, bool)
    idx = np.flatnonzero(seen)
    first[tl.warp_block[idx]] = idx
    return first


def trace_events(results: list[block_sched.LaunchResult], *, clock_ghz: float | None = None,
                 warps: bool = False) -> tuple[list[dict], float]:
    """All events of the launches' block timelines, laid out one launch after another,
    and the end of the last one (ns)."""
    events, offset = [], 0.0
    for r in results:
        ev, used = launch_events(r, pid=r.index + 1, offset_ns=offset, clock_ghz=clock_ghz, warps=warps)
        events += ev
        offset += used + LAUNCH_GAP_NS
    return events, offset


def launch_only_events(launches, offset_ns: float = 0.0) -> list[dict]:
    """Launches without a block_sched map: one event per launch with a known duration."""
    events, offset = [], offset_ns
    for launch in launches:
        pid = int(launch.index) + 1
        events += [_meta(pid, "process_name", {"name": f"launch {launch.index}: {launch.kernel}"}),
                   _meta(pid, "process_sort_index", {"sort_index": pid}),
                   _meta(pid, "thread_name", {"name": "launch"}, tid=0)]
        if not launch.duration_ns:
            continue
        events.append({"ph": "X", "pid": pid, "tid": 0, "name": launch.kernel, "cat": "launch",
                       "ts": offset / 1e3, "dur": float(launch.duration_ns) / 1e3,
                       "args": {"launch": int(launch.index)}})
        offset += float(launch.duration_ns) + LAUNCH_GAP_NS
    return events


def export(trace_dir: str, out_json: str, *, warps: bool = False, clock_ghz: float | None = None) -> None:
    """Write the Perfetto/Chrome JSON of one run, `trace_dir` (a job: neutrino.analysis.ranks.export).

    Raises AnalysisError (a NeutrinoError) when the trace cannot be read or the
    file written; a launch whose result file is unreadable is left out with a
    warning on stderr.
    """
    from neutrino.analysis.tables import load_trace

    trace, launches = load_trace(trace_dir)
    probe_text = getattr(trace, "probe_text", None)
    results, plain = [], []
    writer = writer_tool(trace)
    for launch in launches:
        try:
            mds = [md for md in launch.maps.values() if tool_for(md, writer) is block_sched]
            if mds:
                results.append(block_sched.analyze_launch(launch, mds[0], probe_text))
            else:
                plain.append(launch)
        except NeutrinoError as e:  # one unreadable launch does not spoil the others
            print(f"neutrino: warning: launch {launch.index} ({launch.kernel}) left out: {e}",
                  file=sys.stderr)
        getattr(launch, "release", lambda: None)()  # keep one launch's sections at a time
    events, end = trace_events(results, clock_ghz=clock_ghz, warps=warps)
    events += launch_only_events(plain, offset_ns=end)
    doc = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {"trace": str(trace_dir), "generator": "neutrino export --perfetto"}}
    try:
        with open(out_json, "w") as f:
            json.dump(doc, f)
    except OSError as e:
        raise C.AnalysisError(f"cannot write {out_json}: {e}") from e
