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
    `offset`, or None without a block_sched map: the figures of `analysis.analyze_launch(...).stats`,
    computed without its timeline (slots, refills, per-warp arrays, one object per SM) that the
    exit line does not print. The analysis is imported here: after the program, never at start."""
    from neutrino.analysis import _common as C
    from neutrino.tools.block_sched import analysis as A
    from neutrino.trace import read_result

    result = read_result(result_path, offset)
    md = result.maps.get("block_sched")
    if md is None:
        return None
    start_f, _, synchronized = A.time_base(md, None)
    records, unit = C.read_valid(md)
    return schedule_figures(records[start_f], records[C.find_field(md.dtype, A.ELAPSED_FIELDS, map_name=md.name)],
                            records[C.find_field(md.dtype, A.SM_FIELDS, map_name=md.name)], unit,
                            C.units_per_block(md.level, result.block), synchronized)


def schedule_figures(start, elapsed, sm, unit, units_per_block: int,
                     synchronized: bool) -> tuple[int, int, float, float, int]:
    """The exit line's figures of one launch from its per-warp records, as spec/analysis.md defines
    them (block = unit // units_per_block spans its warps' earliest start to latest end, on the SM
    of its earliest warp; times relative to each SM's first block start unless synchronized):
    O(n log n) numpy sorts, no Python loop over blocks or SMs."""
    import numpy as np

    start = np.asarray(start).astype(np.int64)
    if len(start) == 0:
        return 0, 0, float("nan"), float("nan"), 0
    end = start + np.asarray(elapsed).astype(np.int64)
    block = np.asarray(unit).astype(np.int64) // max(1, int(units_per_block))
    order = np.lexsort((start, block))  # by block, then start: the block's earliest warp first
    first = np.flatnonzero(np.r_[True, block[order][1:] != block[order][:-1]])
    blk_start = start[order][first]
    blk_end = np.maximum.reduceat(end[order], first)
    blk_sm = np.asarray(sm).astype(np.int64)[order][first]
    sms, sm_index = np.unique(blk_sm, return_inverse=True)
    origin = np.full(len(sms), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(origin, sm_index, blk_start)
    if synchronized:
        origin[:] = blk_start.min()
    rel_start, rel_end = blk_start - origin[sm_index], blk_end - origin[sm_index]
    o = np.lexsort((rel_end, rel_start, sm_index))
    group, rel_start, rel_end = sm_index[o], rel_start[o], rel_end[o]
    bounds = np.flatnonzero(np.r_[True, group[1:] != group[:-1], True])
    # running max of end within each SM: each SM's values offset above every earlier SM's
    low, high = int(min(rel_start.min(), rel_end.min())), int(max(rel_start.max(), rel_end.max()))
    offset = group * (high - low + 1)
    reach = np.maximum.accumulate(rel_end - low + offset) - offset + low
    holes = rel_start[1:] - reach[:-1]
    gap = (group[1:] == group[:-1]) & (holes > 0)
    gap_per_sm = np.bincount(group[1:][gap], weights=holes[gap], minlength=len(sms))
    busy = (reach[bounds[1:] - 1] - rel_start[bounds[:-1]]) - gap_per_sm
    last_end = np.maximum.reduceat(rel_end, bounds[:-1])
    span = int(last_end.max()) - int(rel_start.min())
    mean_busy = float(busy.mean())
    return (len(first), len(sms), float(busy.max()) / mean_busy if mean_busy > 0 else float("nan"),
            int(last_end.max() - last_end.min()) / span if span > 0 else float("nan"), int(np.count_nonzero(gap)))


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
