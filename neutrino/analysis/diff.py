"""`neutrino diff A B` (or `A1 A2 ... --vs B1 B2 ...`): what changed inside each kernel between runs.

Kernels are matched by name and launch shape (grid, block). For each match and each metric
that both sides measured (spec/tools.md, "diff": launch duration, block and warp spans,
tail share, busy imbalance over SMs, blocks per SM, bytes per launch, tensor ops, and the
kernel's GPU time from timeline.bin) the per-launch values of A and B are compared: the
relative change of the median with a confidence interval, a p-value, and the Benjamini-Hochberg
adjusted p-value (q) over every comparison made, so that many kernels do not make false alarms.
With several runs (processes) per side the p-value tests the runs' summaries and the interval
resamples runs, then launches: two processes of one program differ more than launches of one
process do. With one run on a side the launches are tested (Mann-Whitney U), each kernel against
the shift common to all kernels of the two runs (the run-to-run variation they show), or, with
fewer than PEER_KERNELS kernels, with a minimum effect. Each shape's first launch per run is left out (warm-up).
Jobs are compared rank by rank and pooled over ranks. Memory: one float per launch and metric;
frames are read one at a time.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import zlib
from array import array
from pathlib import Path

import attrs
import numpy as np

from neutrino import trace as nt
from neutrino.analysis import _common as C
from neutrino.analysis import block_sched, context_tables, gmem_bytes, launch_stream, tensorop
from neutrino.errors import NeutrinoError

BOOTSTRAP = 2000
LEVEL = 0.95
MIN_LAUNCHES = 3  # per side: fewer cannot give a p-value below any useful threshold
WARMUP = 1  # launches of each kernel shape dropped at the start of each run (cold caches and TLBs, clocks)
ONE_RUN_MIN_EFFECT = 20.0  # % (pp): with one run on a side and too few kernels, the smallest change called significant
MAD_DF = 0.37  # efficiency of 1.4826 x MAD against the standard deviation (normal data): its degrees of freedom
PEER_KERNELS = 8  # kernels of one metric (one run per side) that estimate the run-to-run variation (spec/tools.md)


@attrs.frozen
class Metric:
    name: str
    label: str  # as the reason says it
    unit: str
    kind: str  # "ratio": change in % of the median of A; "points": difference of medians x 100 (percentage points)
    worse: str | None  # "up" when larger is a regression, None when neither direction is
    more: str  # the reason's first word(s) when B's median is larger
    less: str


METRICS = {m.name: m for m in (
    Metric("duration_ns", "median launch duration", "ns", "ratio", "up", "slower", "faster"),
    Metric("gpu_time_ns", "median GPU time (timeline)", "ns", "ratio", "up", "slower", "faster"),
    Metric("launch_span", "median launch span (blocks)", "clock", "ratio", "up", "slower", "faster"),
    Metric("block_span", "median block span", "clock", "ratio", "up", "slower", "faster"),
    Metric("warp_span", "median warp span", "clock", "ratio", "up", "slower", "faster"),
    Metric("tail_share", "median tail share", "fraction", "points", "up", "longer tail", "shorter tail"),
    Metric("sm_busy_imbalance", "median busy max/mean over SMs", "ratio", "ratio", "up",
           "more imbalance across SMs", "less imbalance across SMs"),
    Metric("blocks_per_sm", "median blocks per SM", "blocks", "ratio", None, "more blocks per SM", "fewer blocks per SM"),
    Metric("gmem_bytes", "median bytes per launch", "bytes", "ratio", "up", "more bytes per launch",
           "fewer bytes per launch"),
    Metric("tensor_ops", "median tensor-op warp instructions per launch", "instructions", "ratio", None,
           "more tensor ops", "fewer tensor ops"),
)}


class DiffError(NeutrinoError):
    """Traces that cannot be compared."""


@attrs.define
class Side:
    """The per-launch values of one trace or job: (rank, kernel, grid, block) -> metric -> values."""

    path: str
    ranks: list[int] = attrs.Factory(list)
    values: dict[tuple, dict[str, array]] = attrs.Factory(dict)
    problems: list[str] = attrs.Factory(list)

    def add(self, key: tuple, metric: str, value) -> None:
        if value is None or not math.isfinite(float(value)):
            return
        self.values.setdefault(key, {}).setdefault(metric, array("d")).append(float(value))


@attrs.frozen
class _LaunchView:
    """What the tool analyses read of a launch."""

    index: int
    kernel: str
    grid: tuple
    block: tuple
    duration_ns: float | None


def frame_metrics(view: _LaunchView, frame, probe_text: str | None) -> dict[str, float]:
    """The metrics one launch's maps give (spec/tools.md, "diff"); a tool's map is found by its
    name (spec/analysis.md, "Finding a tool's map"), never by its fields."""
    out: dict[str, float] = {}
    for md in frame.maps.values():
        try:
            if md.name in block_sched.MAP_NAMES:
                out.update(_block_metrics(block_sched.analyze_launch(view, md, probe_text)))
            elif md.name in gmem_bytes.MAP_NAMES:
                out["gmem_bytes"] = gmem_bytes.analyze_launch(view, md, probe_text).stats.total
            elif md.name in tensorop.MAP_NAMES:
                out["tensor_ops"] = tensorop.analyze_launch(view, md, probe_text).stats.warp_instructions
        except C.AnalysisError:
            continue  # a map of a tool's name that lacks the tool's fields: not compared
    return out


def _block_metrics(result) -> dict[str, float]:
    tl, stats = result.timeline, result.stats
    if not len(tl):
        return {}
    return {"launch_span": stats.span, "block_span": float(np.median(tl.end - tl.start)),
            "warp_span": float(np.median(tl.warp_end - tl.warp_start)), "tail_share": stats.tail_fraction,
            "sm_busy_imbalance": stats.busy_imbalance, "blocks_per_sm": stats.blocks / max(1, len(stats.sms))}


def collect(path, *, warmup: int = WARMUP) -> Side:
    """The per-launch metrics of every probed launch (and timeline kernel) of a trace or job, less
    the first `warmup` launches of each kernel shape in each run (cold caches, clocks ramping up)."""
    side = Side(str(path))
    runs = launch_stream.members(path)
    side.ranks = [rank for rank, _ in runs]
    for rank, run in runs:
        events = nt.read_events(run / "event.log")
        probe = run / "probe.toml"
        probe_text = probe.read_text(errors="replace") if probe.exists() else None
        seen: dict[tuple, int] = {}
        gpu_ns = nt.timeline_gpu_ns(run, side.problems)  # each launch's time from its timeline record where it has one
        for ev in launch_stream.launches_by_kernel(run, events):
            ev = dict(ev, duration_ns=nt.launch_duration(ev, gpu_ns)[0])
            grid, block = launch_stream.dims(ev.get("grid")), launch_stream.dims(ev.get("block"))
            key = (rank, str(ev.get("kernel", "")), grid, block)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= warmup:
                continue
            duration = ev.get("duration_ns")
            side.add(key, "duration_ns", duration if isinstance(duration, (int, float)) else None)
            view = _LaunchView(launch_stream.as_int(ev.get("index")), key[1], grid, block, duration)
            try:
                frame = launch_stream.read_frame(run, ev)
            except (nt.TraceError, OSError, ValueError) as e:
                side.problems.append(f"rank {rank}: launch {ev.get('index')} of {key[1]}: {e}")
                continue
            for metric, value in frame_metrics(view, frame, probe_text).items():
                side.add(key, metric, value)
        _timeline_metrics(side, rank, run, warmup)
    return side


def _timeline_metrics(side: Side, rank: int, run: Path, warmup: int) -> None:
    try:
        found = context_tables.read_timeline(run)
    except (nt.TraceError, OSError, ValueError) as e:
        side.problems.append(f"rank {rank}: {run}: {e}")
        return
    if found is None:
        return
    recs, names = found
    kernels = np.flatnonzero(np.asarray(recs["kind"]) == 1)
    kernels = kernels[np.argsort(np.asarray(recs["start_ns"])[kernels], kind="stable")]
    seen: dict[tuple, int] = {}
    for i in kernels.tolist():
        r = recs[i]
        key = (rank, str(names[i]), tuple(int(v) for v in r["grid"]), tuple(int(v) for v in r["block"]))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= warmup:
            continue
        side.add(key, "gpu_time_ns", int(r["end_ns"]) - int(r["start_ns"]))


# --------------------------------------------------------------------- statistics


def effect_of(metric: Metric, median_a, median_b):
    """The change of B against A: relative (%) for ratio metrics, percentage points for fractions.
    Works elementwise on arrays (the bootstrap); NaN where A's median is 0 for a ratio."""
    median_a, median_b = np.asarray(median_a, dtype=np.float64), np.asarray(median_b, dtype=np.float64)
    if metric.kind == "points":
        return (median_b - median_a) * 100.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(median_a != 0, (median_b / median_a - 1.0) * 100.0, np.nan)


def bootstrap_interval(metric: Metric, a: np.ndarray, b: np.ndarray, rng: np.random.Generator,
                       resamples: int = BOOTSTRAP, level: float = LEVEL) -> tuple[float, float]:
    """Percentile bootstrap interval of the effect: A and B resampled with replacement (each on
    its own), the effect of their medians computed `resamples` times; NaN when undefined."""
    effects = np.empty(resamples)
    rows = max(1, (1 << 21) // max(len(a), len(b)))  # resamples drawn at once: bounded memory
    for lo in range(0, resamples, rows):
        n = min(rows, resamples - lo)
        med_a = np.median(a[rng.integers(0, len(a), (n, len(a)))], axis=1)
        med_b = np.median(b[rng.integers(0, len(b), (n, len(b)))], axis=1)
        effects[lo:lo + n] = effect_of(metric, med_a, med_b)
    if np.isnan(effects).any():
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2 * 100
    lo_v, hi_v = np.percentile(effects, [tail, 100 - tail])
    return float(lo_v), float(hi_v)


def mann_whitney(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(two-sided p-value, P(B > A) + P(B = A)/2) of the Mann-Whitney U test; p = 1 when every value is equal."""
    from scipy.stats import mannwhitneyu

    if np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0, 0.5
    res = mannwhitneyu(b, a, alternative="two-sided")
    return float(res.pvalue), float(res.statistic) / (len(a) * len(b))


TESTS = ("mwu", "welch-log")


def welch_log(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided p-value of Welch's t-test on log(values) (the test of a ratio under lognormal noise,
    stronger than Mann-Whitney in the far tail); None where it does not apply: a value <= 0, or
    no spread on either side (Mann-Whitney answers those)."""
    from scipy.stats import ttest_ind

    if (a <= 0).any() or (b <= 0).any() or np.all(a == a[0]) or np.all(b == b[0]):
        return None
    return float(ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue)


def run_summary(metric: Metric, values: np.ndarray) -> tuple[float, float, int]:
    """(summary, its within-run variance, launches) of one run's values: the median, of log values
    for a ratio metric whose values are all > 0 (`on_log`), else of the values; its variance
    (pi/2) * sigma^2 / n with sigma = 1.4826 * MAD (the sample standard deviation when MAD is 0)."""
    x = np.log(values) if on_log(metric, values) else values
    med = float(np.median(x))
    sigma = 1.4826 * float(np.median(np.abs(x - med)))
    if sigma == 0.0 and len(x) > 1:
        sigma = float(np.std(x, ddof=1))
    return med, math.pi / 2 * sigma * sigma / len(x), len(x)


def on_log(metric: Metric, values: np.ndarray) -> bool:
    return metric.kind == "ratio" and bool((values > 0).all())


def runs_test(metric: Metric, runs_a: list[np.ndarray], runs_b: list[np.ndarray]) -> float:
    """Two-sided p of Welch's t on the runs' summaries (run_summary; log scale where both sides'
    values are > 0), each side's variance of its mean summary the larger of the between-run one
    (sample variance / runs) and the within-run one (sum of the runs' variances / runs^2: runs
    that agree by chance more closely than their launches allow are not believed), with runs - 1
    degrees of freedom; df Welch-Satterthwaite. 1 when both sides agree exactly."""
    from scipy.stats import t as student_t

    log = all(on_log(metric, v) for v in runs_a + runs_b)
    scale = metric if log else attrs.evolve(metric, kind="points")
    parts = []
    for runs in (runs_a, runs_b):
        summaries = [run_summary(scale, v) for v in runs]
        mids = np.array([m for m, _, _ in summaries])
        k = len(mids)
        between, within = float(np.var(mids, ddof=1)) / k, sum(w for _, w, _ in summaries) / (k * k)
        parts.append((float(mids.mean()), max(between, within), k - 1))
    (mean_a, var_a, df_a), (mean_b, var_b, df_b) = parts
    delta, var = mean_b - mean_a, var_a + var_b
    if var == 0.0:
        return 1.0 if delta == 0.0 else 0.0
    df = var * var / (var_a * var_a / df_a + var_b * var_b / df_b)
    return float(2 * student_t.sf(abs(delta) / math.sqrt(var), df))


def hierarchical_interval(metric: Metric, runs_a: list[np.ndarray], runs_b: list[np.ndarray],
                          rng: np.random.Generator, resamples: int = BOOTSTRAP,
                          level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the change of the pooled medians, resampling runs with replacement,
    then launches within each drawn run (each drawn run gives its side's mean launch count)."""
    medians = []
    for runs in (runs_a, runs_b):
        flat = np.concatenate(runs)
        sizes = np.array([len(v) for v in runs])
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        per_run = max(1, int(round(sizes.mean())))
        med = np.empty(resamples)
        rows = max(1, (1 << 21) // (len(runs) * per_run))
        for lo in range(0, resamples, rows):
            n = min(rows, resamples - lo)
            drawn = rng.integers(0, len(runs), (n, len(runs), 1))
            within = (rng.random((n, len(runs), per_run)) * sizes[drawn]).astype(np.int64)
            med[lo:lo + n] = np.median(flat[(offsets[drawn] + within).reshape(n, -1)], axis=1)
        medians.append(med)
    effects = effect_of(metric, medians[0], medians[1])
    if np.isnan(effects).any():
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2 * 100
    lo_v, hi_v = np.percentile(effects, [tail, 100 - tail])
    return float(lo_v), float(hi_v)


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Adjusted p-values (q) of Benjamini-Hochberg: q_(i) = min over j >= i of p_(j) * m / j."""
    p = np.asarray(p, dtype=np.float64)
    m = len(p)
    if m == 0:
        return p
    order = np.argsort(p)
    scaled = p[order] * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(q, 1.0)
    return out


def log_change(metric: Metric, median_a: float, median_b: float) -> float:
    """The change on the scale where run-to-run variation is additive: log(median B / median A) for
    a ratio metric (NaN unless both are > 0), percentage points for a "points" metric."""
    if metric.kind == "points":
        return (median_b - median_a) * 100.0
    return math.log(median_b / median_a) if median_a > 0 and median_b > 0 else float("nan")


@attrs.frozen
class CommonShift:
    """How much every kernel of one metric (and rank) moved between the two runs: the median of the
    kernels' log_change (`centre`) and its robust spread 1.4826 x MAD (`spread`), same scale."""

    rank: str
    metric: str
    kernels: int
    centre: float
    spread: float

    def z(self, alpha: float) -> float:
        """Student t quantile at alpha / (2 kernels) with MAD_DF x (kernels - 1) degrees of freedom:
        were run-to-run moves normal around the centre, the chance that any of the kernels lies beyond
        z x spread by that noise alone would be at most about alpha (Bonferroni over the kernels,
        which is also Benjamini-Hochberg's bar for the first discovery among them); t rather than
        the normal quantile because the spread is estimated from those kernels, with the degrees of
        freedom of a standard deviation as precise as their MAD (its efficiency, 0.37)."""
        from scipy.stats import t as student_t

        return float(student_t.isf(alpha / (2 * self.kernels), MAD_DF * (self.kernels - 1)))

    def as_change(self, value: float) -> float:
        """A value on the log_change scale as a change (%, or pp for a points metric)."""
        return value if METRICS[self.metric].kind == "points" else (math.exp(value) - 1.0) * 100.0

    def band(self, alpha: float) -> tuple[float, float]:
        """The changes (% or pp) that this run-to-run variation explains: centre -/+ z x spread."""
        half = self.z(alpha) * self.spread
        return self.as_change(self.centre - half), self.as_change(self.centre + half)

    def beyond(self, c: Comparison, alpha: float) -> bool:
        """The kernel's log_change lies farther from the centre than z x spread."""
        d = log_change(METRICS[self.metric], c.median_a, c.median_b)
        return d == d and abs(d - self.centre) > self.z(alpha) * self.spread

    def remove(self, b: np.ndarray) -> np.ndarray:
        """B's values with the common shift taken out (what the kernel's own test compares with A)."""
        if METRICS[self.metric].kind == "points":
            return b - self.centre / 100.0
        return b / math.exp(self.centre)


def common_shifts(medians: list[tuple[str, str, float, float]]) -> dict[tuple[str, str], CommonShift]:
    """(rank, metric) -> CommonShift from (rank, metric, median A, median B) of comparisons with one
    run on a side, for each (rank, metric) with at least PEER_KERNELS defined log changes."""
    changes: dict[tuple[str, str], list[float]] = {}
    for rank, metric, med_a, med_b in medians:
        d = log_change(METRICS[metric], med_a, med_b)
        if d == d and math.isfinite(d):
            changes.setdefault((rank, metric), []).append(d)
    out = {}
    for (rank, metric), values in changes.items():
        if len(values) >= PEER_KERNELS:
            x = np.asarray(values)
            centre = float(np.median(x))
            out[(rank, metric)] = CommonShift(rank, metric, len(x), centre,
                                              1.4826 * float(np.median(np.abs(x - centre))))
    return out


def compare_many(items: list[tuple], *, resamples: int = BOOTSTRAP, test: str = "mwu") -> list[Comparison]:
    """compare_runs of every (key, metric, runs A, runs B); comparisons with one run on a side of a
    (rank, metric) with enough kernels are tested against that metric's common shift."""
    one_run = [(str(key[0]), metric, float(np.median(np.concatenate(ra))), float(np.median(np.concatenate(rb))))
               for key, metric, ra, rb in items if min(_runs_with_values(ra), _runs_with_values(rb)) < 2]
    shifts = common_shifts(one_run)
    out = []
    for key, metric, ra, rb in items:
        single = min(_runs_with_values(ra), _runs_with_values(rb)) < 2
        common = shifts.get((str(key[0]), metric)) if single else None
        if common is not None and not _defined_change(metric, ra, rb):
            common = None  # a change without a log (a median <= 0): judged by the minimum effect
        out.append(compare_runs(key, metric, ra, rb, resamples=resamples, test=test, common=common))
    return out


def _defined_change(metric: str, runs_a: list, runs_b: list) -> bool:
    d = log_change(METRICS[metric], float(np.median(np.concatenate(runs_a))), float(np.median(np.concatenate(runs_b))))
    return d == d and math.isfinite(d)


def _runs_with_values(runs: list) -> int:
    return sum(1 for v in runs if len(v))


@attrs.define
class Comparison:
    rank: str  # a rank number, or "all" (pooled over ranks)
    kernel: str
    grid: tuple
    block: tuple
    metric: str
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    change: float  # % (ratio metrics) or percentage points
    ci_low: float
    ci_high: float
    p: float
    auc: float  # P(B > A) + P(B = A) / 2
    test: str = "mwu"  # the test that gave p: "mwu", "welch-log" (launches) or "runs" (runs_test)
    q: float = float("nan")
    significant: bool = False
    runs_a: int = 1
    runs_b: int = 1
    min_effect: float = 0.0  # the smallest |change| (% or pp) that decide() called significant
    common: CommonShift | None = None  # one run on a side, enough kernels: the run-to-run variation judged against
    within_common: bool = False  # q < alpha, but the change lies inside the common band (CommonShift.band)
    band: tuple[float, float] | None = None  # that band (% or pp), set by decide()

    @property
    def change_unit(self) -> str:
        return "pp" if METRICS[self.metric].kind == "points" else "%"

    def is_regression(self, above: float) -> bool:
        """Significant, in the direction its metric calls worse, and larger than `above` (% or pp)."""
        m = METRICS[self.metric]
        return self.significant and m.worse == "up" and self.change == self.change and self.change > above

    def large_enough(self, min_effect: float) -> bool:
        """|change| >= min_effect; an undefined change passes only a minimum of 0."""
        return min_effect <= 0 or (self.change == self.change and abs(self.change) >= min_effect)

    @property
    def reason(self) -> str:
        m = METRICS[self.metric]
        if not self.significant:
            if self.within_common and self.band is not None:
                return (f"within the run-to-run variation of all kernels [{self.band[0]:.1f}, {self.band[1]:.1f}]"
                        f"{self.change_unit}")
            if self.q < 1.0 and self.q == self.q and not self.large_enough(self.min_effect):
                return f"below --min-effect {self.min_effect:g}{self.change_unit}"
            return "no significant change"
        word = m.more if self.median_b > self.median_a or (self.median_b == self.median_a and self.auc > 0.5) else m.less
        if self.change != self.change:
            return f"{word}: {m.label} {_num(self.median_a)} -> {_num(self.median_b)}"
        return (f"{word}: {m.label} {self.change:+.1f}{self.change_unit} "
                f"[{self.ci_low:.1f}, {self.ci_high:.1f}]")


def _num(v: float) -> str:
    return C.fmt_num(v)


def seed_of(key: tuple, metric: str) -> int:
    """A fixed seed per comparison: the same traces give the same intervals every time."""
    return zlib.crc32(repr((key, metric)).encode())


def compare_samples(key: tuple, metric: str, a, b, *, resamples: int = BOOTSTRAP, test: str = "mwu",
                    common: CommonShift | None = None) -> Comparison:
    """One comparison of the values of A and B (q and significance are set over all comparisons);
    `test` "welch-log" takes p from welch_log where it applies, else Mann-Whitney's. With `common`
    the test (p) sees B without the common shift of all kernels (remove_common); medians,
    change and interval are of the values as measured."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    m = METRICS[metric]
    med_a, med_b = float(np.median(a)), float(np.median(b))
    p, auc = mann_whitney(a, b)
    tested = b
    if common is not None:
        tested = common.remove(b)
        p, _ = mann_whitney(a, tested)
    p_log = welch_log(a, tested) if test == "welch-log" else None
    if p_log is not None:
        p = p_log
    lo, hi = bootstrap_interval(m, a, b, np.random.default_rng(seed_of(key, metric)), resamples)
    rank, kernel, grid, block = key
    return Comparison(str(rank), kernel, grid, block, metric, len(a), len(b), med_a, med_b,
                      float(effect_of(m, med_a, med_b)), lo, hi, p, auc, "welch-log" if p_log is not None else "mwu",
                      common=common)


def compare_runs(key: tuple, metric: str, runs_a: list, runs_b: list, *, resamples: int = BOOTSTRAP,
                 test: str = "mwu", common: CommonShift | None = None) -> Comparison:
    """One comparison of several runs per side (runs_test and hierarchical_interval) when both sides
    have at least 2 runs; else of the pooled launches (compare_samples). Medians and change: of the
    pooled launches."""
    runs_a = [np.asarray(v, dtype=np.float64) for v in runs_a if len(v)]
    runs_b = [np.asarray(v, dtype=np.float64) for v in runs_b if len(v)]
    pooled_a, pooled_b = np.concatenate(runs_a), np.concatenate(runs_b)
    if len(runs_a) < 2 or len(runs_b) < 2:
        c = compare_samples(key, metric, pooled_a, pooled_b, resamples=resamples, test=test, common=common)
    else:
        m = METRICS[metric]
        med_a, med_b = float(np.median(pooled_a)), float(np.median(pooled_b))
        _, auc = mann_whitney(pooled_a, pooled_b)
        lo, hi = hierarchical_interval(m, runs_a, runs_b, np.random.default_rng(seed_of(key, metric)), resamples)
        rank, kernel, grid, block = key
        c = Comparison(str(rank), kernel, grid, block, metric, len(pooled_a), len(pooled_b), med_a, med_b,
                       float(effect_of(m, med_a, med_b)), lo, hi, runs_test(m, runs_a, runs_b), auc, "runs")
    c.runs_a, c.runs_b = len(runs_a), len(runs_b)
    return c


def default_min_effect(c: Comparison) -> float:
    """ONE_RUN_MIN_EFFECT where a side has one run (its launches cannot show process-to-process
    variation) and too few kernels of its metric give that variation (no `common`), else 0."""
    return ONE_RUN_MIN_EFFECT if min(c.runs_a, c.runs_b) < 2 and c.common is None else 0.0


def decide(comparisons: list[Comparison], alpha: float, min_effect: float | None = None) -> list[Comparison]:
    """Set q (Benjamini-Hochberg over all comparisons) and significance: q < alpha, |change| at least
    min_effect (None: default_min_effect of each comparison) and, where the comparison has a common
    shift, a change beyond its band (CommonShift.beyond); sorted by q, then the size of the change."""
    q = benjamini_hochberg(np.array([c.p for c in comparisons]))
    for c, qi in zip(comparisons, q):
        c.q = float(qi)
        c.min_effect = default_min_effect(c) if min_effect is None else float(min_effect)
        c.significant = bool(qi < alpha) and c.large_enough(c.min_effect)
        if c.common is not None:
            c.band = c.common.band(alpha)
            c.within_common = c.significant and not c.common.beyond(c, alpha)
            c.significant = c.significant and not c.within_common
    return sorted(comparisons, key=lambda c: (c.q, -abs(c.change) if c.change == c.change else 0.0, c.kernel))


# --------------------------------------------------------------------- matching and output


def run_groups(sides: list[Side], per_rank: bool) -> dict[tuple, dict[str, list[np.ndarray]]]:
    """key -> metric -> one array of values per run. Pooled (rank "all"): every process of every
    trace given is a run; per rank: each trace's process of that rank is one run."""
    out: dict[tuple, dict[str, list]] = {}
    for side in sides:
        for (rank, kernel, grid, block), metrics in side.values.items():
            entry = out.setdefault((rank if per_rank else "all", kernel, grid, block), {})
            for metric, values in metrics.items():
                entry.setdefault(metric, []).append(np.frombuffer(values, dtype=np.float64))
    return out


def _groups(a: list[Side], b: list[Side]) -> list[tuple[dict, dict]]:
    """Keyed runs to compare: per rank when either side holds a job of several ranks, and pooled."""
    groups = [(run_groups(a, False), run_groups(b, False))]
    if any(len(side.ranks) > 1 for side in a + b):
        groups.insert(0, (run_groups(a, True), run_groups(b, True)))
    return groups


@attrs.define
class DiffResult:
    a: str
    b: str
    comparisons: list[Comparison]
    only_a: list[tuple]
    only_b: list[tuple]
    alpha: float
    problems: list[str]
    runs: tuple[int, int] = (1, 1)  # traces given per side
    min_effect: float | None = None  # --min-effect; None: the default rule (default_min_effect)
    warmup: int = WARMUP

    @property
    def significant(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.significant]

    @property
    def common_shifts(self) -> list[CommonShift]:
        """The common shifts that judged comparisons, in order of rank and metric."""
        found = {(c.common.rank, c.common.metric): c.common for c in self.comparisons if c.common is not None}
        return [found[k] for k in sorted(found)]

    @property
    def notes(self) -> list[str]:
        out = []
        if any(min(c.runs_a, c.runs_b) < 2 and c.common is None for c in self.comparisons):
            floor = (f"{ONE_RUN_MIN_EFFECT:g}% (pp) by default" if self.min_effect is None
                     else f"{self.min_effect:g}% (pp), --min-effect")
            out.append(f"one run on a side and fewer than {PEER_KERNELS} kernels of a metric: the launches cannot "
                       "show how much two processes of the same program differ, so only changes of at least "
                       f"{floor} are called significant; give several runs per side (A1 A2 ... --vs B1 B2 ...) "
                       "to test against run-to-run variation")
        out += self._common_notes()
        if self.warmup:
            out.append(f"the first {self.warmup} launch(es) of each kernel shape in each run left out (--warmup)")
        return out

    def _common_notes(self) -> list[str]:
        shifts = self.common_shifts
        if not shifts:
            return []
        out = [f"one run on a side: the run-to-run variation of each metric is taken from its kernels (at least "
               f"{PEER_KERNELS}): a kernel's change counts when it lies outside the common shift +/- z x spread "
               f"(z for alpha / (2 kernels)), after its launch test without the common shift"]
        for s in shifts:
            lo, hi = s.band(self.alpha)
            if lo > 0 or hi < 0:  # the common shift is beyond what one kernel's run-to-run noise makes
                unit = "pp" if METRICS[s.metric].kind == "points" else "%"
                shift = s.as_change(s.centre)
                out.append(f"rank {s.rank} {s.metric}: all {s.kernels} kernels moved by {shift:+.1f}{unit} (median; "
                           f"kernels within [{lo:.1f}, {hi:.1f}]{unit} not called changed): GPU clock or environment, "
                           "or a change of every kernel, which one run per side cannot tell apart")
        return out


def _as_paths(paths) -> list:
    return list(paths) if isinstance(paths, (list, tuple)) else [paths]


def diff(paths_a, paths_b, *, alpha: float = 0.05, resamples: int = BOOTSTRAP, test: str = "mwu",
         min_effect: float | None = None, warmup: int = WARMUP) -> DiffResult:
    """Compare the traces (or jobs) of A with those of B: one path or a list of paths per side."""
    if not 0 < alpha < 1:
        raise DiffError(f"--alpha {alpha}: must lie between 0 and 1")
    if test not in TESTS:
        raise DiffError(f"--test {test}: one of {', '.join(TESTS)}")
    if min_effect is not None and not (min_effect >= 0 and math.isfinite(min_effect)):
        raise DiffError(f"--min-effect {min_effect}: must be a percentage >= 0")
    if warmup < 0:
        raise DiffError(f"--warmup {warmup}: must be >= 0")
    paths_a, paths_b = _as_paths(paths_a), _as_paths(paths_b)
    a = [collect(p, warmup=warmup) for p in paths_a]
    b = [collect(p, warmup=warmup) for p in paths_b]
    items = []
    only_a, only_b = set(), set()
    for values_a, values_b in _groups(a, b):
        for key in sorted(values_a.keys() & values_b.keys(), key=repr):
            for metric in METRICS:
                ra, rb = values_a[key].get(metric), values_b[key].get(metric)
                if ra is None or rb is None or sum(map(len, ra)) < MIN_LAUNCHES or sum(map(len, rb)) < MIN_LAUNCHES:
                    continue
                items.append((key, metric, ra, rb))
        if values_a and next(iter(values_a))[0] == "all":
            only_a |= {key[1:] for key in values_a.keys() - values_b.keys()}
            only_b |= {key[1:] for key in values_b.keys() - values_a.keys()}
    return DiffResult(" ".join(map(str, paths_a)), " ".join(map(str, paths_b)),
                      decide(compare_many(items, resamples=resamples, test=test), alpha, min_effect), sorted(only_a), sorted(only_b), alpha,
                      [p for side in a + b for p in side.problems], (len(paths_a), len(paths_b)), min_effect, warmup)


def _shape(grid, block) -> str:
    return f"{'x'.join(map(str, grid))}/{'x'.join(map(str, block))}"


COLUMNS = ("rank", "kernel", "shape", "metric", "runs_a", "runs_b", "n_a", "n_b", "median_a", "median_b", "change",
           "change_unit",
           "ci_low", "ci_high", "p", "test", "q", "auc", "min_effect", "significant", "reason")


def rows(result: DiffResult) -> list[dict]:
    out = []
    for c in result.comparisons:
        out.append({"rank": c.rank, "kernel": c.kernel, "shape": _shape(c.grid, c.block), "metric": c.metric,
                    "runs_a": c.runs_a, "runs_b": c.runs_b, "n_a": c.n_a, "n_b": c.n_b, "median_a": c.median_a,
                    "median_b": c.median_b,
                    "change": _finite(c.change), "change_unit": c.change_unit, "ci_low": _finite(c.ci_low),
                    "ci_high": _finite(c.ci_high), "p": c.p, "test": c.test, "q": c.q, "auc": c.auc,
                    "min_effect": c.min_effect, "significant": c.significant,
                    "reason": c.reason})
    return out


def _finite(v: float):
    return v if v == v and math.isfinite(v) else None


def render_text(result: DiffResult, show_all: bool = False) -> str:
    from neutrino.analysis.tables import format_table, short

    shapes = {(c.rank, c.kernel, c.grid, c.block) for c in result.comparisons}
    sig = result.significant
    lines = [f"diff {result.a} -> {result.b}: {len(shapes)} kernel shape(s) compared, {len(result.comparisons)} "
             f"comparison(s), {len(sig)} significant (Benjamini-Hochberg q < {result.alpha:g}); runs A/B: "
             f"{result.runs[0]}/{result.runs[1]}"]
    lines += [f"note: {note}" for note in result.notes]
    shown = result.comparisons if show_all else sig
    if shown:
        table = [[c.rank, short(c.kernel), _shape(c.grid, c.block), c.metric, f"{c.runs_a}/{c.runs_b}",
                  f"{c.n_a}/{c.n_b}", _num(c.median_a),
                  _num(c.median_b), "-" if c.change != c.change else f"{c.change:+.2f}{c.change_unit}",
                  "-" if c.ci_low != c.ci_low else f"[{c.ci_low:.2f}, {c.ci_high:.2f}]", f"{c.p:.2g}", f"{c.q:.2g}",
                  c.reason] for c in shown]
        lines.append(format_table(["rank", "kernel", "grid/block", "metric", "runs A/B", "n A/B", "median A",
                                   "median B", "change",
                                   "95% CI", "p", "q", "reason"], table, left=(1, 2, 3, 12)))
    for label, keys in (("only in A", result.only_a), ("only in B", result.only_b)):
        for kernel, grid, block in keys:
            lines.append(f"{label}: {short(kernel)} {_shape(grid, block)}")
    return "\n".join(lines) + "\n"


def _shift_row(s: CommonShift, alpha: float) -> dict:
    lo, hi = s.band(alpha)
    return {"rank": s.rank, "metric": s.metric, "kernels": s.kernels, "shift": s.as_change(s.centre),
            "centre": s.centre, "spread": s.spread, "z": s.z(alpha), "band_low": lo, "band_high": hi}


def render(result: DiffResult, output_format: str, show_all: bool = False) -> str:
    if output_format == "json":
        return json.dumps({"a": result.a, "b": result.b, "alpha": result.alpha, "runs": list(result.runs),
                           "min_effect": result.min_effect, "warmup": result.warmup, "notes": result.notes,
                           "common_shifts": [_shift_row(s, result.alpha) for s in result.common_shifts],
                           "comparisons": rows(result),
                           "only_in_a": [{"kernel": k, "shape": _shape(g, b)} for k, g, b in result.only_a],
                           "only_in_b": [{"kernel": k, "shape": _shape(g, b)} for k, g, b in result.only_b]},
                          indent=1) + "\n"
    if output_format == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows(result))
        return out.getvalue()
    return render_text(result, show_all)


def main(path_a, path_b, *, output_format: str = "text", fail_above: float | None = None,
         alpha: float = 0.05, show_all: bool = False, test: str = "mwu", min_effect: float | None = None,
         warmup: int = WARMUP) -> int:
    """`neutrino diff A B` (or A1 A2 ... --vs B1 B2 ...): the comparisons on stdout; 1 when
    --fail-above finds a larger regression."""
    result = diff(path_a, path_b, alpha=alpha, test=test, min_effect=min_effect, warmup=warmup)
    for problem in result.problems:
        print(f"neutrino diff: warning: {problem}", file=sys.stderr)
    sys.stdout.write(render(result, output_format, show_all))
    if fail_above is None:
        return 0
    worse = [c for c in result.comparisons if c.is_regression(fail_above)]
    for c in worse:
        print(f"neutrino diff: regression above {fail_above:g}%: rank {c.rank} {c.kernel} {_shape(c.grid, c.block)} "
              f"{c.metric}: {c.reason}", file=sys.stderr)
    return 1 if worse else 0
