"""Per-kernel time of parse + default pipeline + print over the corpus.

    python benchmarks/engine.py [-p PROBE] [-n REPEATS]

Prints, per corpus file, the median over REPEATS runs, then the median and max
over files, in milliseconds, with the machine it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from neutrino.engine import instrument
from neutrino.probefile import load_probes

CORPUS = sorted((Path(__file__).parent.parent / "tests" / "data" / "corpus").glob("*/*.ptx"))


def time_one(text: str, probes, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        instrument(text, probes)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", "--probe", default="block_sched")
    parser.add_argument("-n", "--repeats", type=int, default=20)
    args = parser.parse_args()
    probes = load_probes(args.probe)
    rows = []
    for path in CORPUS:
        text = path.read_text()
        rows.append((path.parent.name + "/" + path.name, len(text.splitlines()), time_one(text, probes, args.repeats)))
    for name, lines, ms in sorted(rows, key=lambda r: r[2]):
        print(f"{name:70s} {lines:6d} lines {ms:8.2f} ms")
    times = [r[2] for r in rows]
    print(f"\nprobe={args.probe} files={len(rows)} median={statistics.median(times):.2f} ms max={max(times):.2f} ms")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
