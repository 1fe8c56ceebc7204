"""analyze_hook of the built-in block_sched tool (neutrino/tools/block_sched/): one summary line per kernel.

The runtime calls analyze(result_path, launch) for every probed launch after the
program has ended (never on its launch path), then finish(stream) once: that
prints, per kernel, the launches seen and the mean scheduling figures over a
sample of them (`sampled`: spec/tools.md).
"""

from __future__ import annotations

import sys


# Per-kernel running sums, kept between analyze() calls of one run (this module is loaded per run).
_kernels: dict[str, dict] = {}
EVERY_UNTIL = 4  # launches 0..3 of each kernel are analysed, then 4, 8, 16, ...: the summary's sample


def sampled(n: int) -> bool:
    """Whether a kernel's n-th launch (0-based) is in the exit summary's sample: the first
    EVERY_UNTIL, then each power of two. A program's exit then costs O(kernels x log launches),
    not a pass over every per-warp record (`neutrino report` reads them all)."""
    return n < EVERY_UNTIL or n & (n - 1) == 0


def analyze(result_path: str, launch: dict) -> None:
    name = str(launch.get("kernel", "?"))
    k = _kernels.setdefault(name, {"launches": 0, "analysed": 0, "blocks": 0, "sms": 0, "busy": 0.0, "tail": 0.0,
                                   "gaps": 0})
    k["launches"] += 1
    if not sampled(k["launches"] - 1):
        return
    figures = launch_figures(result_path, int(launch.get("result_offset", 0) or 0))
    if figures is None:
        return
    blocks, sms, busy, tail, gaps = figures
    k["analysed"] += 1
    k["blocks"] += blocks
    k["sms"] = max(k["sms"], sms)
    k["busy"] += busy if busy == busy else 0.0
    k["tail"] += tail if tail == tail else 0.0
    k["gaps"] += gaps


def launch_figures(result_path: str, offset: int) -> tuple[int, int, float, float, int] | None:
    """(blocks, SMs, busy_imbalance, tail_fraction, idle-gap count) of the launch whose frame is at
    `offset`, or None without a block_sched map: analysis.schedule_figures, the report's own code
    for these figures without its timeline (slots, refills, per-warp arrays, one object per SM)
    that the exit line does not print. The analysis is imported here: after the program, never at start."""
    from neutrino.analysis import _common as C
    from neutrino.tools.block_sched import analysis as A
    from neutrino.trace import read_result

    result = read_result(result_path, offset)
    md = result.maps.get("block_sched")
    if md is None:
        return None
    start_f, _, synchronized = A.time_base(md, None)
    records, unit = C.read_valid(md)
    return A.schedule_figures(records[start_f], records[C.find_field(md.dtype, A.ELAPSED_FIELDS, map_name=md.name)],
                              records[C.find_field(md.dtype, A.SM_FIELDS, map_name=md.name)], unit,
                              C.units_per_block(md.level, result.block), synchronized)


def finish(stream=None) -> None:
    stream = stream or sys.stderr
    for name, k in sorted(_kernels.items(), key=lambda kv: -kv[1]["launches"]):
        n = k["analysed"]
        if not n:
            continue
        sample = "" if n == k["launches"] else f" ({n} analysed: neutrino report for all)"
        stream.write(
            f"neutrino: block_sched {name}: {k['launches']} launch(es){sample}, {k['blocks'] / n:.0f} blocks on up to "
            f"{k['sms']} SMs, busy max/mean {k['busy'] / n:.2f}, tail {k['tail'] / n:.1%}, gaps {k['gaps'] / n:.1f} "
            "per launch\n")
    _kernels.clear()
