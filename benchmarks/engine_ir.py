"""Instructions (callgrind Ir) per corpus pass of the engine, this checkout vs another.

    python benchmarks/engine_ir.py [-p PROBE ...] [--against CHECKOUT] [--reps 3]
    python benchmarks/engine_ir.py --loop PROBE REPS     (what callgrind runs)

A pass parses, instruments (default pipeline) and prints every corpus file of
this checkout, as benchmarks/engine.py times it. Wall time on this shared
machine swings up to 1.8x; instruction counts do not, once the run is made
deterministic: PYTHONHASHSEED=0 fixes str hashes and `setarch -R` (no address
randomisation) fixes the id()-based order of sets of objects. Printed, in
millions of instructions:

    first  = Ir(1 pass) - Ir(0 passes): the first pass, with what it imports late and memoises
    pass   = (Ir(REPS passes) - Ir(1 pass)) / (REPS - 1): a later pass (steady state)

Ir(0 passes) loads the probe and reads the corpus only. Each checkout runs this
checkout's script with PYTHONPATH set to its root, so both time the same loop
on the same corpus.
"""

from __future__ import annotations

import argparse
import os
import re
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


def instructions(root: Path, probe_name: str, reps: int) -> int:
    """Ir of one deterministic callgrind run of `--loop probe_name reps` against the checkout at `root`."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        command = ["setarch", "-R", "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                   sys.executable, str(HERE), "--loop", probe_name, str(reps)]
        subprocess.run(command, env=env, cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(errors="replace"), re.M)
    if match is None:
        raise SystemExit(f"engine_ir: no instruction total in callgrind's output for {probe_name} at {root}")
    return int(match.group(1))


def measure(root: Path, probe_name: str, reps: int) -> tuple[float, float]:
    """(first pass, later pass) in millions of instructions."""
    zero, one, many = (instructions(root, probe_name, n) for n in (0, 1, reps))
    return (one - zero) / 1e6, (many - one) / (reps - 1) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", "--probe", action="append", help="built-in tool or probe file (repeatable; default block_sched)")
    parser.add_argument("--against", type=Path, help="another checkout (e.g. `git archive 993829a~1 | tar -x -C DIR`)")
    parser.add_argument("--reps", type=int, default=3, help="passes of the long run (>= 2)")
    parser.add_argument("--loop", nargs=2, metavar=("PROBE", "REPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop(args.loop[0], int(args.loop[1]))
        return
    if args.reps < 2:
        parser.error("--reps must be at least 2")
    roots = [("this", HERE.parent.parent)] + ([("other", args.against.resolve())] if args.against else [])
    print(f"{'probe':18s} " + " ".join(f"{name + ' first':>12s} {name + ' pass':>11s}" for name, _ in roots)
          + ("   pass this/other" if args.against else ""))
    for probe_name in args.probe or ["block_sched"]:
        results = [measure(root, probe_name, args.reps) for _, root in roots]
        row = " ".join(f"{first:12.1f} {later:11.1f}" for first, later in results)
        ratio = f"   {results[0][1] / results[1][1]:.3f}x" if args.against else ""
        print(f"{probe_name:18s} {row}{ratio}", flush=True)
    print(f"(millions of instructions, callgrind; files={len(CORPUS)} reps={args.reps}; "
          f"other={args.against}; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
