"""Power and false positives of `neutrino diff`'s statistics (issue 23's target).

    python benchmarks/diff_power.py --min-effect 0        # 1,000 kernels x 20 seeds, 3% shift, 1.5% noise
    python benchmarks/diff_power.py                       # the same with diff's default: one run, 20% minimum
    python benchmarks/diff_power.py --spread 0.02 --launches 50
    python benchmarks/diff_power.py --traces --kernels 100 --seeds 3   # through real trace directories
    python benchmarks/diff_power.py --runs 10 --run-spread 0.01   # 10 runs per side, 1% between runs
    python benchmarks/diff_power.py --runs 1 --run-spread 0.01    # the same noise, one run per side
    python benchmarks/diff_power.py --global-spread 0.1   # one factor per run for all its kernels (clocks)

Each seed draws, for every kernel, `launches` per-launch values of A and of B (lognormal with
`spread` as the sigma of the log, around a per-kernel base); one kernel's B is multiplied by
1 + shift. With --runs K each side is K runs, and each run of each kernel is first multiplied
by its own factor, lognormal with sigma --run-spread (two processes of one program differ), and
with --global-spread every run by one factor for all its kernels (GPU clocks, environment).
The comparisons go through `neutrino.analysis.diff` (`compare_many` and `decide`: with one run
per side Mann-Whitney U on the launches judged against the kernels' common shift, with several
the test on run summaries; Benjamini-
Hochberg at --alpha; --min-effect as `neutrino diff`'s, default: its default rule). With
--traces, A and B are written as trace directories (neutrino.analysis.synthetic.kernel_runs) and compared with `diff.diff`,
every metric included (durations, block and warp spans, ...): the shifted kernel counts as
found when any of its metrics is significant, a false positive is any other kernel with a
significant metric. Prints found / seeds and false positives / (other kernels x seeds): those
kernels are A/A comparisons (the same distribution on both sides, run-to-run noise included).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from neutrino.analysis import diff as D  # noqa: E402


def one_run(rng: np.random.Generator, base: float, args, scale: float = 1.0) -> np.ndarray:
    """The launches of one run: lognormal around base times this run's own factor for this kernel
    and `scale`, the run's factor common to all its kernels."""
    run_factor = rng.lognormal(0.0, args.run_spread) if args.run_spread > 0 else 1.0
    return rng.lognormal(np.log(base * run_factor * scale), args.spread, args.launches)


def one_seed_samples(seed: int, args) -> tuple[bool, int]:
    rng = np.random.default_rng(seed)
    shifted = int(rng.integers(args.kernels))
    scales = rng.lognormal(0.0, args.global_spread, (2, args.runs)) if args.global_spread > 0 else np.ones((2, args.runs))
    items = []
    for k in range(args.kernels):
        base = 1e4 * (1 + k % 13)
        runs = [[one_run(rng, base * factor, args, scales[side, r]) for r in range(args.runs)]
                for side, factor in enumerate((1.0, 1 + args.shift if k == shifted else 1.0))]
        items.append((("all", f"k{k}", (1, 1, 1), (1, 1, 1)), "duration_ns", *runs))
    comparisons = D.compare_many(items, resamples=args.resamples, test=args.test)
    significant = {c.kernel for c in D.decide(comparisons, args.alpha, args.min_effect) if c.significant}
    return f"k{shifted}" in significant, len(significant - {f"k{shifted}"})


def one_seed_traces(seed: int, args) -> tuple[bool, int]:
    from neutrino.analysis import synthetic as S

    shifted = f"k{seed % args.kernels}"
    with tempfile.TemporaryDirectory() as tmp:
        sides = [[S.kernel_runs(Path(tmp) / f"{side}{r}", seed=1000 * seed + 2 * r + (side == "b"),
                                kernels=args.kernels, launches=args.launches, spread=args.spread,
                                run_spread=args.run_spread,
                                shift={shifted: 1 + args.shift} if side == "b" else None)
                  for r in range(args.runs)] for side in "ab"]
        result = D.diff(*sides, alpha=args.alpha, resamples=args.resamples, test=args.test,
                        min_effect=args.min_effect, warmup=0)
    significant = {c.kernel for c in result.significant}
    return shifted in significant, len(significant - {shifted})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--launches", type=int, default=30, help="launches per kernel and side")
    ap.add_argument("--spread", type=float, default=0.015, help="sigma of log(value): ~1.5%% noise")
    ap.add_argument("--shift", type=float, default=0.03)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--resamples", type=int, default=200, help="bootstrap resamples (the interval only)")
    ap.add_argument("--test", choices=("mwu", "welch-log"), default="mwu", help="the p-value's test")
    ap.add_argument("--traces", action="store_true", help="through trace directories and every metric")
    ap.add_argument("--runs", type=int, default=1, help="runs per side")
    ap.add_argument("--run-spread", type=float, default=0.0, help="sigma of log(a run's factor): between-run noise")
    ap.add_argument("--global-spread", type=float, default=0.0,
                    help="sigma of log(a run's factor common to all its kernels): clocks, environment")
    ap.add_argument("--min-effect", type=float, default=None,
                    help="PCT, as neutrino diff's (default: its rule, 20 with one run per side, else 0)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    found = false = 0
    for seed in range(args.seeds):
        hit, wrong = (one_seed_traces if args.traces else one_seed_samples)(seed, args)
        found += hit
        false += wrong
    others = (args.kernels - 1) * args.seeds
    floor = "default" if args.min_effect is None else f"{args.min_effect:g}%"
    print(f"{'traces' if args.traces else 'samples'}: {args.kernels} kernels x {args.runs} run(s) x {args.launches} "
          f"launches per side, noise {args.spread:.1%} within, {args.run_spread:.1%} between runs per kernel and "
          f"{args.global_spread:.1%} per run for all kernels, shift "
          f"{args.shift:+.0%}, {args.test}, alpha {args.alpha}, min effect {floor}: found in {found}/{args.seeds} "
          f"seeds; A/A false positives {false}/{others} ({false / others:.3%}); {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
