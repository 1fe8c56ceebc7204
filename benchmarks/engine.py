"""Per-kernel time of parse + default pipeline + print over the corpus.

    python benchmarks/engine.py [-p PROBE] [-n ROUNDS]

Each round instruments every corpus file once, files in turn, so that a slow
spell of a shared machine touches all files alike rather than a few. Prints,
per corpus file, the median over the rounds of each phase and of the whole,
then the median and max over files, in milliseconds, with the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from neutrino.engine import cycle_collection_paused, instrument_module
from neutrino.isa.ptx import parse_module, print_module
from neutrino.probefile import load_probes

CORPUS = sorted((Path(__file__).parent.parent / "tests" / "data" / "corpus").glob("*/*.ptx"))


def time_once(text: str, probes) -> tuple[float, float, float]:
    """(parse, pipeline, print) seconds, as `neutrino.engine.instrument` runs them."""
    with cycle_collection_paused():
        start = time.perf_counter()
        module = parse_module(text)
        parsed = time.perf_counter()
        instrument_module(module, probes)
        piped = time.perf_counter()
        print_module(module)
        done = time.perf_counter()
    return parsed - start, piped - parsed, done - piped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", "--probe", default="block_sched")
    parser.add_argument("-n", "--rounds", type=int, default=20)
    args = parser.parse_args()
    probes = load_probes(args.probe)
    texts = [path.read_text() for path in CORPUS]
    samples: list[list[tuple[float, float, float]]] = [[] for _ in CORPUS]
    for _ in range(args.rounds):
        for i, text in enumerate(texts):
            samples[i].append(time_once(text, probes))
    rows = []
    for path, text, runs in zip(CORPUS, texts, samples):
        phases = [statistics.median(r[k] for r in runs) * 1e3 for k in range(3)]
        total = statistics.median(sum(r) for r in runs) * 1e3
        rows.append((path.parent.name + "/" + path.name, len(text.splitlines()), phases, total))
    print(f"{'file':70s} {'lines':>6s} {'parse':>7s} {'passes':>7s} {'print':>7s} {'total':>7s}")
    for name, lines, phases, total in sorted(rows, key=lambda r: r[3]):
        print(f"{name:70s} {lines:6d} {phases[0]:7.2f} {phases[1]:7.2f} {phases[2]:7.2f} {total:7.2f}")
    totals = [r[3] for r in rows]
    print(f"\nprobe={args.probe} files={len(rows)} rounds={args.rounds} median={statistics.median(totals):.2f} ms max={max(totals):.2f} ms")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
