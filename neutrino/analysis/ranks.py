"""Several runs of one program: `neutrino report DIR` and `neutrino export DIR --perfetto`.

A job directory (`<tracedir>/<job>/rank<R>/`, spec/trace-format.md) holds one
run directory per rank; an `-o DIR` trace whose program started several
profiled processes holds the first one's run in DIR and the others' in
`DIR/<time>_<pid>/`. Both are read the same way, as members numbered by rank
or by order of start. The report prints each member's summary (the
single-run report, unchanged) and then one combined table: per kernel, the
launches and GPU time of every member, and the ratio of the slowest to the
fastest (a straggling rank shows there), then the cross-rank analysis
(neutrino.analysis.crossrank: the slow rank per kernel, late arrivals at collectives per step).
The Perfetto export writes one process per member on one timeline (spec/analysis.md, "Several ranks").
"""

from __future__ import annotations

import json
import os
import sys

import attrs

from neutrino.analysis import _common as C
from neutrino.analysis import block_sched, tool_for, writer_tool
from neutrino.errors import NeutrinoError

LAUNCH_TRACK = "launch"  # the thread name perfetto.launch_events gives a launch's own slice


def find_group(path):
    """`path` (or the one job it holds) when it is several runs to read together: a job of ranks
    (`neutrino.trace.find_job_dir`) or an `-o` trace of several processes; else None."""
    from pathlib import Path

    from neutrino import trace as trace_mod

    try:
        job = trace_mod.find_job_dir(path)
        return job if job is not None else Path(path) if len(trace_mod.find_process_dirs(path)) > 1 else None
    except (OSError, NeutrinoError):
        return None  # the single-run reader says what is wrong with it


def load_job(job_dir: str):
    """(kind, [(number, trace, launches)]): kind "rank" for a job of ranks, "process" for an `-o`
    trace of several processes (numbered from 0 in order of start); every failure an AnalysisError."""
    from neutrino.analysis.tables import load_trace

    kind, members = job_members(job_dir)
    out = []
    for number, run in members:
        trace, launches = load_trace(str(run))
        out.append((number, trace, launches))
    return kind, out


def job_members(job_dir: str):
    """(kind, [(number, run directory)]) of a job, nothing read yet (load_job reads them all)."""
    from neutrino import trace as trace_mod

    try:
        kind, members = "rank", trace_mod.find_rank_dirs(job_dir)
        if not members:
            kind, members = "process", list(enumerate(trace_mod.find_process_dirs(job_dir)))
    except OSError as e:
        raise C.AnalysisError(f"{job_dir}: cannot read: {e}") from e
    if not members:
        raise C.AnalysisError(f"{job_dir}: not a job directory (no rank<R>/ run directory in it)")
    return kind, members


def plural(kind: str) -> str:
    return "processes" if kind == "process" else f"{kind}s"


def describe_rank(rank: int, trace, kind: str = "rank") -> str:
    """`rank 1 (pid 4242, GPU 1 sm_90 0000:19:00.0)`: who the rank (or process) was, from its start and context events."""
    start = next((e for e in trace.events if e.get("event") == "start"), {})
    devices = []
    for ev in trace.events:
        if ev.get("event") == "context":
            bus = f" {ev['pci_bus_id']}" if ev.get("pci_bus_id") else ""
            devices.append(f"GPU {ev.get('device')} {ev.get('arch', '?')}{bus}")
    pid = [f"pid {start['pid']}"] if "pid" in start else []  # a log cut short may have lost its start event
    where = ", ".join(pid + list(dict.fromkeys(devices)))
    return f"{kind} {rank}" + (f" ({where})" if where else "")


def combined_table(reports: list[tuple[int, object]], kind: str = "rank") -> str:
    """Per kernel: launches over all ranks, GPU time (us) per rank, slowest / fastest rank."""
    from neutrino.analysis.tables import format_table, short

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
    headers = ["kernel", "launches"] + [f"{kind} {r} (us)" for r in ranks] + ["max/min"]
    return format_table(headers, rows)


def busy_line(reports: list[tuple[int, object]], kind: str = "rank") -> str | None:
    """`GPU busy (us): rank 0 6.6, rank 1 7.1; max/min 1.08` from each rank's timeline (None when
    no rank has one): the context section's busy time, side by side."""
    busy = {rank: r.context.busy_ns for rank, r in reports if getattr(r, "context", None) is not None}
    if not busy:
        return None
    cells = ", ".join(f"{kind} {rank} {ns / 1e3:.1f}" for rank, ns in busy.items())
    spread = (f"; max/min {max(busy.values()) / min(busy.values()):.2f}"
              if len(busy) == len(reports) and len(busy) > 1 and min(busy.values()) > 0 else "")
    quiet = {rank: r.context.quiet for rank, r in reports if getattr(r, "context", None) is not None and r.context.quiet}
    left_out = ("; graph replays quiet (not recorded, in no busy time): "
                + ", ".join(f"{kind} {rank} {n}" for rank, n in quiet.items())) if quiet else ""
    return f"GPU busy (us): {cells}{spread}{left_out}"


def main(trace_dir: str, out_dir: str | None = None, **options) -> int:
    """`neutrino report DIR`: the report of one run (neutrino.analysis.report.main), or of several
    ranks or processes read together (report_main; spec/analysis.md, "Several ranks")."""
    from neutrino.analysis import report

    job = find_group(trace_dir)
    if job is not None:
        return report_main(str(job), out_dir, **options)
    return report.main(trace_dir, out_dir, **options)


def export(trace_dir: str, out_json: str, *, warps: bool = False, clock_ghz: float | None = None) -> None:
    """`neutrino export --perfetto`: one run's JSON (neutrino.analysis.perfetto.export), or one
    Perfetto process per rank or profiled process of a group (export_job)."""
    from neutrino.analysis import perfetto

    job = find_group(trace_dir)
    if job is not None:
        return export_job(str(job), out_json, warps=warps, clock_ghz=clock_ghz)
    return perfetto.export(trace_dir, out_json, warps=warps, clock_ghz=clock_ghz)


def report_main(job_dir: str, out_dir: str | None = None, *, plots: bool = True, plots_per_kernel: int = 4,
                tool_options: dict | None = None, output_format: str = "text") -> int:
    """`neutrino report DIR`: each rank's (or process's) report, then the combined table; the exit status.
    `output_format` csv or json: the single-run rows with the rank (or process) as their first column."""
    from neutrino.analysis.report import analyze, kernel_rows, plotted_per_kernel, render
    from neutrino.analysis.tables import load_trace

    try:
        kind, members = job_members(job_dir)
    except NeutrinoError as e:
        print(f"neutrino report: error: {e}", file=sys.stderr)
        return 1
    # One rank's launches and results at a time: what the job's tables need of a rank is kept
    # (its rows, its launches' durations for the cross-rank tests), the rest dropped before the next.
    reports, job, samples, rows, status = [], [], {}, {}, 0
    if output_format == "text":
        print(f"{'job' if kind == 'rank' else 'trace'} {job_dir}: {len(members)} "
              f"{kind if len(members) == 1 else plural(kind)}")
    for rank, run in members:
        try:
            trace, launches = load_trace(str(run))
        except NeutrinoError as e:
            print(f"neutrino report: error: {e}", file=sys.stderr)
            return 1
        report = analyze(trace, launches, tool_options=tool_options,
                         keep_full=plotted_per_kernel(plots and output_format == "text", plots_per_kernel))
        reports.append((rank, report))
        if output_format == "text":
            print(f"\n== {describe_rank(rank, trace, kind)}")
            print(render(report))
        for w in report.warnings:
            print(f"neutrino report: warning: {kind} {rank}: {w}", file=sys.stderr)
        if report.launches and not report.readable:
            print(f"neutrino report: error: {kind} {rank}: none of its {report.launches} launch result(s) could be read",
                  file=sys.stderr)
            status = 1
        if plots and output_format == "text":
            status = max(status, _plots(report, kind, rank, out_dir, plots_per_kernel))
        samples[rank] = _rank_samples(launches, report)
        rows[rank] = kernel_rows(report) if output_format != "text" else []
        _forget_launches(report)
        job.append((rank, attrs.evolve(trace, launches=[]), []))
        del trace, launches
    if output_format == "text":
        print(f"\n== all {plural(kind)}\n{combined_table(reports, kind)}")
        busy = busy_line(reports, kind)
        if busy:
            print(busy)
        if len(job) > 1:
            _cross_rank(job, reports, kind, samples)
    else:
        text = _rows(job_dir, kind, reports, output_format, rows)
        sys.stdout.write(_with_cross_rank(text, job, reports, kind, samples)
                         if output_format == "json" and len(job) > 1 else text)
    return status


def _rank_samples(launches, report) -> dict:
    """What the cross-rank straggler test reads of a rank's launches (crossrank.probed_samples)."""
    from neutrino.analysis import crossrank

    return crossrank.probed_samples(launches, crossrank._block_sched_spans(report))


def _forget_launches(report) -> None:
    """Drop a rank's per-launch results once its rows and samples are taken (the combined table
    reads the kernels' launch counts and durations only)."""
    for entry in report.kernels.values():
        entry.results = {}
        entry.generic = {}


def _cross_rank(job, reports, kind: str, samples: dict | None = None) -> None:
    """Which rank is slow per kernel, which arrives late at collectives (neutrino.analysis.crossrank)."""
    from neutrino.analysis import crossrank

    result = crossrank.analyze_job(job, reports, kind, samples=samples)
    print("\n" + "\n".join(crossrank.render(result)))
    for w in result.warnings:
        print(f"neutrino report: warning: {w}", file=sys.stderr)


def _with_cross_rank(text: str, job, reports, kind: str, samples: dict | None = None) -> str:
    """--format json: the document with `cross_rank` added (crossrank.numbers); its warnings on stderr."""
    from neutrino.analysis import crossrank

    result = crossrank.analyze_job(job, reports, kind, samples=samples)
    for w in result.warnings:
        print(f"neutrino report: warning: {w}", file=sys.stderr)
    doc = json.loads(text)
    doc["cross_rank"] = crossrank.numbers(result)
    return json.dumps(doc, indent=2) + "\n"


def _rows(job_dir: str, kind: str, reports, output_format: str, kernel_rows_of: dict) -> str:
    """--format csv|json: the single run's document (spec/analysis.md), each row led by its rank or
    process; `kernel_rows_of`: rank -> report.kernel_rows of its report, taken before its results were dropped."""
    from neutrino.analysis.report import Report, render_csv, render_json

    merged = Report(trace_path=str(job_dir), launches=sum(r.launches for _, r in reports))
    rows = []
    for number, report in reports:
        rows += [{kind: number, **row} for row in kernel_rows_of[number]]
        merged.warnings += [f"{kind} {number}: {w}" for w in report.warnings]
    return render_csv(merged, rows) if output_format == "csv" else render_json(merged, rows)


def _plots(report, kind: str, rank: int, out_dir: str | None, per_kernel: int) -> int:
    from neutrino.analysis.report import write_plots

    where = os.path.join(out_dir, f"{kind}{rank}") if out_dir else os.path.join(report.trace_path, "report")
    try:
        paths, _, notes = write_plots(report, where, per_kernel)
    except OSError as e:
        print(f"neutrino report: error: cannot write plots to {where}: {e}", file=sys.stderr)
        return 1
    if paths:
        print(f"({kind} {rank}: {len(paths)} plot(s) in {where})")
    for note in notes:
        print(f"({kind} {rank}: plot skipped: {note})")
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
    writer = writer_tool(trace)
    for launch in launches:
        try:
            mds = [md for md in launch.maps.values() if tool_for(md, writer) is block_sched]
            if mds:
                results.append(block_sched.analyze_launch(launch, mds[0], trace.probe_text))
            else:
                plain.append(launch)
        except NeutrinoError as e:
            print(f"neutrino export: warning: {label}: launch {launch.index} ({launch.kernel}) left out: {e}",
                  file=sys.stderr)
        getattr(launch, "release", lambda: None)()  # keep one launch's sections at a time
    return results, plain


class _RankTracks:
    """The events of one rank's Perfetto process: tracks shared by all its launches, by name."""

    def __init__(self, pid: int):
        self.pid = pid
        self.events: list[dict] = []
        self.tids: dict[str, int] = {LAUNCH_TRACK: 0}
        self.events.append({"ph": "M", "pid": pid, "tid": 0, "name": "thread_name", "args": {"name": LAUNCH_TRACK}})

    def add_launch(self, events: list[dict], rank: int, kind: str = "rank") -> None:
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
                e["args"] = dict(e.get("args", {}), **{kind: rank})
            self.events.append(e)


def rank_events(rank: int, trace, results, plain, *, t0_ns: float, absolute: bool, clock_ghz: float | None,
                warps: bool, kind: str = "rank") -> list[dict]:
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
    meta = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": describe_rank(rank, trace, kind)}},
            {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": rank}},
            {"ph": "M", "pid": pid, "name": "process_labels", "args": {"labels": f"time: {how}"}}]
    offset = anchor_ns(trace) - t0_ns
    for r in results:
        at = absolute_start_ns(r) - t0_ns if absolute else offset
        events, used = launch_events(r, pid=pid, offset_ns=at, clock_ghz=clock_ghz, warps=warps)
        tracks.add_launch(events, rank, kind)
        offset = max(offset, at + used + LAUNCH_GAP_NS)
    for launch in plain:
        if not launch.duration_ns:
            continue
        tracks.add_launch([{"ph": "X", "pid": pid, "tid": 0, "name": launch.kernel, "cat": "launch",
                            "ts": offset / 1e3, "dur": float(launch.duration_ns) / 1e3,
                            "args": {"launch": int(launch.index)}}], rank, kind)
        offset += float(launch.duration_ns) + LAUNCH_GAP_NS
    return meta + tracks.events


def export_job(job_dir: str, out_json: str, *, warps: bool = False, clock_ghz: float | None = None) -> None:
    """The combined Perfetto/Chrome JSON of a job: one process per rank, one timeline.

    Aligned on %globaltimer when every block_sched launch of every rank recorded it (one
    clock for the GPUs of a host); otherwise on the host clock at each rank's first probed
    launch, which places the ranks to within the host-side latency of a launch."""
    kind, members = load_job(job_dir)
    job = [(rank, trace, *_rank_launches(trace, launches, f"{kind} {rank}")) for rank, trace, launches in members]
    starts = [absolute_start_ns(r) for _, _, results, _ in job for r in results]
    absolute = bool(starts) and all(s is not None for s in starts)
    t0 = float(min(starts)) if absolute else min(anchor_ns(trace) for _, trace, _, _ in job)
    events = []
    for rank, trace, results, plain in job:
        events += rank_events(rank, trace, results, plain, t0_ns=t0, absolute=absolute, clock_ghz=clock_ghz,
                              warps=warps, kind=kind)
    doc = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {"trace": str(job_dir), plural(kind): [rank for rank, *_ in job],
                         "time": "globaltimer" if absolute else "host",
                         "generator": "neutrino export --perfetto"}}
    try:
        with open(out_json, "w") as f:
            json.dump(doc, f)
    except OSError as e:
        raise C.AnalysisError(f"cannot write {out_json}: {e}") from e
