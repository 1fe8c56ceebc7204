"""GCN engine speed: parse + GCN pipeline + print per corpus file (tests/data/gcn), median of N rounds.

usage: python benchmarks/gcn_engine.py [-n ROUNDS]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from neutrino.engine_gcn import instrument_gcn
from neutrino.isa.gcn import parse_module, print_module
from neutrino.toolbox import load_probes

CORPUS = sorted((Path(__file__).parent.parent / "tests" / "data" / "gcn").glob("*.s"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=20)
    args = parser.parse_args()
    texts = [p.read_text() for p in CORPUS]
    rows = [("round trip (parse + print)", lambda t: print_module(parse_module(t)))]
    for name in ("block_sched", "gmem_bytes", "gmem_bytes_thread"):
        probes = load_probes(name, isa="gcn")
        rows.append((name, lambda t, probes=probes: instrument_gcn(t, probes)))
    for label, fn in rows:
        per_file = []
        for text in texts:
            times = []
            for _ in range(args.n):
                start = time.perf_counter()
                fn(text)
                times.append(time.perf_counter() - start)
            per_file.append(statistics.median(times))
        print(f"{label:28s} median per file {statistics.median(per_file) * 1e3:6.2f} ms, "
              f"largest {max(per_file) * 1e3:6.2f} ms ({len(texts)} files)")


if __name__ == "__main__":
    main()
