"""A job of several ranks: `neutrino report JOB_DIR` and `neutrino export JOB_DIR --perfetto`.

A job directory (`<tracedir>/<job>/rank<R>/`, spec/trace-format.md) holds one
run directory per rank. The report prints each rank's summary (the
single-run report, unchanged) and then one combined table: per kernel, the
launches and GPU time of every rank, and the ratio of the slowest rank to the
fastest (a straggler shows there). The Perfetto export writes one process per
rank on one timeline (spec/analysis.md, "Several ranks").
"""

from __future__ import annotations

import json
import os
import sys

from neutrino.analysis import _common as C
from neutrino.analysis import block_sched, tool_for
from neutrino.errors import NeutrinoError

LAUNCH_TRACK = "launch"  # the thread name perfetto.launch_events gives a launch's own slice


def load_job(job_dir: str):
    """(rank, trace, launches) per rank, every failure an AnalysisError."""
    from neutrino import trace as trace_mod
    from neutrino.analysis.report import load_trace

    try:
        ranks = trace_mod.find_rank_dirs(job_dir)
    except OSError as e:
        raise C.AnalysisError(f"{job_dir}: cannot read: {e}") from e
    if not ranks:
        raise C.AnalysisError(f"{job_dir}: not a job directory (no rank<R>/ run directory in it)")
    out = []
    for rank, run in ranks:
        trace, launches = load_trace(str(run))
        out.append((rank, trace, launches))
    return out


def describe_rank(rank: int, trace) -> str:
    """`rank 1 (pid 4242, GPU 1 sm_90 0000:19:00.0)`: who the rank was, from its start and context events."""
    start = next((e for e in trace.events if e.get("event") == "start"), {})
    devices = []
    for ev in trace.events:
        if ev.get("event") == "context":
            bus = f" {ev['pci_bus_id']}" if ev.get("pci_bus_id") else ""
            devices.append(f"GPU {ev.get('device')} {ev.get('arch', '?')}{bus}")
    where = ", ".join([f"pid {start['pid']}"] * ("pid" in start) + list(dict.fromkeys(devices)))
    return f"rank {rank}" + (f" ({where})" if where else "")


def combined_table(reports: list[tuple[int, object]]) -> str:
    """Per kernel: launches over all ranks, GPU time (us) per rank, slowest / fastest rank."""
    from neutrino.analysis.report import format_table, short

    kernels: dict[str, dict[int, object]] = {}
    for rank, report in reports:
        for name, entry in report.kernels.items():
            kernels.setdefault(name, {})[rank] = entry
    ranks = [rank for rank, _ in reports]
    rows = []
    for name, per_rank in kernels.items():
        times = {r: e.duration_ns for r, e in per_rank.items() if e.timed_launches}
        cells = [f"{times[r] / 1e3:.1f}" if r in times else "-" for r in ranks]
        spread = (f"{max(times.values()) / min(times.values()):.2f}"
                  if len(times) == len(ranks) and min(times.values()) > 0 else "-")
        rows.append([short(name), sum(e.launches for e in per_rank.values())] + cells + [spread])
    headers = ["kernel", "launches"] + [f"rank {r} (us)" for r in ranks] + ["max/min"]
    return format_table(headers, rows)


def report_main(job_dir: str, out_dir: str | None = None, *, plots: bool = True, plots_per_kernel: int = 4,
                tool_options: dict | None = None) -> int:
    """`neutrino report JOB_DIR`: each rank's report, then the combined table; the exit status."""
    from neutrino.analysis.report import analyze, render

    try:
        job = load_job(job_dir)
    except NeutrinoError as e:
        print(f"neutrino report: error: {e}", file=sys.stderr)
        return 1
    reports, status = [], 0
    print(f"job {job_dir}: {len(job)} rank(s)")
    for rank, trace, launches in job:
        report = analyze(trace, launches, tool_options=tool_options)
        reports.append((rank, report))
        print(f"\n== {describe_rank(rank, trace)}")
        print(render(report))
        for w in report.warnings:
            print(f"neutrino report: warning: rank {rank}: {w}", file=sys.stderr)
        if report.launches and not report.readable:
            print(f"neutrino report: error: rank {rank}: none of its {report.launches} launch result(s) could be read",
                  file=sys.stderr)
            status = 1
        if plots:
            status = max(status, _plots(report, rank, out_dir, plots_per_kernel))
    print(f"\n== all ranks\n{combined_table(reports)}")
    return status


def _plots(report, rank: int, out_dir: str | None, per_kernel: int) -> int:
    from neutrino.analysis.report import write_plots

    where = os.path.join(out_dir, f"rank{rank}") if out_dir else os.path.join(report.trace_path, "report")
    try:
        paths, _ = write_plots(report, where, per_kernel)
    except OSError as e:
        print(f"neutrino report: error: cannot write plots to {where}: {e}", file=sys.stderr)
        return 1
    if paths:
        print(f"(rank {rank}: {len(paths)} plot(s) in {where})")
    return 0


# ------------------------------------------------------------------ Perfetto


def absolute_start_ns(result: block_sched.LaunchResult) -> int | None:
    """The launch's first block start on the GPU's %globaltimer (ns), None for SM clocks."""
    tl = result.timeline
    if tl.time_unit != "ns" or not len(tl) or not tl.origin:
        return None
    return int(min(tl.origin.values())) + int(tl.start.min())


def anchor_ns(trace) -> float:
    """Host time (ns) just before the rank's first probed launch: its first `instrument` event,
    else its start. Ranks of one host share that clock."""
    for name in ("instrument", "start"):
        for ev in trace.events:
            if ev.get("event") == name and isinstance(ev.get("time"), (int, float)):
                return float(ev["time"]) * 1e9
    return 0.0


def _rank_launches(trace, launches, label: str):
    """block_sched results and the other launches of one rank (a bad launch is left out with a warning)."""
    results, plain = [], []
    for launch in launches:
        try:
            mds = [md for md in launch.maps.values() if tool_for(md) is block_sched]
            if mds:
                results.append(block_sched.analyze_launch(launch, mds[0], trace.probe_text))
            else:
                plain.append(launch)
        except NeutrinoError as e:
            print(f"neutrino export: warning: {label}: launch {launch.index} ({launch.kernel}) left out: {e}",
                  file=sys.stderr)
    return results, plain


class _RankTracks:
    """The events of one rank's Perfetto process: tracks shared by all its launches, by name."""

    def __init__(self, pid: int):
        self.pid = pid
        self.events: list[dict] = []
        self.tids: dict[str, int] = {LAUNCH_TRACK: 0}
        self.events.append({"ph": "M", "pid": pid, "tid": 0, "name": "thread_name", "args": {"name": LAUNCH_TRACK}})

    def add_launch(self, events: list[dict], rank: int) -> None:
        """A launch's events from perfetto.launch_events: its process metadata dropped, its
        threads mapped onto this rank's tracks of the same name."""
        names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
        for e in events:
            if "tid" not in e:
                continue  # process metadata: the rank's own is written once
            name = names.get(e["tid"], LAUNCH_TRACK)
            new = name not in self.tids
            tid = self.tids.setdefault(name, len(self.tids))
            if e["ph"] == "M" and not new:
                continue  # the track is named already
            e = dict(e, pid=self.pid, tid=tid)
            if e["ph"] == "X":
                e["args"] = dict(e.get("args", {}), rank=rank)
            self.events.append(e)


def rank_events(rank: int, trace, results, plain, *, t0_ns: float, absolute: bool, clock_ghz: float | None,
                warps: bool) -> list[dict]:
    """One Perfetto process (pid rank + 1) for the rank: its launches on shared tracks.

    `absolute`: every block_sched launch of the job has %globaltimer times, placed at their
    time on that clock minus `t0_ns`. Otherwise a rank's launches are laid out one after the
    other from its anchor (host clock) minus `t0_ns`."""
    from neutrino.analysis.perfetto import LAUNCH_GAP_NS, launch_events

    pid = rank + 1
    tracks = _RankTracks(pid)
    how = ("%globaltimer (one clock for the GPUs of a host)" if absolute else
           "host clock at the rank's first probed launch; its launches laid out one after another "
           "(SM clocks are not comparable across GPUs)")
    meta = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": describe_rank(rank, trace)}},
            {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": rank}},
            {"ph": "M", "pid": pid, "name": "process_labels", "args": {"labels": f"time: {how}"}}]
    offset = anchor_ns(trace) - t0_ns
    for r in results:
        at = absolute_start_ns(r) - t0_ns if absolute else offset
        events, used = launch_events(r, pid=pid, offset_ns=at, clock_ghz=clock_ghz, warps=warps)
        tracks.add_launch(events, rank)
        offset = max(offset, at + used + LAUNCH_GAP_NS)
    for launch in plain:
        if not launch.duration_ns:
            continue
        tracks.add_launch([{"ph": "X", "pid": pid, "tid": 0, "name": launch.kernel, "cat": "launch",
                            "ts": offset / 1e3, "dur": float(launch.duration_ns) / 1e3,
                            "args": {"launch": int(launch.index)}}], rank)
        offset += float(launch.duration_ns) + LAUNCH_GAP_NS
    return meta + tracks.events


def export_job(job_dir: str, out_json: str, *, warps: bool = False, clock_ghz: float | None = None) -> None:
    """The combined Perfetto/Chrome JSON of a job: one process per rank, one timeline.

    Aligned on %globaltimer when every block_sched launch of every rank recorded it (one
    clock for the GPUs of a host); otherwise on the host clock at each rank's first probed
    launch, which places the ranks to within the host-side latency of a launch."""
    job = [(rank, trace, *_rank_launches(trace, launches, f"rank {rank}")) for rank, trace, launches in load_job(job_dir)]
    starts = [absolute_start_ns(r) for _, _, results, _ in job for r in results]
    absolute = bool(starts) and all(s is not None for s in starts)
    t0 = float(min(starts)) if absolute else min(anchor_ns(trace) for _, trace, _, _ in job)
    events = []
    for rank, trace, results, plain in job:
        events += rank_events(rank, trace, results, plain, t0_ns=t0, absolute=absolute, clock_ghz=clock_ghz,
                              warps=warps)
    doc = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {"trace": str(job_dir), "ranks": [rank for rank, *_ in job],
                         "time": "globaltimer" if absolute else "host",
                         "generator": "neutrino export --perfetto"}}
    try:
        with open(out_json, "w") as f:
            json.dump(doc, f)
    except OSError as e:
        raise C.AnalysisError(f"cannot write {out_json}: {e}") from e
