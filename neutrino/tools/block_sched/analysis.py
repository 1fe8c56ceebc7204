"""block_sched: how the blocks of a launch were scheduled on the SMs.

Input: one record per warp with its start time, elapsed time and SM id
(`start/elapsed/cuid` from the built-in tool; a user's probe may spell them
`lstart/elapse/smid` and others, spec/analysis.md). Output: a per-SM timeline of blocks and the
quantities defined in `spec/analysis.md` (idle gaps, refill gaps, tail effect,
imbalance across SMs).

Times from `%clock64` are per-SM cycle counters, not synchronised across SMs:
every SM's times are then taken relative to that SM's own first block start,
and the cross-SM quantities (tail) assume that the SMs received their first
blocks together. Times from `%globaltimer` (nanoseconds, one clock for the
whole GPU) are taken relative to the launch's first start and are exact.
"""

from __future__ import annotations

import bisect

import attrs
import numpy as np

from neutrino.analysis import _common as C

MAP_NAMES = ("block_sched",)
HAS_PLOTS = True
START_FIELDS = ("start", "lstart", "gstart", "begin")
ELAPSED_FIELDS = ("elapsed", "elapse", "duration", "dur")
SM_FIELDS = ("cuid", "smid", "sm", "sm_id")
# Start fields that hold %globaltimer nanoseconds (synchronised across SMs).
GLOBAL_TIME_FIELDS = ("gstart", "gtime", "globaltimer")


@attrs.frozen(eq=False)
class BlockTimeline:
    """Blocks of one launch, sorted by (SM, start); times relative to `origin`.

    `origin[sm]` is the SM's own first block start (per-SM clocks) or the
    launch's first start for every SM (`synchronized`). A block spans from the
    earliest start to the latest end of its recorded warps; `slot` is the
    track of the block within its SM: blocks resident at the same time get
    different slots, and a slot is reused by the block that starts soonest
    after it was freed.
    """

    time_unit: str  # "cycles" or "ns"
    synchronized: bool  # whether times of different SMs are comparable
    block: np.ndarray  # int64 linear block index
    sm: np.ndarray  # int64
    start: np.ndarray  # int64, relative
    end: np.ndarray  # int64, relative
    warps: np.ndarray  # int64, warps recorded in the block
    slot: np.ndarray  # int64
    refill: np.ndarray  # int64, start - end of the slot's previous block; -1 for a slot's first block
    origin: dict  # sm -> raw time of the SM's origin
    split_blocks: int  # blocks whose warps reported different SMs
    warp_unit: np.ndarray  # per recorded warp: unit, index into the block arrays, relative start/end
    warp_block: np.ndarray
    warp_start: np.ndarray
    warp_end: np.ndarray

    def __len__(self) -> int:
        return len(self.block)


def assign_slots(sm: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tracks for intervals sorted by (sm, start) so that no two on a track overlap.

    Returns `(slot, refill)`: a freed slot (end <= start) is given to the next
    block, choosing the one freed most recently (best fit); `refill` is the
    time between the slot being freed and the block starting, -1 on a new slot.
    """
    n = len(start)
    slot = np.empty(n, dtype=np.int64)
    refill = np.full(n, -1, dtype=np.int64)
    sm_l, start_l, end_l = sm.tolist(), start.tolist(), end.tolist()
    current, ends, ids, used = None, [], [], 0
    for i in range(n):
        if sm_l[i] != current:
            current, ends, ids, used = sm_l[i], [], [], 0
        k = bisect.bisect_right(ends, start_l[i])
        if k:
            freed_at = ends.pop(k - 1)
            s = ids.pop(k - 1)
            refill[i] = start_l[i] - freed_at
        else:
            s, used = used, used + 1
        j = bisect.bisect_right(ends, end_l[i])
        ends.insert(j, end_l[i])
        ids.insert(j, s)
        slot[i] = s
    return slot, refill


def _empty_timeline(time_unit: str, synchronized: bool) -> BlockTimeline:
    z = np.zeros(0, dtype=np.int64)
    return BlockTimeline(time_unit, synchronized, z, z, z, z, z, z, z, {}, 0, z, z, z, z)


def build_timeline(start, elapsed, sm, unit, *, units_per_block: int, time_unit: str = "cycles",
                   synchronized: bool = False) -> BlockTimeline:
    """Group per-warp records into blocks (`block = unit // units_per_block`).

    Pure: all inputs are 1-D arrays of equal length (one entry per warp).
    """
    start = np.asarray(start).astype(np.int64)
    end = start + np.asarray(elapsed).astype(np.int64)
    sm = np.asarray(sm).astype(np.int64)
    unit = np.asarray(unit).astype(np.int64)
    if not (len(start) == len(end) == len(sm) == len(unit)):
        raise C.AnalysisError("block_sched: start, elapsed, SM and unit arrays differ in length")
    if len(start) == 0:
        return _empty_timeline(time_unit, synchronized)
    block = unit // max(1, int(units_per_block))

    order = np.lexsort((start, block))  # by block, then start
    b_sorted = block[order]
    first = np.flatnonzero(np.r_[True, b_sorted[1:] != b_sorted[:-1]])
    blk = b_sorted[first]
    blk_start = start[order][first]
    blk_end = np.maximum.reduceat(end[order], first)
    blk_sm = sm[order][first]  # the SM of the block's earliest warp
    split = int(np.count_nonzero(np.minimum.reduceat(sm[order], first)
                                 != np.maximum.reduceat(sm[order], first)))
    blk_warps = np.diff(np.r_[first, len(order)])

    sms, sm_index = np.unique(blk_sm, return_inverse=True)
    if synchronized:
        origin_by_index = np.full(len(sms), blk_start.min(), dtype=np.int64)
    else:
        origin_by_index = np.full(len(sms), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(origin_by_index, sm_index, blk_start)
    blk_origin = origin_by_index[sm_index]
    rel_start = blk_start - blk_origin
    rel_end = blk_end - blk_origin

    o = np.lexsort((rel_end, rel_start, blk_sm))
    blk, blk_sm, rel_start, rel_end, blk_warps = blk[o], blk_sm[o], rel_start[o], rel_end[o], blk_warps[o]
    blk_origin = blk_origin[o]
    slot, refill = assign_slots(blk_sm, rel_start, rel_end)

    # Warps, relative to their block's SM origin, sorted like the blocks.
    by_id = np.argsort(blk)
    warp_block = by_id[np.searchsorted(blk[by_id], block)]
    w_order = np.lexsort((start, warp_block))
    warp_block = warp_block[w_order]
    warp_origin = blk_origin[warp_block]
    return BlockTimeline(
        time_unit=time_unit, synchronized=synchronized, block=blk, sm=blk_sm,
        start=rel_start, end=rel_end, warps=blk_warps, slot=slot, refill=refill,
        origin={int(s): int(v) for s, v in zip(sms, origin_by_index)}, split_blocks=split,
        warp_unit=unit[w_order], warp_block=warp_block,
        warp_start=start[w_order] - warp_origin, warp_end=end[w_order] - warp_origin)


@attrs.frozen(eq=False)
class SMStats:
    sm: int
    blocks: int
    span: int  # last block end - first block start
    busy: int  # time with at least one resident block (union of block intervals)
    work: int  # sum of block durations (block-time)
    gaps: np.ndarray  # idle intervals between consecutive blocks (holes in the union)
    slots: int  # most blocks resident at once


@attrs.frozen(eq=False)
class BlockSchedStats:
    time_unit: str
    synchronized: bool
    warps: int
    blocks: int
    split_blocks: int
    sms: tuple  # of SMStats, by SM id
    span: int  # longest SM span: the launch's duration as seen by the blocks
    tail: int  # span - shortest SM span: time some SM already idles for good
    tail_fraction: float  # tail / span
    busy_imbalance: float  # max busy / mean busy over SMs
    work_imbalance: float  # max work / mean work over SMs
    blocks_per_sm_cv: float  # coefficient of variation (std / mean) of blocks per SM
    gap_count: int
    gap_total: int
    gap_max: int
    refill_count: int
    refill_mean: float
    refill_max: int

    @property
    def idle_gaps(self) -> np.ndarray:
        parts = [s.gaps for s in self.sms]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def sm_stats(sm: int, start: np.ndarray, end: np.ndarray, slot: np.ndarray) -> SMStats:
    """Statistics of one SM from its blocks' relative intervals (sorted by start)."""
    reach = np.maximum.accumulate(end)  # latest end among the blocks so far
    holes = start[1:] - reach[:-1]
    gaps = holes[holes > 0].astype(np.int64)
    span = int(reach[-1] - start[0])
    return SMStats(sm=int(sm), blocks=len(start), span=span, busy=span - int(gaps.sum()),
                   work=int((end - start).sum()), gaps=gaps, slots=int(slot.max()) + 1)


def _per_sm_stats(tl: BlockTimeline, bounds: np.ndarray) -> list[SMStats]:
    """sm_stats of every SM's run of blocks (tl sorted by SM, then start), computed for all SMs at once:
    per-SM numpy calls on a few blocks each cost more than the work (the exit hook runs this per launch)."""
    if len(tl) == 0:
        return []
    lo = bounds[:-1]
    group = np.repeat(np.arange(len(lo)), np.diff(bounds))
    start, end = tl.start.astype(np.int64), tl.end.astype(np.int64)
    # The running max of end within each SM: offset each SM's values above every earlier SM's.
    low, high = int(min(start.min(), end.min())), int(max(start.max(), end.max()))
    offset = group * (high - low + 1)
    reach = np.maximum.accumulate(end - low + offset) - offset + low
    holes = start[1:] - reach[:-1]
    inside = group[1:] == group[:-1]  # a hole between two blocks of one SM
    gap_mask = inside & (holes > 0)
    gaps_by_sm = np.split(holes[gap_mask].astype(np.int64), np.searchsorted(np.flatnonzero(gap_mask),
                                                                             bounds[1:-1] - 1))
    last = bounds[1:] - 1
    spans = (reach[last] - start[lo]).tolist()
    works = np.add.reduceat(end - start, lo).tolist()
    slots = (np.maximum.reduceat(tl.slot, lo) + 1).tolist()
    sms, counts = tl.sm[lo].tolist(), np.diff(bounds).tolist()
    return [SMStats(sm=int(sms[i]), blocks=int(counts[i]), span=int(spans[i]),
                    busy=int(spans[i]) - int(gaps_by_sm[i].sum()), work=int(works[i]), gaps=gaps_by_sm[i],
                    slots=int(slots[i])) for i in range(len(lo))]


def _ratio_to_mean(values: np.ndarray) -> float:
    mean = float(values.mean()) if len(values) else 0.0
    return float(values.max()) / mean if mean > 0 else float("nan")


def summarize(tl: BlockTimeline) -> BlockSchedStats:
    """The statistics of spec/analysis.md for one launch's timeline."""
    bounds = np.flatnonzero(np.r_[True, tl.sm[1:] != tl.sm[:-1], True]) if len(tl) else np.zeros(1, int)
    per_sm = _per_sm_stats(tl, bounds)
    nan = float("nan")
    if not per_sm:
        return BlockSchedStats(tl.time_unit, tl.synchronized, 0, 0, 0, (), 0, 0, nan, nan, nan, nan,
                               0, 0, 0, 0, nan, 0)
    busy = np.array([s.busy for s in per_sm], dtype=np.float64)
    work = np.array([s.work for s in per_sm], dtype=np.float64)
    counts = np.array([s.blocks for s in per_sm], dtype=np.float64)
    # The end of each SM's last block, on the common axis (exact when synchronized,
    # else assuming all SMs started together at their own origin).
    # (the blocks are sorted by SM: one reduction per SM's run, not a mask over every block per SM)
    last_end = np.maximum.reduceat(tl.end, bounds[:-1]).astype(np.int64)
    first_start = np.minimum.reduceat(tl.start, bounds[:-1]).astype(np.int64)
    launch_start = int(first_start.min())
    span = int(last_end.max()) - launch_start
    tail = int(last_end.max() - last_end.min())
    gaps = np.concatenate([s.gaps for s in per_sm])
    refills = tl.refill[tl.refill >= 0]
    return BlockSchedStats(
        time_unit=tl.time_unit, synchronized=tl.synchronized, warps=len(tl.warp_unit),
        blocks=len(tl), split_blocks=tl.split_blocks, sms=tuple(per_sm), span=span, tail=tail,
        tail_fraction=tail / span if span > 0 else nan,
        busy_imbalance=_ratio_to_mean(busy), work_imbalance=_ratio_to_mean(work),
        blocks_per_sm_cv=float(counts.std() / counts.mean()),
        gap_count=len(gaps), gap_total=int(gaps.sum()), gap_max=int(gaps.max()) if len(gaps) else 0,
        refill_count=len(refills), refill_mean=float(refills.mean()) if len(refills) else nan,
        refill_max=int(refills.max()) if len(refills) else 0)


@attrs.frozen(eq=False)
class LaunchResult:
    index: int
    kernel: str
    duration_ns: float | None
    timeline: BlockTimeline
    stats: BlockSchedStats

    @property
    def fit_ghz(self) -> float | None:
        """Block span in cycles / measured launch duration: the scale that fits the blocks into the
        launch's time on an export's timeline. Not a clock rate (the duration includes launch
        overhead, and the span is measured on unaligned SM clocks): the report does not print it."""
        if self.timeline.time_unit != "cycles" or not self.duration_ns or self.stats.span <= 0:
            return None
        return self.stats.span / self.duration_ns


def time_base(md, probe_text: str | None) -> tuple[str, str, bool]:
    """(start field, time unit, synchronized) of a block_sched map."""
    start = C.find_field(md.dtype, START_FIELDS, map_name=md.name)
    is_global = start in GLOBAL_TIME_FIELDS or C.field_is_globaltimer(probe_text, start)
    return start, ("ns" if is_global else "cycles"), is_global


def analyze_launch(launch, md, probe_text: str | None = None) -> LaunchResult:
    start_f, unit_name, synchronized = time_base(md, probe_text)
    elapsed_f = C.find_field(md.dtype, ELAPSED_FIELDS, map_name=md.name)
    sm_f = C.find_field(md.dtype, SM_FIELDS, map_name=md.name)
    records, unit = C.read_valid(md)
    tl = build_timeline(records[start_f], records[elapsed_f], records[sm_f], unit,
                        units_per_block=C.units_per_block(md.level, launch.block),
                        time_unit=unit_name, synchronized=synchronized)
    return LaunchResult(index=int(launch.index), kernel=launch.kernel,
                        duration_ns=launch.duration_ns, timeline=tl, stats=summarize(tl))


def _mean(values) -> float | None:
    vals = [v for v in values if v == v]  # drop NaN
    return sum(vals) / len(vals) if vals else None


def kernel_numbers(results: list[LaunchResult]) -> dict[str, float | int | str | None]:
    """The report row's quantities as numbers, for `report --format csv|json` (means over launches)."""
    stats = [r.stats for r in results]
    units = {s.time_unit for s in stats}
    return {
        "blocks": sum(s.blocks for s in stats),
        "sms": max((len(s.sms) for s in stats), default=0),
        "span": _mean([s.span for s in stats]),
        "span_unit": units.pop() if len(units) == 1 else "mixed",
        "busy_imbalance": _mean([s.busy_imbalance for s in stats]),
        "blocks_per_sm_cv": _mean([s.blocks_per_sm_cv for s in stats]),
        "tail_fraction": _mean([s.tail_fraction for s in stats]),
        "idle_gaps": sum(s.gap_count for s in stats),
        "idle_gap_max": max((s.gap_max for s in stats), default=None),
        "refill_mean": _mean([s.refill_mean for s in stats]),
        "split_blocks": sum(s.split_blocks for s in stats),
    }


def kernel_summary(results: list[LaunchResult]) -> dict[str, str]:
    """Columns of the report row of one kernel (means over its launches): kernel_numbers, for reading."""
    n = kernel_numbers(results)
    tail = n["tail_fraction"]
    row = {
        "blocks": C.fmt_num(n["blocks"]),
        "SMs": C.fmt_num(n["sms"]),
        "span": f"{C.fmt_num(n['span'])} {n['span_unit']}",
        "busy max/mean": C.fmt_num(n["busy_imbalance"]),
        "blocks/SM cv": C.fmt_num(n["blocks_per_sm_cv"]),
        "tail": "-" if tail is None else f"{100 * tail:.1f}%",
        "idle gaps": f"{n['idle_gaps']} (max {C.fmt_num(n['idle_gap_max'])} {n['span_unit']})",
        "refill mean": f"{C.fmt_num(n['refill_mean'])} {n['span_unit']}" if n["refill_mean"] is not None else "-",
    }
    if n["split_blocks"]:
        row["split blocks"] = str(n["split_blocks"])
    return row


def occupancy_image(tl: BlockTimeline, bins: int = 512) -> np.ndarray:
    """Resident blocks over time: array `[time bin, SM row]` of block-time per bin.

    Each block adds, to every time bin it covers, the fraction of the bin it
    covers (so a cell's value is the average number of resident blocks).
    """
    if len(tl) == 0:
        return np.zeros((bins, 0))
    sms, row = np.unique(tl.sm, return_inverse=True)
    t0 = int(tl.start.min())
    width = max(1, int(tl.end.max()) - t0)
    edges = t0 + np.arange(bins + 1, dtype=np.float64) * (width / bins)
    # Cumulative coverage via a piecewise-linear integral at the bin edges.
    image = np.zeros((bins, len(sms)))
    for r in range(len(sms)):
        sel = row == r
        s, e = tl.start[sel].astype(np.float64), tl.end[sel].astype(np.float64)
        covered = np.clip(edges[None, :], s[:, None], e[:, None]) - s[:, None]  # (blocks, bins+1)
        image[:, r] = np.diff(covered.sum(axis=0)) / (width / bins)
    return image


def figure(r: LaunchResult):
    """Resident blocks per SM over the launch (occupancy_image): one row per SM, lowest SM id at the
    top, colour = mean resident blocks in the time bin. Raises plot.NoPlot when no block was recorded."""
    from neutrino.analysis.plot import NoPlot, density_figure

    if len(r.timeline) == 0:
        raise NoPlot("no block recorded")
    sms = sorted(r.timeline.origin)
    step = max(1, len(sms) // 16)
    t0 = int(r.timeline.start.min())
    xlabel = ("ns since the launch's first block (%globaltimer)" if r.timeline.synchronized else
              "cycles since each SM's first block (SM clocks, not aligned across SMs)")
    return density_figure(occupancy_image(r.timeline), log=False, clabel="resident blocks (mean over the bin)",
                          title=f"resident blocks per SM: launch {r.index} {r.kernel[:60]}", xlabel=xlabel,
                          ylabel="SM", extent=(0, int(r.timeline.end.max()) - t0, len(sms), 0),
                          yticks=[(i + 0.5, str(sms[i])) for i in range(0, len(sms), step)])


def figures(r: LaunchResult) -> list[tuple[str, object]]:
    """(file suffix, Figure) of one launch."""
    return [("block_sched", figure(r))]
