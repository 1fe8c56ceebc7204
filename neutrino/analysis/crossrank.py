"""Across the ranks of a job: which rank is slow at a kernel, and which rank arrives late at a collective.

Part of `neutrino report JOB` (spec/analysis.md, "Several ranks"; every number in spec/tools.md,
"Cross-rank analysis"):

* **Stragglers**: per kernel (name, grid and block), each rank's median GPU duration (timeline.bin
  when every rank has one, else the probed launches' measured duration or block_sched span); the
  slowest rank against the median of the other ranks' medians, kept only when a one-sided
  Mann-Whitney U test (Bonferroni-corrected for the kernels and ranks compared) says the slowest
  rank's launches really are longer, and by at least `STRAGGLER_MIN_RATIO`.
* **Late arrivals**: the k-th NCCL kernel of each rank's timeline is the same collective on every
  rank (the names must agree). Its arrival on a rank is its GPU start; the rank arriving last makes
  the others wait (their kernels run but cannot progress). A late arrival is reported when its lead
  over the next-latest rank is above the noise of the ranks' arrivals (robust spread) and a floor.
  Steps come from step-like ranges of ranges.bin, else from the collective sequence itself.

Timestamps are Unix-epoch ns on one clock per machine (spec/trace-format.md): ranks of one host
share it; comparing ranks on different hosts assumes their clocks are synchronized.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import attrs
import numpy as np

from neutrino.analysis import context

STRAGGLER_MIN_RATIO = 1.10  # slowest rank's median / the others' median: below this, not reported
STRAGGLER_ALPHA = 0.01  # family-wise significance level of the straggler tests
STRAGGLER_MIN_LAUNCHES = 3  # launches a rank needs for its durations of a kernel to be compared
LATE_FLOOR_NS = 10_000  # a lead below 10 us is never a late arrival
LATE_NOISE_FACTOR = 20.0  # a lead must exceed this many times the arrival noise (sigma)
MIN_COLLECTIVES_FOR_NOISE = 5  # fewer matched collectives: the floor alone decides
MAD_TO_SIGMA = 1.4826  # the median absolute deviation of a normal distribution x this = sigma
NORMAL_QUANTILE_75 = 1.1503  # the 0.75 quantile of |N(0, sigma)| is 1.1503 sigma
PROFILER_SHARE = 0.5  # Neutrino's own work covering at least this share of a lead: the lead is Neutrino's
OUTSIDE_STEPS = "(outside steps)"
STEP_TABLE_ROWS = 20


def is_collective(name: str) -> bool:
    """An NCCL kernel (`ncclDevKernel_*`, `ncclKernel_*`): origin NCCL by the timeline's classifier."""
    return context.origin(name) == "NCCL"


# ------------------------------------------------------------------ per-kernel stragglers


@attrs.frozen
class Straggler:
    kernel: str
    grid: tuple
    block: tuple
    rank: int  # the slowest rank
    median: float  # its median duration
    others: float  # median over the other ranks of their median durations
    ratio: float  # median / others
    p_value: float  # one-sided Mann-Whitney p, Bonferroni-corrected (kernels compared x ranks)
    launches: dict  # rank -> launches compared
    unit: str  # "ns", or "cycles" (block_sched spans of probed launches without a measured duration)


def timeline_samples(timeline: np.ndarray) -> dict:
    """(kernel, grid, block) -> (durations in ns, "ns") of a rank's timeline kernels, collectives left out
    (an NCCL kernel's duration includes its wait for the other ranks: see late arrivals). Grouped with
    numpy (one sort), not record by record: timelines have millions of records."""
    kernels = timeline[timeline["kind"] == context.KIND_KERNEL]
    if not len(kernels):
        return {}
    codes: dict = {}
    name_code = np.fromiter((codes.setdefault(n, len(codes)) for n in kernels["name"].tolist()), dtype=np.int64,
                            count=len(kernels))
    keys = np.column_stack([name_code, kernels["grid"].astype(np.int64), kernels["block"].astype(np.int64)])
    order = np.lexsort(keys.T[::-1])  # by name, grid, block; stable: launch order kept within a group
    ordered = keys[order]
    bounds = np.concatenate([[0], np.flatnonzero(np.any(ordered[1:] != ordered[:-1], axis=1)) + 1, [len(keys)]])
    durations = (kernels["end_ns"].astype(np.int64) - kernels["start_ns"].astype(np.int64)).clip(0).astype(float)
    names = list(codes)
    out = {}
    for first, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        row = ordered[first].tolist()
        name = names[row[0]]
        if not is_collective(name):
            out[(name, tuple(row[1:4]), tuple(row[4:7]))] = (durations[order[first:stop]], "ns")
    return out


def probed_samples(launches, spans: dict) -> dict:
    """(kernel, grid, block) -> (values, unit) of a rank's probed launches: measured duration (ns), else
    the block_sched span (`spans`: launch index -> (span, unit)). Where a kernel's launches give both,
    the unit of most of them is kept (ns on a tie): launches are timed by sampling, the same on every rank."""
    groups: dict = {}
    for launch in launches:
        if launch.duration_ns:
            value = (float(launch.duration_ns), "ns")
        elif launch.index in spans:
            value = spans[launch.index]
        else:
            continue
        groups.setdefault((launch.kernel, tuple(launch.grid), tuple(launch.block)), []).append(value)
    out = {}
    for key, values in groups.items():
        units = Counter(u for _, u in values)
        unit = max(units, key=lambda u: (units[u], u == "ns"))
        out[key] = (np.array([v for v, u in values if u == unit], dtype=float), unit)
    return out


def find_stragglers(samples_by_rank: dict) -> tuple[list[Straggler], int]:
    """The kernels with a straggling rank, and how many kernels could be compared (on >= 2 ranks with
    >= STRAGGLER_MIN_LAUNCHES launches each, one unit). `samples_by_rank`: rank -> {key: (values, unit)}."""
    from scipy.stats import mannwhitneyu

    keys: dict = {}
    for rank, samples in samples_by_rank.items():
        for key, (values, unit) in samples.items():
            if len(values) >= STRAGGLER_MIN_LAUNCHES:
                keys.setdefault(key, {})[rank] = (values, unit)
    compared = {k: v for k, v in keys.items() if len(v) >= 2 and len({u for _, u in v.values()}) == 1}
    out = []
    for (kernel, grid, block), per_rank in compared.items():
        medians = {r: float(np.median(v)) for r, (v, _) in per_rank.items()}
        slow = max(sorted(medians), key=lambda r: medians[r])
        others = float(np.median([m for r, m in medians.items() if r != slow]))
        if others <= 0 or medians[slow] / others < STRAGGLER_MIN_RATIO:
            continue
        rest = np.concatenate([v for r, (v, _) in per_rank.items() if r != slow])
        p = float(mannwhitneyu(per_rank[slow][0], rest, alternative="greater").pvalue)
        p_corrected = min(1.0, p * len(compared) * len(per_rank))
        if p_corrected < STRAGGLER_ALPHA:
            out.append(Straggler(kernel, grid, block, slow, medians[slow], others, medians[slow] / others,
                                 p_corrected, {r: len(v) for r, (v, _) in per_rank.items()},
                                 next(iter(per_rank.values()))[1]))
    out.sort(key=lambda s: (-s.ratio, s.kernel))
    return out, len(compared)


# ------------------------------------------------------------------ collectives and steps


@attrs.frozen
class Collectives:
    """The matched collectives of a job: arrays of shape (collectives, ranks), ranks in `ranks` order."""

    ranks: tuple
    names: tuple  # the collective's kernel name
    start: np.ndarray  # arrival: GPU start, ns
    end: np.ndarray
    tid: np.ndarray  # launching thread
    host: np.ndarray | None = None  # host time of the launch call (timeline.bin host_ns), 0 unknown


def rank_collectives(timeline: np.ndarray) -> np.ndarray:
    """A rank's NCCL kernels, by GPU start."""
    kernels = timeline[timeline["kind"] == context.KIND_KERNEL]
    names = kernels["name"].tolist()
    collective = {n: is_collective(n) for n in set(names)}
    picked = kernels[np.array([collective[n] for n in names], dtype=bool)] if names else kernels
    return picked[np.argsort(picked["start_ns"], kind="stable")]


def match_collectives(per_rank: dict, kind: str = "rank") -> tuple[Collectives, list[str]]:
    """Match the k-th collective of every rank; stop (with a warning) where the name sequences diverge."""
    ranks = tuple(sorted(per_rank))
    seqs = [per_rank[r] for r in ranks]
    count, warnings = min(len(s) for s in seqs), []
    for k in range(count):
        names = [str(s["name"][k]) for s in seqs]
        if len(set(names)) > 1:
            which = ", ".join(f"{kind} {r} {context_short(n)}" for r, n in zip(ranks, names))
            warnings.append(f"collective #{k}: the {plural(kind)} ran different NCCL kernels ({which}): "
                            f"the collective sequences diverge; {k} collective(s) matched, the rest not compared")
            count = k
            break
    lengths = {r: len(s) for r, s in zip(ranks, seqs)}
    if not warnings and len(set(lengths.values())) > 1:
        warnings.append(f"the {plural(kind)} ran different numbers of NCCL kernels ("
                        + ", ".join(f"{kind} {r}: {n}" for r, n in lengths.items())
                        + f"): the first {count} matched, the rest not compared")
    def column(s, f):
        return s[f][:count].astype(np.int64) if f in (s.dtype.names or ()) else np.zeros(count, np.int64)

    cols = Collectives(ranks, tuple(str(n) for n in seqs[0]["name"][:count]) if count else (),
                       *(np.stack([column(s, f) for s in seqs], axis=1) for f in ("start_ns", "end_ns", "tid", "host_ns")))
    return cols, warnings


def context_short(name: str) -> str:
    from neutrino.analysis.tables import short

    return short(name, 40)


_DIGITS = re.compile(r"\d+")


def step_family(ranges: np.ndarray, tids) -> str | None:
    """The name pattern (digit runs as `#`) of the ranges that are steps, on the launching threads:
    the outermost ranges whose name contains "step"; else the most frequent repeating depth-0 name."""
    if ranges is None or not len(ranges):
        return None
    mine = ranges[np.isin(ranges["tid"].astype(np.int64), np.asarray(list(tids), dtype=np.int64))]
    if not len(mine):
        return None
    keys = [_DIGITS.sub("#", str(n)) for n in mine["name"].tolist()]
    depth = mine["depth"].tolist()
    step_like = [(depth[i], -keys.count(keys[i]), i) for i in range(len(keys)) if "step" in keys[i].lower()]
    if step_like:
        return keys[min(step_like)[2]]
    outer = Counter(k for k, d in zip(keys, depth) if d == 0)
    repeating = [(-n, k) for k, n in outer.items() if n >= 2]
    return min(repeating)[1] if repeating else None


def range_steps(ranges: np.ndarray, family: str, tid: np.ndarray, start: np.ndarray,
                host: np.ndarray | None = None) -> list:
    """Per collective of a rank, the label of the step range on its launching thread holding its
    launch call's host time (`host`, > 0 where known), else its GPU start (None outside any): the
    range's name, or `NAME #k` (k-th, from 0) when the names repeat. The GPU start lags the host's
    ranges when the host runs ahead (NCCL kernels do not block it): only the host time is exact."""
    if host is not None:
        start = np.where(host > 0, host, start)
    chosen = ranges[np.array([_DIGITS.sub("#", str(n)) == family for n in ranges["name"].tolist()], dtype=bool)]
    chosen = chosen[np.argsort(chosen["start_ns"], kind="stable")]
    names = [str(n) for n in chosen["name"].tolist()]
    distinct = len(set(names)) == len(names)
    labels = [n if distinct else f"{n} #{k}" for k, n in enumerate(names)]
    hits = context.innermost_ranges(chosen, tid.astype(np.int64), start.astype(np.int64))
    return [labels[h] if h >= 0 else None for h in hits.tolist()]


def sequence_steps(names: tuple) -> list:
    """Steps without step ranges: a new step begins at each occurrence of the first collective name that
    occurs more than once (a one-off collective such as an initial barrier does not define steps); the
    collectives before its first occurrence are outside steps. No repeating name: all in `step 0`."""
    counts = Counter(names)
    first = next((n for n in names if counts[n] > 1), None)
    out, step = [], -1 if first is not None else 0
    for name in names:
        step += name == first
        out.append(OUTSIDE_STEPS if step < 0 else f"step {step}")
    return out


# ------------------------------------------------------------------ late arrivals


@attrs.frozen
class StepRow:
    step: str
    collectives: int
    late_rank: int | None  # None: no arrival above the threshold in this step
    late_by_ns: float  # the largest lead among the step's collectives
    wait_ns: float  # sum over its collectives and ranks of the wait for the last arrival
    work_ns: float  # sum over its collectives of their duration on the last-arriving rank
    last_rank: int = -1  # the rank arriving last at that collective, above the threshold or not
    own_work_ns: float = 0.0  # Neutrino's own host work on the last rank before that collective, minus the next rank's
    profiler_late: bool = False  # late above the threshold, but by Neutrino's own work (late_rank is then None)
    own_work_what: str = ""  # what that work was ("instrumentation of 1 kernel"), for the report


@attrs.frozen
class LateArrivals:
    ranks: tuple
    matched: int  # collectives matched across the ranks
    sigma_ns: float  # arrival noise (median over the collectives): robust spread of a rank's arrival
    threshold_ns: float  # median over the collectives of their threshold: a lead above it is a late arrival
    steps_from: str  # how steps were found (for the report's note)
    steps: tuple  # StepRow, in order of first collective
    wait_by_rank: dict  # rank -> sum over collectives of its wait, ns
    work_by_rank: dict  # rank -> sum over collectives of its duration minus its wait, ns
    end_spread_ns: float  # median over collectives of (latest end - earliest end) across the ranks


def collective_places(names, steps) -> list[tuple]:
    """A collective's place in its step: (outside any step, name, k-th collective of that name in the step).
    Collectives at one place in every step are comparable: they follow the same work."""
    seen: Counter = Counter()
    out = []
    for name, step in zip(names, steps):
        out.append((step == OUTSIDE_STEPS, name, seen[(step, name)]))
        seen[(step, name)] += 1
    return out


def _rank_spread(dev: np.ndarray, quantile: float) -> float:
    """Per rank (column), the `quantile` of |deviation - the rank's median deviation| over the collectives
    (rows): a rank always late by the same amount has no noise; the median over the ranks."""
    return float(np.median(np.quantile(np.abs(dev - np.median(dev, axis=0, keepdims=True)), quantile, axis=0)))


def arrival_noise(start: np.ndarray, places: list) -> np.ndarray:
    """Per collective, sigma of the arrival noise (ns), from d[c, r] = arrival - the collective's median
    arrival. At a place seen in at least MIN_COLLECTIVES_FOR_NOISE steps: 1.4826 x the median absolute
    deviation over those collectives (robust to up to half of them delayed). Elsewhere, over all
    collectives: the 0.75 quantile / 1.1503 (robust to a quarter); 0 with fewer collectives."""
    dev = start - np.median(start, axis=1, keepdims=True)
    count = len(start)
    pooled = _rank_spread(dev, 0.75) / NORMAL_QUANTILE_75 if count >= MIN_COLLECTIVES_FOR_NOISE else 0.0
    sigma = np.full(count, pooled)
    members: dict = {}
    for c, place in enumerate(places):
        members.setdefault(place, []).append(c)
    for idx in members.values():
        if len(idx) >= MIN_COLLECTIVES_FOR_NOISE:
            sigma[idx] = MAD_TO_SIGMA * _rank_spread(dev[idx], 0.5)
    return sigma


OWN_WORK_LABELS = {"miss": "instrumentation", "memory": "code cache (memory)", "disk": "code cache (disk)"}
OWN_WORK_EVENTS = {"instrument": None, "module": "module load", "no_ptx": "module load",  # None: by its cache
                   "tensor_walk": "tensor-naming walk"}


@attrs.frozen
class OwnWork:
    """Neutrino's own host-side work in one process (its event.log): intervals [start_ns, end_ns] of
    `instrument` events (end = the event's `time`, start = end − `seconds`: verify, instrumentation,
    ptxas/JIT, module load and kernel directory of one kernel), of `module` / `no_ptx` events
    (registering a loaded module: finding its PTX) and of `tensor_walk` events (the tensor trace's walk
    of the garbage collector's objects for module parameters, on the launching thread), merged into
    disjoint, sorted intervals
    (`starts`, `ends`, `covered` = total length before each) for linear-time overlap, with the events."""

    starts: np.ndarray
    ends: np.ndarray
    covered: np.ndarray  # covered[k] = sum of the lengths of merged intervals 0..k-1 (length k+1)
    events: tuple  # (start_ns, end_ns, label), by end

    @classmethod
    def from_intervals(cls, intervals: list) -> "OwnWork":
        intervals = sorted(intervals, key=lambda x: x[1])
        arr = np.array([x[:2] for x in intervals], dtype=np.float64).reshape(-1, 2)
        return cls(*merge_intervals(arr[:, 0], arr[:, 1]), tuple(intervals))

    def before(self, t: float) -> float:
        """Total own work before time t, ns."""
        k = int(np.searchsorted(self.ends, t, side="right"))
        partial = max(0.0, t - self.starts[k]) if k < len(self.starts) else 0.0
        return float(self.covered[k] + partial)

    def within(self, lo: float, hi: float) -> float:
        return self.before(hi) - self.before(lo) if hi > lo else 0.0

    def describe(self, lo: float, hi: float) -> str:
        """`instrumentation of 2 kernels, code cache (disk) of 1 kernel` for the events overlapping [lo, hi]."""
        first = int(np.searchsorted(np.array([e for _, e, _ in self.events]), lo, side="right"))
        counts: Counter = Counter()
        for start, _, label in self.events[first:]:
            counts[label] += start < hi
        return ", ".join(f"{label}{OWN_WORK_UNITS.get(label, ' of {n} kernel{s}').format(n=n, s='s' if n > 1 else '')}"
                         for label, n in counts.items() if n)


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple:
    """The union of intervals as (starts, ends, covered) of disjoint sorted intervals, covered[k] = total
    length of the first k; numpy (one sort): a timeline has millions of records."""
    if not len(starts):
        return np.zeros(0), np.zeros(0), np.zeros(1)
    order = np.argsort(starts, kind="stable")
    lo, hi = starts[order].astype(np.float64), ends[order].astype(np.float64)
    reach = np.maximum.accumulate(hi)
    first = np.flatnonzero(np.concatenate([[True], lo[1:] > reach[:-1]]))
    merged_lo, merged_hi = lo[first], np.maximum.reduceat(hi, first)
    return merged_lo, merged_hi, np.concatenate([[0.0], np.cumsum(merged_hi - merged_lo)])


def gpu_busy(timeline: np.ndarray) -> "OwnWork":
    """A rank's GPU activity (every timeline record: kernels, copies, sets) as merged intervals, ns."""
    return OwnWork(*merge_intervals(timeline["start_ns"], timeline["end_ns"]), ())


OWN_WORK_UNITS = {"module load": " of {n} module{s}", "tensor-naming walk": " x{n}"}
NO_OWN_WORK = OwnWork.from_intervals([])


def read_own_work(event_log) -> OwnWork:
    """A rank's Neutrino host work from its event.log (unreadable lines skipped: a truncated last line)."""
    import json

    intervals = []
    try:
        with open(event_log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not any(f'"{name}"' in line for name in OWN_WORK_EVENTS):
                    continue
                try:
                    rec = json.loads(line)
                    end, seconds = float(rec["time"]) * 1e9, float(rec.get("seconds") or 0.0)
                except (ValueError, KeyError, TypeError):
                    continue
                event = rec.get("event")
                if event in OWN_WORK_EVENTS and seconds > 0:
                    label = OWN_WORK_EVENTS[event] or OWN_WORK_LABELS.get(rec.get("cache"), "instrumentation")
                    intervals.append((end - seconds * 1e9, end, label))
    except OSError:
        return NO_OWN_WORK
    return OwnWork.from_intervals(intervals)


def own_work_lead(cols: Collectives, own: dict, busy: dict, c: int, late: int, rival: int) -> tuple[float, tuple]:
    """How much of collective c's lead Neutrino's own host work explains: per rank (the late one, column
    `late`, and the next-latest, `rival`), its own work between its launch of the previous matched
    collective and its launch of c (host time, else GPU start; before the first: since the start), but
    at most its GPU's idle time between the previous collective's end and its arrival at c (host work
    delays a rank only where its GPU waited for it; without the rank's busy intervals, not bounded);
    the late rank's minus the rival's, at least 0; and (OwnWork, lo, hi) of the late rank's window."""
    when = np.where(cols.host > 0, cols.host, cols.start).astype(float) if cols.host is not None \
        else cols.start.astype(float)
    out = []
    for col in (late, rival):
        rank = cols.ranks[col]
        work = own.get(rank, NO_OWN_WORK)
        lo = when[c - 1, col] if c > 0 else 0.0
        host = work.within(lo, when[c, col])
        if rank in busy:
            gpu_lo, arrival = (float(cols.end[c - 1, col]) if c > 0 else 0.0), float(cols.start[c, col])
            host = min(host, max(0.0, arrival - gpu_lo) - busy[rank].within(gpu_lo, arrival))
        out.append((host, (work, lo, when[c, col])))
    return max(0.0, out[0][0] - out[1][0]), out[0][1]


def late_arrivals(cols: Collectives, steps: list, steps_from: str, own: dict | None = None,
                  busy: dict | None = None) -> LateArrivals:
    """Per matched collective: last arrival, its lead over the next-latest, every rank's wait; per step."""
    start, end = cols.start.astype(float), cols.end.astype(float)
    duration = np.maximum(end - start, 0.0)
    count, nranks = start.shape
    late = np.argmax(start, axis=1)  # ties: the lowest rank
    rows = np.arange(count)
    latest = start[rows, late]
    others = start.copy()
    others[rows, late] = -np.inf
    lead = latest - others.max(axis=1)
    wait = np.clip(latest[:, None] - start, 0.0, duration)
    work = duration[rows, late]
    sigma = arrival_noise(start, collective_places(cols.names, steps))
    threshold = np.maximum(float(LATE_FLOOR_NS), LATE_NOISE_FACTOR * sigma)
    order: dict = {}
    for c, step in enumerate(steps):
        order.setdefault(step, []).append(c)
    rival = np.argmax(others, axis=1)  # the next-latest rank
    step_rows = []
    for step, members in order.items():
        idx = np.array(members)
        top = idx[np.argmax(lead[idx])]
        own_ns, window = own_work_lead(cols, own or {}, busy or {}, top, late[top], rival[top])
        above = lead[top] > threshold[top]
        profiler = bool(above and own_ns >= PROFILER_SHARE * lead[top])
        what = window[0].describe(*window[1:]) if profiler else ""
        step_rows.append(StepRow(step, len(idx), cols.ranks[late[top]] if above and not profiler else None,
                                 float(lead[top]), float(wait[idx].sum()), float(work[idx].sum()),
                                 cols.ranks[late[top]], own_ns, profiler, what))
    return LateArrivals(
        ranks=cols.ranks, matched=count, sigma_ns=float(np.median(sigma)), threshold_ns=float(np.median(threshold)),
        steps_from=steps_from,
        steps=tuple(step_rows),
        wait_by_rank={r: float(wait[:, i].sum()) for i, r in enumerate(cols.ranks)},
        work_by_rank={r: float((duration[:, i] - wait[:, i]).sum()) for i, r in enumerate(cols.ranks)},
        end_spread_ns=float(np.median(end.max(axis=1) - end.min(axis=1))) if count else 0.0)


def collective_steps(cols: Collectives, ranges_by_rank: dict) -> tuple[list, str]:
    """Each matched collective's step, and how steps were found. With step ranges (`step_family`) the
    step on the rank that arrived first (its kernel started soonest after its launch, so the range open
    at its GPU start is the likeliest to have launched it); else groups of the collective sequence."""
    family = None
    for i, r in enumerate(cols.ranks):
        family = family or step_family(ranges_by_rank.get(r), set(cols.tid[:, i].tolist()) - {0})
    if family is None:
        counts = Counter(cols.names)
        first = context_short(next((n for n in cols.names if counts[n] > 1), cols.names[0]))
        return sequence_steps(cols.names), (f"no step ranges in ranges.bin: a step is a group of collectives "
                                            f"beginning at each {first}")
    labels = []
    for i, r in enumerate(cols.ranks):
        ranges = ranges_by_rank.get(r)
        host = cols.host[:, i] if cols.host is not None else None
        labels.append(range_steps(ranges, family, cols.tid[:, i], cols.start[:, i], host) if ranges is not None
                      and len(ranges) else [None] * len(cols.names))
    first = np.argmin(cols.start, axis=1) if len(cols.names) else []
    out = []
    for c, f in enumerate(first):
        label = labels[f][c] or next((lab[c] for lab in labels if lab[c]), None)
        out.append(label or OUTSIDE_STEPS)
    known = cols.host is not None and bool((cols.host > 0).all())
    held = "launch call (host time)" if known else "launch call where its host time is known, else its GPU start"
    return out, f"steps are the ranges named like `{family}` (ranges.bin) holding the collective's {held}"


# ------------------------------------------------------------------ the job


@attrs.frozen
class CrossRank:
    kind: str  # "rank" or "process"
    source: str  # where the kernel durations come from: "timeline" or "probed launches"
    stragglers: tuple
    compared: int  # kernels compared across ranks
    late: LateArrivals | None
    notes: tuple  # why a part is absent
    warnings: tuple


def _block_sched_spans(report) -> dict:
    spans = {}
    for entry in getattr(report, "kernels", {}).values():
        for result in entry.results.get("block_sched", []):
            spans[int(result.index)] = (float(result.stats.span), result.timeline.time_unit)
    return spans


def analyze_job(job: list, reports: list, kind: str = "rank", samples: dict | None = None) -> CrossRank:
    """`job`: [(rank, trace, launches)] (ranks.load_job); `reports`: [(rank, Report)] of the same ranks;
    `samples`: rank -> probed_samples of its launches, when taken already (the launches then unused)."""
    from neutrino.errors import NeutrinoError

    timelines, ranges, notes, warnings = {}, {}, [], []
    for rank, trace, _ in job:
        try:
            timelines[rank] = context.read_timeline(trace.path)
            ranges[rank] = context.read_ranges(trace.path)
        except (NeutrinoError, OSError, ValueError) as e:
            warnings.append(f"{kind} {rank}: context tables not used across {plural(kind)}: {e}")
            timelines[rank] = None
    without = [r for r, t in timelines.items() if t is None]
    by_report = dict(reports)
    if not without:
        source, samples = "timeline", {r: timeline_samples(t) for r, t in timelines.items()}
    else:
        source = "probed launches"
        if samples is None:
            samples = {r: probed_samples(launches, _block_sched_spans(by_report.get(r))) for r, _, launches in job}
    stragglers, compared = find_stragglers(samples)
    late = None
    if len(job) < 2:
        notes.append(f"late arrivals need at least 2 {plural(kind)}")
    elif without:
        notes.append(f"late arrivals at collectives need timeline.bin on every {kind}: "
                     + ", ".join(f"{kind} {r}" for r in without) + (" has" if len(without) == 1 else " have")
                     + " none")
    else:
        per_rank = {r: rank_collectives(t) for r, t in timelines.items()}
        if min(len(s) for s in per_rank.values()) == 0:
            notes.append(f"no NCCL collective on every {kind}'s timeline: no late arrival to measure")
        else:
            cols, problems = match_collectives(per_rank, kind)
            warnings += problems
            if len(cols.names):
                steps, steps_from = collective_steps(cols, ranges)
                own = {rank: read_own_work(Path(trace.path) / "event.log") for rank, trace, _ in job}
                busy = {rank: gpu_busy(t) for rank, t in timelines.items()}
                late = late_arrivals(cols, steps, steps_from, own, busy)
    return CrossRank(kind, source, tuple(stragglers), compared, late, tuple(notes), tuple(warnings))


# ------------------------------------------------------------------ text


def plural(kind: str) -> str:
    return "processes" if kind == "process" else f"{kind}s"


def duration_text(ns: float) -> str:
    """`850.0 us` below 1 ms, else `4.10 ms`."""
    return f"{ns / 1e3:.1f} us" if abs(ns) < 1e6 else f"{ns / 1e6:.2f} ms"


def render(result: CrossRank) -> list[str]:
    out = _render_stragglers(result)
    if result.late is not None:
        out += [""] + _render_late(result.late, result.kind)
    out += [f"({note})" for note in result.notes]
    return out


def _render_stragglers(result: CrossRank) -> list[str]:
    from neutrino.analysis.tables import format_table, short

    kind, kinds = result.kind, plural(result.kind)
    head = (f"[slow {kinds} per kernel] {result.compared} kernel(s) compared across {kinds} "
            f"(durations from {result.source}; collectives left out)")
    if not result.stragglers:
        return [head, f"no kernel has a straggling {kind} (ratio >= {STRAGGLER_MIN_RATIO:.2f} and "
                      f"Mann-Whitney p < {STRAGGLER_ALPHA} after correction)"]
    rows = []
    for s in result.stragglers:
        scale, unit = (1e3, "us") if s.unit == "ns" else (1.0, s.unit)
        shape = f"{'x'.join(map(str, s.grid))} / {'x'.join(map(str, s.block))}"
        rows.append([short(s.kernel), shape, f"{kind} {s.rank}", f"{s.median / scale:.1f} {unit}",
                     f"{s.others / scale:.1f} {unit}", f"{s.ratio:.2f}", f"{s.p_value:.1e}",
                     "/".join(str(s.launches[r]) for r in sorted(s.launches))])
    table = format_table(["kernel", "grid / block", f"slow {kind}", "its median", f"other {kinds}",
                          "ratio", "p", "launches"], rows, left=(0, 1, 2))
    return [head, table]


def _render_late(late: LateArrivals, kind: str) -> list[str]:
    from neutrino.analysis.tables import format_table

    steps = sum(s.step != OUTSIDE_STEPS for s in late.steps)
    out = [f"[late arrivals at collectives] {late.matched} NCCL collective(s) matched across {len(late.ranks)} "
           f"{plural(kind)} in {steps} step(s); late = arriving last by more than the larger of "
           f"{LATE_FLOOR_NS / 1e3:.0f} us and {LATE_NOISE_FACTOR:g} x the arrival noise at the collective's place "
           f"in the step (median noise {late.sigma_ns / 1e3:.1f} us, threshold {late.threshold_ns / 1e3:.1f} us)"]
    late_steps = [s for s in late.steps if s.late_rank is not None and s.step != OUTSIDE_STEPS]
    shown = list(late.steps) if len(late.steps) <= STEP_TABLE_ROWS else late_steps[:STEP_TABLE_ROWS]
    rows = [[s.step, str(s.collectives), "-" if s.late_rank is None else f"{kind} {s.late_rank}",
             f"{s.late_by_ns / 1e3:.1f}", f"{s.wait_ns / 1e3:.1f}", f"{s.work_ns / 1e3:.1f}",
             f"{s.own_work_ns / 1e3:.1f}"] for s in shown]
    if rows:
        out.append(format_table(["step", "collectives", f"late {kind}", "late by (us)", "wait (us)", "work (us)",
                                 "own work (us)"], rows, left=(0, 2)))
    out += profiler_late_lines(late, kind)
    if len(shown) < len(late_steps) or len(late.steps) > STEP_TABLE_ROWS:
        out.append(f"({len(late_steps)} step(s) with a late {kind}, {len(shown)} shown; "
                   f"{len(late.steps) - len(late_steps)} step(s) without)")
    counts = Counter(s.late_rank for s in late_steps)
    for rank in sorted(counts):
        mean = float(np.mean([s.late_by_ns for s in late_steps if s.late_rank == rank]))
        out.append(f"{kind} {rank} arrives late at {counts[rank]} of {steps} steps "
                   f"(mean {duration_text(mean)})")
    if not counts:
        out.append(f"no {kind} arrives late at a collective beyond the noise")
    out += consistently_last(late, kind)
    out.append("at collectives: " + ", ".join(
        f"{kind} {r} waits {late.wait_by_rank[r] / 1e3:.1f} us, works {late.work_by_rank[r] / 1e3:.1f} us"
        for r in late.ranks))
    out.append(f"({late.steps_from}; arrivals compared on one clock: ranks of one host share it, ranks on "
               f"several hosts need synchronized clocks; collective ends agree within "
               f"{late.end_spread_ns / 1e3:.1f} us (median spread))")
    return out


def profiler_late_lines(late: LateArrivals, kind: str) -> list[str]:
    """The steps whose late arrival was Neutrino's own work on the late rank (not the program's)."""
    return [f"{kind} {s.last_rank} late by {duration_text(s.late_by_ns)} at {s.step} — during Neutrino's own "
            f"work on {kind} {s.last_rank} ({s.own_work_what or 'instrumentation'}: {duration_text(s.own_work_ns)} "
            f"more than on the next-latest {kind}): not counted as the program's"
            for s in late.steps if s.profiler_late]


def consistently_last(late: LateArrivals, kind: str) -> list[str]:
    """A rank that is last at more steps than chance allows, each time by less than the threshold: a
    one-sided binomial test of being last at k of N steps with probability 1/ranks each,
    Bonferroni-corrected for the ranks; reported when p < STRAGGLER_ALPHA and N >= MIN_COLLECTIVES_FOR_NOISE."""
    from scipy.stats import binomtest

    steps = [s for s in late.steps if s.step != OUTSIDE_STEPS]
    if len(steps) < MIN_COLLECTIVES_FOR_NOISE or len(late.ranks) < 2:
        return []
    out = []
    for rank, k in sorted(Counter(s.last_rank for s in steps).items()):
        p = min(1.0, binomtest(k, len(steps), 1 / len(late.ranks), alternative="greater").pvalue * len(late.ranks))
        below = [s.late_by_ns for s in steps if s.last_rank == rank and s.late_rank is None and not s.profiler_late]
        if p < STRAGGLER_ALPHA and below:
            out.append(f"{kind} {rank} arrives last at {k} of {len(steps)} steps (binomial p {p:.1e}), at "
                       f"{len(below)} of them by less than the threshold (median {np.median(below) / 1e3:.1f} us)")
    return out


def numbers(result: CrossRank) -> dict:
    """The cross-rank numbers for `report --format json` (`cross_rank`): ns, ratios and ranks as numbers."""
    late = result.late
    return {
        "unit": result.kind, "source": result.source, "compared": result.compared,
        "stragglers": [{"kernel": s.kernel, "grid": list(s.grid), "block": list(s.block), result.kind: s.rank,
                        "median": s.median, "others": s.others, "ratio": s.ratio, "p": s.p_value,
                        "launches": {str(r): n for r, n in s.launches.items()}, "value_unit": s.unit}
                       for s in result.stragglers],
        "late_arrivals": None if late is None else {
            "matched": late.matched, "sigma_ns": late.sigma_ns, "threshold_ns": late.threshold_ns,
            "steps_from": late.steps_from, "end_spread_ns": late.end_spread_ns,
            "steps": [{"step": s.step, "collectives": s.collectives, f"late_{result.kind}": s.late_rank,
                       f"last_{result.kind}": s.last_rank, "own_work_ns": s.own_work_ns,
                       "profiler_late": s.profiler_late,
                       "late_by_ns": s.late_by_ns, "wait_ns": s.wait_ns, "work_ns": s.work_ns} for s in late.steps],
            "wait_ns": {str(r): v for r, v in late.wait_by_rank.items()},
            "work_ns": {str(r): v for r, v in late.work_by_rank.items()}},
        "notes": list(result.notes)}
