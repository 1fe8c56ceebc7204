"""Power and false positives of `neutrino diff`'s statistics (issue 23's target).

    python benchmarks/diff_power.py                       # 1,000 kernels x 20 seeds, 3% shift, 1.5% noise
    python benchmarks/diff_power.py --spread 0.02 --launches 50
    python benchmarks/diff_power.py --traces --kernels 100 --seeds 3   # through real trace directories

Each seed draws, for every kernel, `launches` per-launch values of A and of B (lognormal with
`spread` as the sigma of the log, around a per-kernel base); one kernel's B is multiplied by
1 + shift. The comparisons go through `neutrino.analysis.diff` (`compare_samples` and
`decide`: Mann-Whitney U, Benjamini-Hochberg at --alpha). With --traces, A and B are written as
trace directories (neutrino.analysis.synthetic.kernel_runs) and compared with `diff.diff`,
every metric included (durations, block and warp spans, ...): the shifted kernel counts as
found when any of its metrics is significant, a false positive is any other kernel with a
significant metric. Prints found / seeds and false positives / (other kernels x seeds).
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


def one_seed_samples(seed: int, args) -> tuple[bool, int]:
    rng = np.random.default_rng(seed)
    shifted = int(rng.integers(args.kernels))
    comparisons = []
    for k in range(args.kernels):
        base = 1e4 * (1 + k % 13)
        a = rng.lognormal(np.log(base), args.spread, args.launches)
        b = rng.lognormal(np.log(base * (1 + args.shift if k == shifted else 1.0)), args.spread, args.launches)
        comparisons.append(D.compare_samples(("all", f"k{k}", (1, 1, 1), (1, 1, 1)), "duration_ns", a, b,
                                             resamples=args.resamples, test=args.test))
    significant = {c.kernel for c in D.decide(comparisons, args.alpha) if c.significant}
    return f"k{shifted}" in significant, len(significant - {f"k{shifted}"})


def one_seed_traces(seed: int, args) -> tuple[bool, int]:
    from neutrino.analysis import synthetic as S

    shifted = f"k{seed % args.kernels}"
    with tempfile.TemporaryDirectory() as tmp:
        a = S.kernel_runs(Path(tmp) / "a", seed=2 * seed, kernels=args.kernels, launches=args.launches,
                          spread=args.spread)
        b = S.kernel_runs(Path(tmp) / "b", seed=2 * seed + 1, kernels=args.kernels, launches=args.launches,
                          spread=args.spread, shift={shifted: 1 + args.shift})
        result = D.diff(a, b, alpha=args.alpha, resamples=args.resamples, test=args.test)
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
    args = ap.parse_args(argv)
    started = time.perf_counter()
    found = false = 0
    for seed in range(args.seeds):
        hit, wrong = (one_seed_traces if args.traces else one_seed_samples)(seed, args)
        found += hit
        false += wrong
    others = (args.kernels - 1) * args.seeds
    print(f"{'traces' if args.traces else 'samples'}: {args.kernels} kernels x {args.launches} launches per side, "
          f"noise {args.spread:.1%}, shift {args.shift:+.0%}, {args.test}, alpha {args.alpha}: found in {found}/{args.seeds} "
          f"seeds; false positives {false}/{others} ({false / others:.3%}); {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
