"""Instructions (callgrind Ir) per corpus pass of the engine, this checkout vs another.

    python benchmarks/engine_ir.py [-p PROBE ...] [--against CHECKOUT] [--this CHECKOUT] [--layouts 5] [--reps 2]
    python benchmarks/engine_ir.py --loop PROBE REPS     (what callgrind runs)

A pass parses, instruments (default pipeline) and prints every corpus file of
this checkout, as benchmarks/engine.py times it. Wall time on this shared
machine swings up to 1.8x; instruction counts do not, once the run is made
deterministic: PYTHONHASHSEED=0 fixes str hashes and `setarch -R` (no address
randomisation) fixes addresses, so one command counts the same every time.
Addresses still decide the order of what is hashed by id(), and they move
with the process's environment: the same code counts up to 4% apart when
only the length of an unused environment variable changes. So each checkout
is counted under several such layouts (--layouts: padding of 0, 1, 2, ... kB)
and the median is compared; min and max show the spread.

    pass = (Ir(REPS passes) - Ir(1 pass)) / (REPS - 1), in millions of instructions

Later passes only (what the process imports, compiles or memoises on its
first kernel is left out). Each checkout runs this script with PYTHONPATH set
to its root, from the same path, on the same corpus.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
CORPUS = sorted((HERE.parent.parent / "tests" / "data" / "corpus").glob("*/*.ptx"))


def loop(probe_name: str, reps: int) -> None:
    """`reps` corpus passes: parse + default pipeline + print, as neutrino.engine.instrument runs them."""
    from neutrino.engine import cycle_collection_paused, instrument_module
    from neutrino.isa.ptx import parse_module, print_module
    try:
        from neutrino.toolbox import load_probes
    except ImportError:  # a checkout from before the tool registry
        from neutrino.probefile import load_probes
    probes = load_probes(probe_name)
    texts = [path.read_text() for path in CORPUS]
    for _ in range(reps):
        for text in texts:
            with cycle_collection_paused():
                module = parse_module(text)
                instrument_module(module, probes)
                print_module(module)


def instructions(root: Path, probe_name: str, reps: int, padding: int) -> int:
    """Ir of one deterministic callgrind run of `--loop probe_name reps` against the checkout at `root`."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1",
               ENGINE_IR_LAYOUT="x" * padding)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        command = ["setarch", "-R", "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                   sys.executable, str(HERE), "--loop", probe_name, str(reps)]
        subprocess.run(command, env=env, cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(errors="replace"), re.M)
    if match is None:
        raise SystemExit(f"engine_ir: no instruction total in callgrind's output for {probe_name} at {root}")
    return int(match.group(1))


def per_pass(root: Path, probe_name: str, reps: int, layouts: int) -> list[float]:
    """Millions of instructions of a later pass, under each layout."""
    out = []
    for layout in range(layouts):
        one, many = (instructions(root, probe_name, n, 1024 * layout) for n in (1, reps))
        out.append((many - one) / (reps - 1) / 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", "--probe", action="append", help="built-in tool or probe file (repeatable; default block_sched)")
    parser.add_argument("--against", type=Path, help="another checkout (e.g. `git archive 993829a~1 | tar -x -C DIR`)")
    parser.add_argument("--this", type=Path, default=HERE.parent.parent, help="the checkout measured as 'this' (default: this script's)")
    parser.add_argument("--layouts", type=int, default=5, help="environment layouts per checkout (median taken)")
    parser.add_argument("--reps", type=int, default=2, help="passes of the long run (>= 2)")
    parser.add_argument("--loop", nargs=2, metavar=("PROBE", "REPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop(args.loop[0], int(args.loop[1]))
        return
    if args.reps < 2 or args.layouts < 1:
        parser.error("--reps must be at least 2 and --layouts at least 1")
    roots = [("this", args.this.resolve())] + ([("other", args.against.resolve())] if args.against else [])
    print(f"{'probe':18s} " + " ".join(f"{name + ' pass [min-max]':>26s}" for name, _ in roots)
          + ("   this/other (medians)" if args.against else ""))
    for probe_name in args.probe or ["block_sched"]:
        medians, cells = [], []
        for _, root in roots:
            counts = per_pass(root, probe_name, args.reps, args.layouts)
            medians.append(statistics.median(counts))
            cells.append(f"{medians[-1]:8.1f} [{min(counts):.1f}-{max(counts):.1f}]")
        ratio = f"   {medians[0] / medians[1]:.3f}x" if args.against else ""
        print(f"{probe_name:18s} " + " ".join(f"{c:>26s}" for c in cells) + ratio, flush=True)
    print(f"(millions of instructions per corpus pass, callgrind; files={len(CORPUS)} reps={args.reps} "
          f"layouts={args.layouts}; this={roots[0][1]} other={args.against}; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
