"""How often the late-arrival analysis finds an injected delay, and how often it names a late rank
where there is none: synthetic jobs of tests/test_crossrank.py (`simulate`: per step a GEMM, 3
elementwise kernels, an all-reduce and an all-gather; lognormal noise on every kernel; a barrier
outside the steps reached up to 50 ms apart), one delay on rank 1 at step 3, many seeds.

    python benchmarks/crossrank_accuracy.py [--seeds 300] [--ranks 2] [--noise 0.05] [--delay-ms 3] [--no-ranges]

Prints `found F/S; false late steps X of Y`. CPU only (the analysis, not the profiler).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neutrino.analysis import context, crossrank  # noqa: E402
from tests.test_crossrank import simulate  # noqa: E402


def late_arrivals(job: Path, ranks: int) -> crossrank.LateArrivals:
    runs = [job / f"rank{r}" for r in range(ranks)]
    cols, _ = crossrank.match_collectives({r: crossrank.rank_collectives(context.read_timeline(run))
                                           for r, run in enumerate(runs)})
    steps, how = crossrank.collective_steps(cols, {r: context.read_ranges(run) for r, run in enumerate(runs)})
    return crossrank.late_arrivals(cols, steps, how)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=300)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--delay-ms", type=float, default=3.0)
    p.add_argument("--no-ranges", action="store_true")
    args = p.parse_args(argv)
    found = false = consistent = 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            job = Path(tmp) / f"job{seed}"
            simulate(job, args.ranks, seed=seed, noise=args.noise, delay=(1, 3, int(args.delay_ms * 1e6)),
                     step_ranges=not args.no_ranges)
            late = late_arrivals(job, args.ranks)
            consistent += bool(crossrank.consistently_last(late, "rank"))
            for row in late.steps:
                if row.step == "step 3":
                    found += row.late_rank == 1
                elif row.step != crossrank.OUTSIDE_STEPS:
                    false += row.late_rank is not None
            shutil.rmtree(job)
    print(f"ranks {args.ranks}, noise {args.noise}, delay {args.delay_ms} ms, "
          f"{'no ranges' if args.no_ranges else 'step ranges'}: found {found}/{args.seeds}; "
          f"false late steps {false} of {args.seeds * 9}; a rank consistently last (none is) in {consistent} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
