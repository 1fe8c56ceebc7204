"""What the runtime prints and writes at exit: summary, benchmark and memusage tables."""

from __future__ import annotations

import statistics


def benchmark_table(bench: dict[str, list[tuple[float, float]]]) -> str:
    rows = [f"{'kernel':40s} {'launches':>8s} {'baseline us':>12s} {'probed us':>12s} {'slowdown':>9s}"]
    for name, pairs in sorted(bench.items()):
        base = statistics.median(p[0] for p in pairs) / 1e3
        probed = statistics.median(p[1] for p in pairs) / 1e3
        slow = probed / base if base > 0 else float("nan")
        rows.append(f"{_short(name):40s} {len(pairs):8d} {base:12.2f} {probed:12.2f} {slow:8.2f}x")
    return "\n".join(rows) + "\n"


def memusage_table(mem: dict[str, dict]) -> str:
    rows = [f"{'kernel':40s} {'launches':>8s} {'max bytes':>14s} {'total bytes':>14s}"]
    for name, m in sorted(mem.items()):
        note = "  (+ count-sized maps: size known only after the counting kernel)" if m["count_sized"] else ""
        rows.append(f"{_short(name):40s} {m['launches']:8d} {m['max_bytes']:14d} {m['total_bytes']:14d}{note}")
    return "\n".join(rows) + "\n"


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def finish(rt, stream) -> None:
    tr = rt.trace
    if not tr.materialized and not rt.bench and not rt.opt.memusage:
        tr.close()  # this process never loaded a CUDA module: leave no directory, say nothing
        return
    if rt.bench:
        table = benchmark_table(rt.bench)
        tr.write_text("benchmark.txt", table)
        stream.write("neutrino --benchmark (median kernel time, L2 flushed):\n" + table)
    if rt.opt.memusage:
        table = memusage_table(rt.memusage)
        tr.write_text("memusage.txt", table)
        stream.write("neutrino --memusage (buffer bytes probing would allocate):\n" + table)
    total_fb = sum(rt.fallbacks.values())
    tr.event("exit", launches=rt.probed_launches, fallbacks=total_fb)
    stream.write(f"neutrino: {rt.probed_launches} probed launch(es), trace in {tr.path}\n")
    if total_fb:
        stream.write(f"neutrino: {total_fb} launch(es) ran unprobed because of a failure on our side:\n")
        for (kernel, stage), n in rt.fallbacks.most_common(10):
            stream.write(f"  {n:6d}  {stage:10s} {_short(kernel, 60)}\n")
        stream.write(f"  (reasons: grep fallback {tr.path / 'event.log'})\n")
    stream.flush()
    tr.close()
