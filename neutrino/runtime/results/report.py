"""What the runtime prints and writes at exit: summary, benchmark and memusage tables."""

from __future__ import annotations

from neutrino.runtime.modules import frameworks


def _spread(values: list[float]) -> tuple[float, float]:
    """Median and relative half-range (the noise of repeated runs)."""
    import statistics  # here: every profiled process imports this module at exit, few print a benchmark

    med = statistics.median(values)
    return med, ((max(values) - min(values)) / 2 / med if med > 0 else 0.0)


def benchmark_table(bench: dict[str, list[tuple[list[float], list[float]]]]) -> str:
    """Per kernel: every benchmarked launch's interleaved repetitions pooled; the
    slowdown with its noise (the relative half-range of both timings added). A ratio
    below 1 by more than the noise is not a speed-up: it is flagged as unreliable."""
    rows = [f"{'kernel':40s} {'runs':>5s} {'baseline us':>12s} {'probed us':>12s} {'slowdown':>9s} {'noise':>7s}"]
    notes = []
    for name, reps in sorted(bench.items()):
        base_all = [v for b, _ in reps for v in b]
        probed_all = [v for _, p in reps for v in p]
        if not base_all or not probed_all:
            continue
        base, nb = _spread(base_all)
        probed, np_ = _spread(probed_all)
        slow = probed / base if base > 0 else float("nan")
        noise = nb + np_
        flag = ""
        if slow < 1.0 - noise:
            flag = "  !"
            notes.append(f"! {_short(name, 60)}: probed faster than unprobed beyond the noise: a measurement problem "
                         f"(clock or cache state), not a speed-up")
        rows.append(f"{_short(name):40s} {len(probed_all):5d} {base / 1e3:12.2f} {probed / 1e3:12.2f} {slow:8.2f}x "
                    f"{noise:6.1%}{flag}")
    return "\n".join(rows + notes) + "\n"


def memusage_table(mem: dict[str, dict]) -> str:
    rows = [f"{'kernel':40s} {'launches':>8s} {'max bytes':>14s} {'total bytes':>14s}"]
    for name, m in sorted(mem.items()):
        note = "  (+ count-sized maps: their rings are sized at the launch)" if m["count_sized"] else ""
        rows.append(f"{_short(name):40s} {m['launches']:8d} {m['max_bytes']:14d} {m['total_bytes']:14d}{note}")
    return "\n".join(rows) + "\n"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _kernel_counts(rt) -> tuple[int, int, int]:
    """Distinct kernels (by name): looked up by the program in modules with PTX, probed
    (instrumented: the names in kernel/*/kernel.json), and fallen back at least once."""
    seen = rt.registry.kernels_seen() if hasattr(rt.registry, "kernels_seen") else set()
    probed = set(_probed_kernel_names(rt.trace.path))
    fell_back = len({kernel for kernel, _ in rt.fallbacks})
    return len(seen | probed), len(probed), fell_back


def _probed_kernel_names(run_dir) -> list[str]:
    import json

    names = []
    for info in sorted((run_dir / "kernel").glob("*/kernel.json")):
        try:
            names += list(json.loads(info.read_text()).get("kernels", {}))
        except (OSError, ValueError):
            continue
    return names


def unmatched_probe_lines(rt, run_dir) -> list[str]:
    """A warning per instruction-position probe that matched no instruction in any probed kernel
    (kernel.json's `matched`): a mistyped or absent position must not pass for a quiet success."""
    import json

    matched: dict[str, int] = {}
    kernels = 0
    for info_file in sorted((run_dir / "kernel").glob("*/kernel.json")):
        try:
            infos = json.loads(info_file.read_text()).get("kernels", {})
        except (OSError, ValueError):
            continue
        for info in infos.values():
            kernels += 1
            for probe, count in info.get("matched", {}).items():
                matched[probe] = matched.get(probe, 0) + count
    lines = []
    for probe, count in matched.items():
        if count == 0:
            # only now: the verified probe file is built at the first kernel instrumented (probeload.py)
            positions = {p.name: p.position for p in getattr(getattr(rt, "probes", None), "probes", ())}
            position = ":".join(".".join(prefix) for prefix in positions.get(probe, ()))
            lines.append(f"neutrino: warning: probe {probe}: position '{position}' matched 0 instructions "
                         f"in the {kernels} probed kernel(s): it recorded nothing")
    return lines


def launches_phrase(timeline: dict | None, probed_launches: int) -> str:
    """`214 kernel launches ran (Triton 120, cuBLAS 60, ATen 34), 120 probed`: every kernel launch the
    timeline recorded, per origin, and how many of them ran probed code. Empty without a timeline."""
    if not timeline or "kernels" not in timeline:
        return ""
    origins = ", ".join(f"{k} {n}" for k, n in (timeline.get("by_origin") or {}).items())
    return f"{timeline['kernels']} kernel launch(es) ran" + (f" ({origins})" if origins else "") + \
        f", {probed_launches} probed"


def closing_line(rt, seen: int, probed: int, fell_back: int) -> str:
    """What happened, in one line, counting launches in launches and kernels in distinct kernels:
    the launches that ran (with a timeline), the kernels seen and probed, the results, the trace."""
    kernels = f"{seen} kernel(s) seen, {probed} probed" + (f", {fell_back} fell back to the original" if fell_back else "")
    timeline = getattr(rt, "timeline_summary", None)
    launches = launches_phrase(timeline, rt.probed_launches)
    if launches:
        return (f"neutrino: {launches}; {kernels}; {_mib(rt.result_bytes)} of results; "
                f"trace in {rt.trace.path}\n")
    return (f"neutrino: {kernels}; {rt.probed_launches} probed launch(es), {_mib(rt.result_bytes)} of results; "
            f"trace in {rt.trace.path}\n")


def _untouched(rt, stream) -> None:
    """One line for the kernels we never touch (collectives), not one per launch or module."""
    n = len(rt.registry.collectives)
    if n:
        stream.write(f"neutrino: {n} NCCL kernel(s) ran untouched (collectives are probed only when -k names them)\n")


def finish(rt, stream) -> None:
    tr = rt.trace
    if not tr.materialized and not rt.bench and not rt.opt.memusage:
        tr.close()  # this process never loaded a CUDA module: leave no directory; the launcher says so
        return
    try:
        _summarise(rt, tr, stream)
    finally:
        _close(rt, tr)


def _close(rt, tr) -> None:
    """The `phase` events (exit_summary ends here), then the trace's files are closed."""
    phases = getattr(rt, "phases", None)
    if phases is not None:
        try:
            from neutrino.runtime.start.phases import add_driver_loads, add_process_stats

            shim_lib = getattr(getattr(rt, "shim", None), "lib", None)
            add_driver_loads(phases, shim_lib)  # module_jit, module_driver
            add_process_stats(phases, shim_lib)  # constructor, lookup
        except Exception:  # noqa: BLE001 - the driver's clocks never cost the other phases their events
            pass
        try:
            phases.emit(tr.event)
        except Exception:  # noqa: BLE001 - timings never cost the trace its close
            pass
    tr.close()


WORK_SITES = ("writer", "poller", "launch", "pick", "runtime")  # shim/writer.h, NT_WORK_*


def _capture_stats(rt) -> dict:
    """Captures the shim saw begin, and the stream work of ours done while one was open, by who did it
    (shim/writer.c, neutrino_graph_capture_stats): {} without the shim."""
    import ctypes as C

    fn = getattr(getattr(getattr(rt, "shim", None), "lib", None), "neutrino_graph_capture_stats", None)
    if fn is None:
        return {}
    out = (C.c_uint64 * (1 + len(WORK_SITES)))()
    fn(out)
    return {"captures": out[0], "stream_work_in_capture": dict(zip(WORK_SITES, out[1:]))}


def _summarise(rt, tr, stream) -> None:
    quiet = getattr(rt.opt, "verbosity", 0) < 0
    if rt.bench:
        table = benchmark_table(rt.bench)
        tr.write_text("benchmark.txt", table)
        stream.write("neutrino --benchmark (median kernel time, L2 flushed):\n" + table)
    if rt.opt.memusage:
        table = memusage_table(rt.memusage)
        tr.write_text("memusage.txt", table)
        stream.write("neutrino --memusage (buffer bytes probing would allocate):\n" + table)
    total_fb = sum(rt.fallbacks.values())
    total_drops = sum(rt.drops.values())
    seen, probed, fell_back = _kernel_counts(rt)
    tr.event("exit", launches=rt.probed_launches, fallbacks=total_fb, dropped=total_drops,
             kernels_seen=seen, kernels_probed=probed, kernels_fell_back=fell_back,
             dropped_by=[{"kernel": k, "reason": r, "launches": n} for (k, r), n in sorted(rt.drops.items())],
             result_bytes=rt.result_bytes, buffer_peak=rt.pool.peak, write_errors=rt.writer.write_errors,
             collectives=len(rt.registry.collectives), **_capture_stats(rt))
    if quiet:
        stream.flush()
        return
    stream.write(closing_line(rt, seen, probed, fell_back))
    for line in unmatched_probe_lines(rt, tr.path):
        stream.write(line + "\n")
    graph_nodes = getattr(rt, "graph_summary", [])
    if graph_nodes:
        written = sum(n["written"] for n in graph_nodes)
        replays = sum(n["replays"] for n in graph_nodes)
        stream.write(f"neutrino: {len(graph_nodes)} probed CUDA graph node(s): {written} of {replays} replay "
                     "result(s) written\n")
    for line in frameworks.summary_lines(getattr(rt, "no_ptx", {}), getattr(rt, "no_ptx_examples", None)):
        stream.write(line + "\n")
    if getattr(rt.opt, "verbosity", 0) > 0:
        for name in _probed_kernel_names(tr.path):
            stream.write(f"  probed {_short(name, 100)}\n")
    if total_drops:
        stream.write(f"neutrino: {total_drops} launch(es) ran unprobed because a budget was full "
                     "(--buffer-budget, --trace-budget, --when-full=wait):\n")
        for (kernel, reason), n in rt.drops.most_common(10):
            stream.write(f"  {n:6d}  {reason:14s} {_short(kernel, 60)}\n")
    _untouched(rt, stream)
    if total_fb:
        stream.write(f"neutrino: {total_fb} launch(es) ran unprobed because of a failure on our side:\n")
        for (kernel, stage), n in rt.fallbacks.most_common(10):
            stream.write(f"  {n:6d}  {stage:10s} {_short(kernel, 60)}\n")
        stream.write(f"  (reasons: grep fallback {tr.path / 'event.log'})\n")
    stream.flush()
