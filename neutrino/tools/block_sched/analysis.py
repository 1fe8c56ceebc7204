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


@attrs.frozen(eq=False)
class BlockIntervals:
    """The blocks of one launch from its per-warp records, sorted by (SM, start, end); times relative
    to `origin` (spec/analysis.md, "Block interval"). What the report's timeline and the exit line's
    figures both start from (`build_timeline`, `schedule_figures`)."""

    block: np.ndarray  # int64 linear block index
    sm: np.ndarray  # int64, the SM of the block's earliest warp
    start: np.ndarray  # int64, relative
    end: np.ndarray  # int64, relative
    warps: np.ndarray  # int64, warps recorded in the block
    origin: np.ndarray  # int64, raw time of each block's SM origin
    sms: np.ndarray  # int64, the SMs that ran a block, ascending
    sm_origin: np.ndarray  # int64, raw time of each of those SMs' origin
    split_blocks: int  # blocks whose warps reported different SMs

    def __len__(self) -> int:
        return len(self.block)


def block_intervals(start: np.ndarray, end: np.ndarray, sm: np.ndarray, block: np.ndarray,
                    synchronized: bool) -> BlockIntervals:
    """Group warps (int64 arrays of equal length, at least one) into blocks: a block spans its
    warps' earliest start to latest end, on the SM of its earliest warp; each SM's times are taken
    relative to its own first block start, or to the launch's first start when `synchronized`."""
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
    return BlockIntervals(block=blk[o], sm=blk_sm[o], start=rel_start[o], end=rel_end[o], warps=blk_warps[o],
                          origin=blk_origin[o], sms=sms, sm_origin=origin_by_index, split_blocks=split)


def _warp_arrays(start, elapsed, sm, unit, units_per_block: int):
    start = np.asarray(start).astype(np.int64)
    end = start + np.asarray(elapsed).astype(np.int64)
    sm = np.asarray(sm).astype(np.int64)
    unit = np.asarray(unit).astype(np.int64)
    if not (len(start) == len(end) == len(sm) == len(unit)):
        raise C.AnalysisError("block_sched: start, elapsed, SM and unit arrays differ in length")
    return start, end, sm, unit, unit // max(1, int(units_per_block))


def build_timeline(start, elapsed, sm, unit, *, units_per_block: int, time_unit: str = "cycles",
                   synchronized: bool = False) -> BlockTimeline:
    """Group per-warp records into blocks (`block = unit // units_per_block`).

    Pure: all inputs are 1-D arrays of equal length (one entry per warp).
    """
    start, end, sm, unit, block = _warp_arrays(start, elapsed, sm, unit, units_per_block)
    if len(start) == 0:
        return _empty_timeline(time_unit, synchronized)
    b = block_intervals(start, end, sm, block, synchronized)
    slot, refill = assign_slots(b.sm, b.start, b.end)

    # Warps, relative to their block's SM origin, sorted like the blocks.
    by_id = np.argsort(b.block)
    warp_block = by_id[np.searchsorted(b.block[by_id], block)]
    w_order = np.lexsort((start, warp_block))
    warp_block = warp_block[w_order]
    warp_origin = b.origin[warp_block]
    return BlockTimeline(
        time_unit=time_unit, synchronized=synchronized, block=b.block, sm=b.sm,
        start=b.start, end=b.end, warps=b.warps, slot=slot, refill=refill,
        origin={int(s): int(v) for s, v in zip(b.sms, b.sm_origin)}, split_blocks=b.split_blocks,
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


class SMRuns:
    """Each SM's run of blocks (blocks sorted by SM, then start; at least one): the holes in the union
    of its block intervals and its busy time, for all SMs at once (numpy over every block, no
    per-SM call: the exit line computes this per sampled launch). Shared by the report (`summarize`)
    and the exit line (`schedule_figures`): one definition of busy, idle gaps and tail."""

    def __init__(self, sm: np.ndarray, start: np.ndarray, end: np.ndarray):
        self.start, self.end = start.astype(np.int64), end.astype(np.int64)
        self.bounds = np.flatnonzero(np.r_[True, sm[1:] != sm[:-1], True])
        self.first = self.bounds[:-1]  # each SM's first block
        self.last = self.bounds[1:] - 1  # and its last
        group = np.repeat(np.arange(len(self.first)), np.diff(self.bounds))
        # The running max of end within each SM: offset each SM's values above every earlier SM's.
        low, high = int(min(self.start.min(), self.end.min())), int(max(self.start.max(), self.end.max()))
        offset = group * (high - low + 1)
        reach = np.maximum.accumulate(self.end - low + offset) - offset + low
        holes = self.start[1:] - reach[:-1]
        self.gap_mask = (group[1:] == group[:-1]) & (holes > 0)  # a hole between two blocks of one SM
        self.holes = holes
        self.gap_per_sm = np.bincount(group[1:][self.gap_mask], weights=holes[self.gap_mask],
                                      minlength=len(self.first)).astype(np.int64)
        self.span = reach[self.last] - self.start[self.first]  # per SM
        self.busy = self.span - self.gap_per_sm
        self.last_end = reach[self.last]  # each SM's last block end (the running max at its last block)

    @property
    def sms(self) -> int:
        return len(self.first)

    @property
    def gap_count(self) -> int:
        return int(np.count_nonzero(self.gap_mask))

    def gaps_by_sm(self) -> list[np.ndarray]:
        gap_at = np.flatnonzero(self.gap_mask)
        return np.split(self.holes[self.gap_mask], np.searchsorted(gap_at, self.bounds[1:-1] - 1))

    def launch_span(self) -> int:
        """Latest block end - earliest block start, on the common axis (spec/analysis.md, "Tail")."""
        return int(self.last_end.max()) - int(self.start[self.first].min())

    def tail(self) -> int:
        return int(self.last_end.max() - self.last_end.min())

    def busy_imbalance(self) -> float:
        return _ratio_to_mean(self.busy.astype(np.float64))

    def tail_fraction(self) -> float:
        span = self.launch_span()
        return self.tail() / span if span > 0 else float("nan")


def _per_sm_stats(tl: BlockTimeline, runs: SMRuns) -> list[SMStats]:
    """sm_stats of every SM's run of blocks (tl sorted by SM, then start), from `runs`."""
    lo = runs.first
    gaps_by_sm = runs.gaps_by_sm()
    spans, busy = runs.span.tolist(), runs.busy.tolist()
    works = np.add.reduceat(runs.end - runs.start, lo).tolist()
    slots = (np.maximum.reduceat(tl.slot, lo) + 1).tolist()
    sms, counts = tl.sm[lo].tolist(), np.diff(runs.bounds).tolist()
    return [SMStats(sm=int(sms[i]), blocks=int(counts[i]), span=int(spans[i]), busy=int(busy[i]),
                    work=int(works[i]), gaps=gaps_by_sm[i], slots=int(slots[i])) for i in range(len(lo))]


def _ratio_to_mean(values: np.ndarray) -> float:
    mean = float(values.mean()) if len(values) else 0.0
    return float(values.max()) / mean if mean > 0 else float("nan")


def summarize(tl: BlockTimeline) -> BlockSchedStats:
    """The statistics of spec/analysis.md for one launch's timeline."""
    nan = float("nan")
    if len(tl) == 0:
        return BlockSchedStats(tl.time_unit, tl.synchronized, 0, 0, 0, (), 0, 0, nan, nan, nan, nan,
                               0, 0, 0, 0, nan, 0)
    runs = SMRuns(tl.sm, tl.start, tl.end)
    per_sm = _per_sm_stats(tl, runs)
    work = np.array([s.work for s in per_sm], dtype=np.float64)
    counts = np.array([s.blocks for s in per_sm], dtype=np.float64)
    gaps = runs.holes[runs.gap_mask].astype(np.int64)
    refills = tl.refill[tl.refill >= 0]
    return BlockSchedStats(
        time_unit=tl.time_unit, synchronized=tl.synchronized, warps=len(tl.warp_unit),
        blocks=len(tl), split_blocks=tl.split_blocks, sms=tuple(per_sm), span=runs.launch_span(), tail=runs.tail(),
        tail_fraction=runs.tail_fraction(), busy_imbalance=runs.busy_imbalance(), work_imbalance=_ratio_to_mean(work),
        blocks_per_sm_cv=float(counts.std() / counts.mean()),
        gap_count=len(gaps), gap_total=int(gaps.sum()), gap_max=int(gaps.max()) if len(gaps) else 0,
        refill_count=len(refills), refill_mean=float(refills.mean()) if len(refills) else nan,
        refill_max=int(refills.max()) if len(refills) else 0)


def schedule_figures(start, elapsed, sm, unit, units_per_block: int,
                     synchronized: bool) -> tuple[int, int, float, float, int]:
    """(blocks, SMs, busy_imbalance, tail_fraction, idle-gap count) of one launch from its per-warp
    records: `summarize`'s figures by the same code (block_intervals, SMRuns) without the report's
    timeline (slots, refills, per-warp arrays, one object per SM), which block_sched's exit line
    (exit_hook.py) does not print."""
    start, end, sm, _, block = _warp_arrays(start, elapsed, sm, unit, units_per_block)
    if len(start) == 0:
        return 0, 0, float("nan"), float("nan"), 0
    blocks = block_intervals(start, end, sm, block, synchronized)
    runs = SMRuns(blocks.sm, blocks.start, blocks.end)
    return len(blocks), runs.sms, runs.busy_imbalance(), runs.tail_fraction(), runs.gap_count


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
