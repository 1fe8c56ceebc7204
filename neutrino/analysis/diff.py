"""`neutrino diff A B`: what changed inside each kernel between two traces or jobs.

Kernels are matched by name and launch shape (grid, block). For each match and each metric
that both sides measured (spec/tools.md, "diff": launch duration, block and warp spans,
tail share, busy imbalance over SMs, blocks per SM, bytes per launch, tensor ops, and the
kernel's GPU time from timeline.bin) the per-launch values of A and B are compared: the
relative change of the median with a bootstrap confidence interval, the Mann-Whitney U
p-value, and the Benjamini-Hochberg adjusted p-value (q) over every comparison made, so
that many kernels do not make false alarms. Jobs are compared rank by rank and pooled
over ranks. Memory: one float per launch and metric; frames are read one at a time.
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


def collect(path, *, pooled_only: bool = False) -> Side:
    """The per-launch metrics of every probed launch (and timeline kernel) of a trace or job."""
    side = Side(str(path))
    runs = launch_stream.members(path)
    side.ranks = [rank for rank, _ in runs]
    for rank, run in runs:
        events = nt.read_events(run / "event.log")
        probe = run / "probe.toml"
        probe_text = probe.read_text(errors="replace") if probe.exists() else None
        for ev in launch_stream.launches_by_kernel(run, events):
            grid, block = launch_stream.dims(ev.get("grid")), launch_stream.dims(ev.get("block"))
            key = (rank, str(ev.get("kernel", "")), grid, block)
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
        _timeline_metrics(side, rank, run)
    return side


def _timeline_metrics(side: Side, rank: int, run: Path) -> None:
    try:
        found = context_tables.read_timeline(run)
    except (nt.TraceError, OSError, ValueError) as e:
        side.problems.append(f"rank {rank}: {run}: {e}")
        return
    if found is None:
        return
    recs, names = found
    kernels = np.flatnonzero(np.asarray(recs["kind"]) == 1)
    for i in kernels.tolist():
        r = recs[i]
        key = (rank, str(names[i]), tuple(int(v) for v in r["grid"]), tuple(int(v) for v in r["block"]))
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
    test: str = "mwu"  # the test that gave p
    q: float = float("nan")
    significant: bool = False

    @property
    def change_unit(self) -> str:
        return "pp" if METRICS[self.metric].kind == "points" else "%"

    def is_regression(self, above: float) -> bool:
        """Significant, in the direction its metric calls worse, and larger than `above` (% or pp)."""
        m = METRICS[self.metric]
        return self.significant and m.worse == "up" and self.change == self.change and self.change > above

    @property
    def reason(self) -> str:
        m = METRICS[self.metric]
        if not self.significant:
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


def compare_samples(key: tuple, metric: str, a, b, *, resamples: int = BOOTSTRAP, test: str = "mwu") -> Comparison:
    """One comparison of the values of A and B (q and significance are set over all comparisons);
    `test` "welch-log" takes p from welch_log where it applies, else Mann-Whitney's."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    m = METRICS[metric]
    med_a, med_b = float(np.median(a)), float(np.median(b))
    p, auc = mann_whitney(a, b)
    p_log = welch_log(a, b) if test == "welch-log" else None
    if p_log is not None:
        p = p_log
    lo, hi = bootstrap_interval(m, a, b, np.random.default_rng(seed_of(key, metric)), resamples)
    rank, kernel, grid, block = key
    return Comparison(str(rank), kernel, grid, block, metric, len(a), len(b), med_a, med_b,
                      float(effect_of(m, med_a, med_b)), lo, hi, p, auc, "welch-log" if p_log is not None else "mwu")


def decide(comparisons: list[Comparison], alpha: float) -> list[Comparison]:
    """Set q (Benjamini-Hochberg over all comparisons) and significance (q < alpha); sorted by
    significance: q, then the size of the change."""
    q = benjamini_hochberg(np.array([c.p for c in comparisons]))
    for c, qi in zip(comparisons, q):
        c.q = float(qi)
        c.significant = bool(qi < alpha)
    return sorted(comparisons, key=lambda c: (c.q, -abs(c.change) if c.change == c.change else 0.0, c.kernel))


# --------------------------------------------------------------------- matching and output


def pooled(side: Side) -> dict[tuple, dict[str, np.ndarray]]:
    """The values of every (kernel, grid, block) over all ranks, keyed with rank "all"."""
    out: dict[tuple, dict[str, list]] = {}
    for (rank, kernel, grid, block), metrics in side.values.items():
        entry = out.setdefault(("all", kernel, grid, block), {})
        for metric, values in metrics.items():
            entry.setdefault(metric, []).append(np.frombuffer(values, dtype=np.float64))
    return {key: {m: np.concatenate(v) for m, v in metrics.items()} for key, metrics in out.items()}


def _groups(a: Side, b: Side) -> list[tuple[dict, dict]]:
    """Keyed values to compare: per rank when either side is a job of several ranks, and pooled."""
    groups = [(pooled(a), pooled(b))]
    if len(a.ranks) > 1 or len(b.ranks) > 1:
        as_arrays = [{key: {m: np.frombuffer(v, dtype=np.float64) for m, v in metrics.items()}
                      for key, metrics in side.values.items()} for side in (a, b)]
        groups.insert(0, tuple(as_arrays))
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

    @property
    def significant(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.significant]


def diff(path_a, path_b, *, alpha: float = 0.05, resamples: int = BOOTSTRAP, test: str = "mwu") -> DiffResult:
    if not 0 < alpha < 1:
        raise DiffError(f"--alpha {alpha}: must lie between 0 and 1")
    if test not in TESTS:
        raise DiffError(f"--test {test}: one of {', '.join(TESTS)}")
    a, b = collect(path_a), collect(path_b)
    comparisons = []
    only_a, only_b = set(), set()
    for values_a, values_b in _groups(a, b):
        for key in sorted(values_a.keys() & values_b.keys(), key=repr):
            for metric in METRICS:
                va, vb = values_a[key].get(metric), values_b[key].get(metric)
                if va is not None and vb is not None and len(va) >= MIN_LAUNCHES and len(vb) >= MIN_LAUNCHES:
                    comparisons.append(compare_samples(key, metric, va, vb, resamples=resamples, test=test))
        if values_a and next(iter(values_a))[0] == "all":
            only_a |= {key[1:] for key in values_a.keys() - values_b.keys()}
            only_b |= {key[1:] for key in values_b.keys() - values_a.keys()}
    return DiffResult(str(path_a), str(path_b), decide(comparisons, alpha), sorted(only_a), sorted(only_b), alpha,
                      a.problems + b.problems)


def _shape(grid, block) -> str:
    return f"{'x'.join(map(str, grid))}/{'x'.join(map(str, block))}"


COLUMNS = ("rank", "kernel", "shape", "metric", "n_a", "n_b", "median_a", "median_b", "change", "change_unit",
           "ci_low", "ci_high", "p", "test", "q", "auc", "significant", "reason")


def rows(result: DiffResult) -> list[dict]:
    out = []
    for c in result.comparisons:
        out.append({"rank": c.rank, "kernel": c.kernel, "shape": _shape(c.grid, c.block), "metric": c.metric,
                    "n_a": c.n_a, "n_b": c.n_b, "median_a": c.median_a, "median_b": c.median_b,
                    "change": _finite(c.change), "change_unit": c.change_unit, "ci_low": _finite(c.ci_low),
                    "ci_high": _finite(c.ci_high), "p": c.p, "test": c.test, "q": c.q, "auc": c.auc, "significant": c.significant,
                    "reason": c.reason})
    return out


def _finite(v: float):
    return v if v == v and math.isfinite(v) else None


def render_text(result: DiffResult, show_all: bool = False) -> str:
    from neutrino.analysis.tables import format_table, short

    shapes = {(c.rank, c.kernel, c.grid, c.block) for c in result.comparisons}
    sig = result.significant
    lines = [f"diff {result.a} -> {result.b}: {len(shapes)} kernel shape(s) compared, {len(result.comparisons)} "
             f"comparison(s), {len(sig)} significant (Benjamini-Hochberg q < {result.alpha:g})"]
    shown = result.comparisons if show_all else sig
    if shown:
        table = [[c.rank, short(c.kernel), _shape(c.grid, c.block), c.metric, f"{c.n_a}/{c.n_b}", _num(c.median_a),
                  _num(c.median_b), "-" if c.change != c.change else f"{c.change:+.2f}{c.change_unit}",
                  "-" if c.ci_low != c.ci_low else f"[{c.ci_low:.2f}, {c.ci_high:.2f}]", f"{c.p:.2g}", f"{c.q:.2g}",
                  c.reason] for c in shown]
        lines.append(format_table(["rank", "kernel", "grid/block", "metric", "n A/B", "median A", "median B", "change",
                                   "95% CI", "p", "q", "reason"], table, left=(1, 2, 3, 11)))
    for label, keys in (("only in A", result.only_a), ("only in B", result.only_b)):
        for kernel, grid, block in keys:
            lines.append(f"{label}: {short(kernel)} {_shape(grid, block)}")
    return "\n".join(lines) + "\n"


def render(result: DiffResult, output_format: str, show_all: bool = False) -> str:
    if output_format == "json":
        return json.dumps({"a": result.a, "b": result.b, "alpha": result.alpha, "comparisons": rows(result),
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


def main(path_a: str, path_b: str, *, output_format: str = "text", fail_above: float | None = None,
         alpha: float = 0.05, show_all: bool = False, test: str = "mwu") -> int:
    """`neutrino diff A B`: the comparisons on stdout; 1 when --fail-above finds a larger regression."""
    result = diff(path_a, path_b, alpha=alpha, test=test)
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
