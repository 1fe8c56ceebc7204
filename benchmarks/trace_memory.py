"""Peak memory and time of `neutrino report` over many launches and over a sparse section (issue 30 §6).

    python benchmarks/trace_memory.py [--launches 300 3000] [--sparse-units 134217728] [--tree DIR]

Writes, in a temporary directory, a dmat trace of N launches (one kernel, 256 threads
of 4 accesses each per launch: a full 512 x 256 histogram, the case that kept about
1 MB per launch), and a run whose one result file declares 2^27 units in a sparse
section with two valid records. Runs `neutrino report DIR --format csv` (and, for the
sparse run, the API: load, valid, dropped) from the tree DIR (default: this checkout)
in a subprocess and prints its wall time and its own peak resident memory (os.wait4).
Pass `--tree` another checkout to compare (the trace is written with this checkout's
writers either way).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
sys.path.insert(0, str(HERE))

import tracefuzz as tf  # noqa: E402

API = """
import neutrino.trace as nt
for launch in nt.load({path!r}).launches:
    for data in launch.maps.values():
        data.valid(), data.dropped
"""


def measure(tree: Path, argv: list[str]) -> tuple[float, int, int]:
    """(seconds, peak RSS in MiB, exit status) of `python argv` run from `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1"}
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, *argv], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - began, usage.ru_maxrss >> 10, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, nargs="*", default=[300, 3000])
    parser.add_argument("--sparse-units", type=int, default=1 << 27)
    parser.add_argument("--tree", type=Path, default=HERE)
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"tree {args.tree}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.launches:
            run = tf.seed_dmat(Path(tmp) / f"dmat{n}", np.random.default_rng(0), launches=n, grid=(4, 1, 1),
                               block=(64, 1, 1))
            seconds, mib, rc = measure(args.tree, ["-m", "neutrino", "report", str(run), "--format", "csv"])
            print(f"report --format csv, {n} dmat launches: {seconds:.1f} s, peak {mib} MiB, exit {rc}")
        run = tf.seed_block_sched(Path(tmp) / "sparse", np.random.default_rng(0))
        tf.write_sparse_result(run / "result" / "0.bin", args.sparse_units, counts_at=[5, args.sparse_units // 2])
        for name in ("1.bin", "2.bin"):
            (run / "result" / name).unlink()
        seconds, mib, rc = measure(args.tree, ["-m", "neutrino", "report", str(run), "--format", "csv"])
        print(f"report --format csv, a section of {args.sparse_units} units (sparse): {seconds:.1f} s, peak {mib} MiB, "
              f"exit {rc}")
        seconds, mib, rc = measure(args.tree, ["-c", API.format(path=str(run))])
        print(f"API load/valid/dropped, the same: {seconds:.1f} s, peak {mib} MiB, exit {rc}")


if __name__ == "__main__":
    main()
