"""The report's "probe cost" section: what probing added to each probed kernel.

Read from the run's event log alone: the runtime's `probe_cost` events (one per
probed kernel and context: registers, static shared and local bytes, blocks per
SM for the first launch's block, the engine's instruction counts) and, with
`--benchmark`, its `benchmark` events (the measured slowdown). Every column is
defined in spec/tools.md ("Probe cost"); none needs the result files.
"""

from __future__ import annotations

import statistics

HEADERS = ["kernel", "threads", "regs", "blocks/SM", "occupancy", "limit", "shared (B)", "local (B)",
           "instructions", "per site", "slowdown"]


def slowdowns(events: list[dict]) -> dict[str, float]:
    """kernel -> median of every probed repetition / median of every baseline repetition, over all of
    the kernel's `benchmark` events (the `slowdown` of benchmark.txt)."""
    base: dict[str, list[float]] = {}
    probed: dict[str, list[float]] = {}
    for ev in events:
        if ev.get("event") == "benchmark":
            base.setdefault(ev.get("kernel"), []).extend(_numbers(ev.get("baseline_ns")))
            probed.setdefault(ev.get("kernel"), []).extend(_numbers(ev.get("probed_ns")))
    out = {}
    for kernel, b in base.items():
        p = probed.get(kernel, [])
        if b and p and statistics.median(b) > 0:
            out[kernel] = statistics.median(p) / statistics.median(b)
    return out


def _numbers(values) -> list[float]:
    return [float(v) for v in values or () if isinstance(v, (int, float))]


def numbers(events: list[dict]) -> list[dict]:
    """One dict per `probe_cost` event (the csv/json keys of spec/tools.md), in the log's order;
    a kernel probed in several contexts has one per context."""
    slow = slowdowns(events)
    rows = []
    for ev in events:
        if ev.get("event") != "probe_cost":
            continue
        orig, probed = ev.get("original") or {}, ev.get("probed") or {}
        insns = ev.get("instructions") or {}
        row = {"kernel": ev.get("kernel"), "threads": ev.get("threads")}
        for key, field in (("regs", "regs"), ("blocks", "blocks_per_sm"), ("occupancy", "occupancy"),
                           ("shared", "shared_static"), ("local", "local")):
            row[f"{key}_original"], row[f"{key}_probed"] = orig.get(field), probed.get(field)
        row.update(limiter=probed.get("limiter"), occupancy_from=probed.get("occupancy_from"),
                   instructions_original=insns.get("original"), instructions_probed=insns.get("probed"),
                   instructions_inserted=insns.get("inserted"), sites=insns.get("sites"),
                   per_site=insns.get("per_site"), slowdown=_round(slow.get(ev.get("kernel"))),
                   error=ev.get("error"))
        rows.append(row)
    return rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _pair(a, b, fmt=str) -> str:
    if a is None or b is None:
        return "-"
    return f"{fmt(a)} -> {fmt(b)}"


def _percent(value) -> str:
    return f"{100 * value:.0f}%"


def text_row(row: dict) -> list[str]:
    inserted = row["instructions_inserted"]
    instructions = "-" if inserted is None else \
        f"{row['instructions_original']} -> {row['instructions_probed']} ({inserted:+d})"
    return [row["kernel"], "-" if row["threads"] is None else str(row["threads"]),
            _pair(row["regs_original"], row["regs_probed"]),
            _pair(row["blocks_original"], row["blocks_probed"]),
            _pair(row["occupancy_original"], row["occupancy_probed"], _percent),
            row["limiter"] or "-",
            _pair(row["shared_original"], row["shared_probed"]),
            _pair(row["local_original"], row["local_probed"]),
            instructions,
            "-" if row["per_site"] is None else f"{row['per_site']:.1f}",
            "-" if row["slowdown"] is None else f"{row['slowdown']:.2f}x"]


def section(events: list[dict], format_table, short) -> tuple[list[str], list[str]]:
    """(the section's lines, warnings): empty when the log has no `probe_cost` event."""
    rows = numbers(events)
    if not rows:
        return [], []
    table = [[short(r[0])] + r[1:] for r in map(text_row, rows)]
    lines = ["", "[probe cost] (first launch's block; occupancy = resident warps / the SM's warp slots)",
             format_table(HEADERS, table)]
    if not any(r["slowdown"] is not None for r in rows):
        lines.append("slowdown: run with --benchmark to measure it")
    warnings = [f"probe cost of {r['kernel']}: {r['error']}" for r in rows if r["error"]]
    return lines, warnings
