"""GCN engine speed: parse + GCN pipeline + print per corpus file (tests/data/gcn), median of N rounds.

usage: python benchmarks/gcn_engine.py [-n ROUNDS]
       python benchmarks/gcn_engine.py --against OTHER_CHECKOUT [-p PROBE] [-n ROUNDS]

`--against` times this checkout and another one (say `git archive REV | tar -x -C DIR`),
each in a process of its own, alternating file by file as benchmarks/engine.py does,
and prints each one's median per file and the per-file ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from neutrino.isa.gcn import parse_module, print_module
from neutrino.toolbox import load_probes

CORPUS = sorted((Path(__file__).parent.parent / "tests" / "data" / "gcn").glob("*.s"))


def gcn_instrument():
    """`text, probes → Instrumented` of whichever checkout is on the path (before the Isa interface: engine_gcn)."""
    try:
        from neutrino.engine import instrument
        from neutrino.isa.gcn.target import GCN
    except ImportError:
        from neutrino.engine_gcn import instrument_gcn

        return instrument_gcn
    return lambda text, probes: instrument(text, probes, isa=GCN)


def worker(probe_name: str) -> None:
    """For `--against`: reads corpus indices on stdin, answers each with the seconds one instrumentation took."""
    run, probes = gcn_instrument(), load_probes(probe_name, isa="gcn")
    texts = [p.read_text() for p in CORPUS]
    for line in sys.stdin:
        start = time.perf_counter()
        run(texts[int(line)], probes)
        print(time.perf_counter() - start, flush=True)


def against(other: Path, probe_name: str, rounds: int) -> None:
    this = Path(__file__).resolve().parent.parent
    procs = {name: subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", "-p", probe_name],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root,
                                    env=dict(os.environ, PYTHONPATH=str(root)))
             for name, root in (("this", this), ("other", other.resolve()))}
    samples: dict[str, list[list[float]]] = {name: [[] for _ in CORPUS] for name in procs}
    for round_ in range(rounds):
        for i in range(len(CORPUS)):
            for name in ("this", "other") if (round_ + i) % 2 == 0 else ("other", "this"):
                procs[name].stdin.write(f"{i}\n")
                procs[name].stdin.flush()
                samples[name][i].append(float(procs[name].stdout.readline()))
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    medians = {name: [statistics.median(runs) * 1e3 for runs in per_file] for name, per_file in samples.items()}
    for name in procs:
        print(f"{name:6s} median per file {statistics.median(medians[name]):.3f} ms, sum {sum(medians[name]):.2f} ms")
    ratios = [a / b for a, b in zip(medians["this"], medians["other"])]
    print(f"this/other per file: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    print(f"probe={probe_name} files={len(CORPUS)} rounds={rounds} other={other}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("-p", "--probe", default="gmem_bytes", help="for --against: a GCN probe (default gmem_bytes)")
    parser.add_argument("--against", type=Path, help="another checkout to time in the same run, interleaved")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.probe)
    if args.against:
        return against(args.against, args.probe, args.n)
    texts = [p.read_text() for p in CORPUS]
    rows = [("round trip (parse + print)", lambda t: print_module(parse_module(t)))]
    run = gcn_instrument()
    for name in ("block_sched", "gmem_bytes", "gmem_bytes_thread"):
        probes = load_probes(name, isa="gcn")
        rows.append((name, lambda t, probes=probes: run(t, probes)))
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
