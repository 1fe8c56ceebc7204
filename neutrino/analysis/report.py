"""`neutrino report TRACE_DIR`: summary tables per kernel and the tools' plots.

`main(trace_dir, out_dir=None)` prints, for every kernel of the trace, its
launches, maps, valid and dropped records, then one table per built-in tool
found in the trace (block_sched, gmem_bytes, dmat, tensorop,
program_progress) with that tool's numbers, and writes the tools' pictures to
`out_dir` (default: `report/` in the run directory, which is TRACE_DIR itself
or the one run it holds; a job of ranks or an `-o` trace of several processes
is reported per rank or process, neutrino.analysis.ranks). A trace that cannot be read gives a
one-line error on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import attrs

from neutrino.analysis import analyses, tool_for, tool_name, writer_tool
from neutrino.analysis import _common as C
from neutrino.analysis.retain import summary_only
from neutrino.analysis.tables import format_table, load_trace, short  # noqa: F401 - also callers' names
from neutrino import console
from neutrino.errors import NeutrinoError


@attrs.define
class KernelEntry:
    """What the report gathers about one kernel over its launches."""

    kernel: str
    launches: int = 0
    maps: list = attrs.Factory(list)
    records: int = 0
    dropped: int = 0
    duration_ns: float = 0.0
    timed_launches: int = 0
    results: dict = attrs.Factory(dict)  # tool name -> [LaunchResult]
    generic: dict = attrs.Factory(dict)  # map name -> generic.MapSummary: maps no built-in tool reads


@attrs.define
class Report:
    trace_path: str
    kernels: dict = attrs.Factory(dict)  # kernel name -> KernelEntry, in order of first launch
    warnings: list = attrs.Factory(list)
    readable: int = 0  # launches whose result could be read
    launches: int = 0
    graph_nodes: dict = attrs.Factory(dict)  # (graph id, node id) -> [kernel, replays probed, first, last replay]
    writer: str | None = None  # the built-in tool that wrote the trace (None: a user's probe)
    context: object = None  # neutrino.analysis.context.Context when the run has timeline.bin
    events: list = attrs.Factory(list)  # the run's event log (the probe cost section reads it)

    def results(self, tool) -> list:
        name = tool_name(tool)
        return [r for k in self.kernels.values() for r in k.results.get(name, [])]


def analyze(trace, launches, *, tool_options: dict | None = None, keep_full: int | None = None) -> Report:
    """Run every matching tool analysis on every map of every launch, one launch at a time.

    Per kernel and tool, the first `keep_full` launches (None: all) keep their whole
    result, for the pictures; the later ones only what the kernel's row needs
    (retain.summary_only), and no launch keeps its maps: memory does not grow with
    each launch's arrays."""
    tool_options = tool_options or {}
    from neutrino.analysis import generic

    report = Report(trace_path=str(getattr(trace, "path", "")), launches=len(launches), writer=writer_tool(trace))
    report.warnings.extend(getattr(trace, "problems", ()))
    report.events = list(getattr(trace, "events", None) or ())
    probe_text = getattr(trace, "probe_text", None)
    for launch in launches:
        entry = report.kernels.setdefault(launch.kernel, KernelEntry(launch.kernel))
        entry.launches += 1
        _count_graph_replay(report, launch)
        if launch.duration_ns:
            entry.duration_ns += float(launch.duration_ns)
            entry.timed_launches += 1
        try:
            maps = launch.maps  # result files are opened lazily: a bad one fails here
        except NeutrinoError as e:
            report.warnings.append(f"launch {launch.index} ({short(launch.kernel)}): {e}")
            continue
        getattr(launch, "release", lambda: None)()  # `maps` holds this launch's sections until the next one
        report.readable += 1
        for name, md in maps.items():
            if name not in entry.maps:
                entry.maps.append(name)
            valid, dropped = C.record_stats(md)
            entry.records += valid
            entry.dropped += dropped
            tool = tool_for(md, report.writer)
            if tool is None:
                _add_generic(report, entry, launch, md, generic)
                continue
            try:
                result = tool.analyze_launch(launch, md, probe_text, **tool_options.get(tool_name(tool), {}))
            except (NeutrinoError, ValueError) as e:
                report.warnings.append(f"launch {launch.index} ({short(launch.kernel)}), map {name}: {e}")
                continue
            kept = entry.results.setdefault(tool_name(tool), [])
            kept.append(result if keep_full is None or len(kept) < keep_full else summary_only(tool_name(tool), result))
    _load_context(report)
    return report


def _load_context(report: Report) -> None:
    """The run's timeline and ranges (spec/analysis.md, "Where GPU time went"), when it has them."""
    from neutrino.analysis import context

    try:
        report.context = context.load(report.trace_path)
    except (NeutrinoError, OSError, ValueError) as e:
        report.warnings.append(f"context tables: {e}")
        return
    if report.context is not None and report.context.counts_error:
        report.warnings.append(f"context tables: {report.context.counts_error}")


def _add_generic(report: Report, entry: KernelEntry, launch, md, generic) -> None:
    try:
        generic.add_launch_map(entry.generic, md)
    except (NeutrinoError, ValueError) as e:
        report.warnings.append(f"launch {launch.index} ({short(launch.kernel)}), map {md.name}: {e}")


def _count_graph_replay(report: Report, launch) -> None:
    """Launches that were replays of a CUDA graph node, grouped by graph and node."""
    where = getattr(launch, "graph", None)
    if where is None:
        return
    replay = int(launch.event.get("replay", launch.event.get("kernel_launch", 0)) or 0)
    got = report.graph_nodes.get(where)
    if got is None:
        report.graph_nodes[where] = [launch.kernel, 1, replay, replay]
    else:
        got[1] += 1
        got[2], got[3] = min(got[2], replay), max(got[3], replay)


def _graph_table(report: Report) -> list[str]:
    if not report.graph_nodes:
        return []
    rows = [[str(g), str(n), short(kernel), probed, f"{first}-{last}"]
            for (g, n), (kernel, probed, first, last) in sorted(report.graph_nodes.items())]
    in_graphs = sum(r[3] for r in rows)
    return ["", f"[CUDA graphs] {in_graphs} of {report.launches} launches were graph replays",
            format_table(["graph", "node", "kernel", "replays", "replay numbers"], rows, left=(2,))]


def render(report: Report) -> str:
    out = [f"trace {report.trace_path}: {report.launches} probed launches, {len(report.kernels)} probed kernels", ""]
    if report.context is not None:
        from neutrino.analysis import context

        out += context.render(report.context) + ["", "[probed launches]"]
    if not report.kernels:
        out.append("(no probed launch in this trace)")
    rows = []
    for k in report.kernels.values():
        duration = f"{k.duration_ns / 1e3:.1f}" if k.timed_launches else "-"
        rows.append([short(k.kernel), k.launches, ", ".join(k.maps) or "-", C.fmt_num(k.records),
                     C.fmt_num(k.dropped), duration])
    if rows:
        out.append(format_table(["kernel", "launches", "maps", "records", "dropped", "time (us)"], rows,
                                left=(0, 2)))
    if any(k.dropped for k in report.kernels.values()):
        out.append("note: dropped records were counted but not saved (cap reached); tool numbers "
                   "cover the saved records only")
    out += _graph_table(report)
    for tool in analyses():
        name = tool_name(tool)
        summaries = [(k.kernel, tool.kernel_summary(k.results[name]))
                     for k in report.kernels.values() if k.results.get(name)]
        if not summaries:
            continue
        headers = ["kernel"] + list(dict.fromkeys(col for _, s in summaries for col in s))
        rows = [[short(kernel)] + [s.get(h, "-") for h in headers[1:]] for kernel, s in summaries]
        out += ["", f"[{name}]", format_table(headers, rows)]
        if hasattr(tool, "details"):  # a tool with a table of its own per kernel (lines: its ranked lines)
            for k in report.kernels.values():
                if k.results.get(name):
                    out += tool.details(short(k.kernel), k.results[name], format_table)
    from neutrino.analysis import generic

    for title, headers, rows in generic.tables(report.kernels.values()):
        out += ["", f"[{title}]", format_table(headers, [[short(r[0])] + r[1:] for r in rows])]
    out += _probe_cost_lines(report)
    return "\n".join(out)


def _probe_cost_lines(report: Report) -> list[str]:
    """The "probe cost" section (neutrino.analysis.probe_cost); its failures become warnings."""
    from neutrino.analysis import probe_cost

    lines, warnings = probe_cost.section(report.events, format_table, short)
    report.warnings.extend(w for w in warnings if w not in report.warnings)
    return lines


def kernel_rows(report: Report) -> list[dict]:
    """One dict per kernel: the text report's columns, then each tool's numbers as `tool.quantity`
    (for --format csv/json: numbers, not the text report's display strings)."""
    rows = []
    cost = _probe_cost_columns(report)
    for k in report.kernels.values():
        row = {"kernel": k.kernel, "launches": k.launches, "maps": " ".join(k.maps), "records": k.records,
               "dropped": k.dropped, "time_us": round(k.duration_ns / 1e3, 3) if k.timed_launches else None}
        for tool in analyses():
            name = tool_name(tool)
            if k.results.get(name):
                numbers = getattr(tool, "kernel_numbers", tool.kernel_summary)(k.results[name])
                row.update({f"{name}.{col}": _plain(value) for col, value in numbers.items()})
        for map_name, summary in k.generic.items():
            row.update({f"{map_name}.{col}": _plain(value) for col, value in summary.numbers().items()})
        row.update(cost.get(k.kernel, {}))
        rows.append(row)
    return rows


def _probe_cost_columns(report: Report) -> dict[str, dict]:
    """kernel -> its `probe_cost.KEY` columns (the first context's, for a kernel probed in several)."""
    from neutrino.analysis import probe_cost

    out: dict[str, dict] = {}
    for row in probe_cost.numbers(report.events):
        out.setdefault(row["kernel"], {f"probe_cost.{key}": value for key, value in row.items()
                                       if key not in ("kernel", "error")})
    return out


def _plain(value):
    """numpy scalars as Python numbers (json cannot write them); everything else as it is."""
    return value.item() if hasattr(value, "item") else value


def render_csv(report: Report, rows: list[dict] | None = None) -> str:
    """`rows`: kernel_rows(report) unless given (a job's rows, led by their rank)."""
    import csv
    import io

    rows = kernel_rows(report) if rows is None else rows
    columns = list(dict.fromkeys(col for row in rows for col in row)) or ["kernel"]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def render_json(report: Report, rows: list[dict] | None = None) -> str:
    import json

    rows = kernel_rows(report) if rows is None else rows
    doc = {"trace": report.trace_path, "launches": report.launches, "kernels": rows,
           "warnings": list(report.warnings)}
    if report.context is not None:
        from neutrino.analysis import context

        doc["gpu_time"] = {"busy_ns": report.context.busy_ns, "window_ns": report.context.window_ns,
                           "untimed": report.context.untimed, "rows": context.numbers(report.context),
                           "graph_replays": context.graph_numbers(report.context),
                           "quiet_replays": report.context.quiet if report.context.counted else None,
                           "quiet_estimate_ns": report.context.quiet_estimate_ns,
                           "graph_counts_error": report.context.counts_error or None}
    return json.dumps(doc, indent=2) + "\n"


def write_plots(report: Report, out_dir: str, per_kernel: int = 4) -> tuple[list[str], int, list[str]]:
    """Pictures of the first `per_kernel` launches of every kernel (0: all), drawn with matplotlib.

    Returns the paths written, the number of launches left without plots by
    `per_kernel`, and one line per picture not drawn saying why.
    """
    from neutrino.analysis.plot import NoPlot, matplotlib_missing, save

    chosen = []
    skipped = 0
    for tool in (t for t in analyses() if t.HAS_PLOTS):
        for k in report.kernels.values():
            mine = k.results.get(tool_name(tool), [])
            keep = mine if per_kernel <= 0 else mine[:per_kernel]
            chosen += [(tool, r) for r in keep]
            skipped += len(mine) - len(keep)
    if not chosen:
        return [], skipped, []
    missing = matplotlib_missing()
    if missing:
        return [], skipped, [f"{len(chosen)} picture(s) not drawn: {missing}"]
    os.makedirs(out_dir, exist_ok=True)
    paths, notes = [], []
    for tool, r in chosen:
        stem = os.path.join(out_dir, f"{r.index:04d}_{C.safe_name(r.kernel)}")
        try:
            figures = tool.figures(r)
        except NoPlot as e:
            notes.append(f"launch {r.index} ({short(r.kernel)}): no {tool_name(tool)} picture: {e}")
            continue
        for suffix, fig in figures:
            save(fig, f"{stem}_{suffix}.png")
            paths.append(f"{stem}_{suffix}.png")
        if hasattr(tool, "write_description"):
            paths.append(tool.write_description(r, out_dir))
    return paths, skipped, notes


def main(trace_dir: str, out_dir: str | None = None, *, plots: bool = True,
         plots_per_kernel: int = 4, tool_options: dict | None = None, output_format: str = "text") -> int:
    """Print the summary of one run, `trace_dir`, and write plots; the exit status (a job or the
    processes of one program: neutrino.analysis.ranks.main, which `neutrino report` calls).

    `output_format` "csv" or "json" prints the per-kernel numbers for scripts
    instead (one row per kernel, tool columns as `tool.column`), and no plots.

    `plots_per_kernel` limits the pictures to the first launches of each
    kernel (0: every launch). `tool_options` passes keyword options to a
    tool's `analyze_launch`, e.g. `{"dmat": {"time_base": "block", "granule": 32}}`.
    """
    try:
        trace, launches = load_trace(trace_dir)
        report = analyze(trace, launches, tool_options=tool_options,
                         keep_full=plotted_per_kernel(plots and output_format == "text", plots_per_kernel))
    except NeutrinoError as e:
        console.error(str(e))
        return 1
    if output_format != "text":
        sys.stdout.write(render_csv(report) if output_format == "csv" else render_json(report))
        plots = False
    else:
        print(render(report))
    for w in report.warnings:
        console.warning(str(w))
    if report.launches and not report.readable:
        console.error(f"{trace_dir}: none of the {report.launches} launch result(s) could be read")
        return 1
    if not plots:
        return 0
    out_dir = out_dir or os.path.join(report.trace_path or trace_dir, "report")  # in the run directory
    try:
        paths, skipped, notes = write_plots(report, out_dir, plots_per_kernel)
    except OSError as e:
        console.error(f"cannot write plots to {out_dir}: {e}")
        return 1
    if paths:
        print("\nwrote " + "\n      ".join(paths))
    for note in notes:
        print(f"plot skipped: {note}")
    if skipped:
        print(f"({skipped} more launches not plotted: at most {plots_per_kernel} per kernel per tool)")
    return 0


def plotted_per_kernel(plots: bool, plots_per_kernel: int) -> int | None:
    """The launches per kernel and tool whose whole result `analyze` keeps: those plotted (None: all)."""
    if not plots:
        return 0
    return plots_per_kernel if plots_per_kernel > 0 else None
