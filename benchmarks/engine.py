"""Per-kernel time of parse + default pipeline + print over the corpus.

    python benchmarks/engine.py [-p PROBE] [-n ROUNDS]
    python benchmarks/engine.py --scaling [-p PROBE ...] [--sizes 1000,10000,100000]
    python benchmarks/engine.py --against OTHER_CHECKOUT [-p PROBE] [-n ROUNDS]

Each round instruments every corpus file once, files in turn, so that a slow
spell of a shared machine touches all files alike rather than a few. Prints,
per corpus file, the median over the rounds of each phase and of the whole,
then the median and max over files, in milliseconds, with the machine.

`--against` times this checkout and another one (an older commit, say from
`git archive REV | tar -x -C DIR`) in one process, alternating per file and
round, so that a noisy machine slows both alike; it prints each one's median
per file and the per-file ratios.

`--scaling` instead instruments generated kernels of growing size (one kernel,
pruned to it as the runtime does with `-k`) and prints the cost per
instruction of the whole and of each phase and pass: a column that grows
with the size is a pass that is not linear.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import sys
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


def generated_kernel(instructions: int) -> str:
    """A kernel of about `instructions` instructions in blocks of the shapes nvcc emits: loads, arithmetic, stores, a branch."""
    block = [
        "\tld.global.u32 \t%r{a}, [%rd{b}+{off}];",
        "\tadd.s32 \t%r{c}, %r{a}, %r1;",
        "\tmul.wide.s32 \t%rd{d}, %r{c}, 4;",
        "\tadd.s64 \t%rd{e}, %rd2, %rd{d};",
        "\tst.global.u32 \t[%rd{e}], %r{c};",
        "\tsetp.lt.s32 \t%p1, %r{c}, %r2;",
        "\t@%p1 bra \t$L__BB0_{label};",
        "$L__BB0_{label}:",
    ]
    lines = [
        ".version 8.0", ".target sm_90", ".address_size 64", "",
        ".visible .entry scaled(", "\t.param .u64 scaled_param_0,", "\t.param .u64 scaled_param_1", ")", "{",
        "\t.reg .pred \t%p<2>;", "\t.reg .b32 \t%r<64>;", "\t.reg .b64 \t%rd<64>;", "",
        "\tld.param.u64 \t%rd1, [scaled_param_0];", "\tld.param.u64 \t%rd2, [scaled_param_1];",
        "\tmov.u32 \t%r1, %tid.x;", "\tmov.u32 \t%r2, %ctaid.x;",
    ]
    for label in range(max(1, (instructions - 5) // 7)):
        k = label % 20
        fields = dict(a=3 + k, b=1, off=4 * k, c=23 + k, d=3 + k, e=23 + k, label=label)
        lines += [line.format(**fields) for line in block]
    lines += ["\tret;", "}", ""]
    return "\n".join(lines)


def scaling(probe_names: list[str], sizes: list[int], rounds: int) -> None:
    print(f"{'probe':14s} {'insns':>7s} {'total':>7s} {'parse':>7s} {'print':>7s}  per-pass µs/insn")
    for probe_name in probe_names:
        probes = load_probes(probe_name)
        for size in sizes:
            text = generated_kernel(size)
            runs = []
            for _ in range(rounds if size < 100_000 else max(1, rounds // 4)):
                with cycle_collection_paused():
                    start = time.perf_counter()
                    module = parse_module(text)
                    parsed = time.perf_counter()
                    ctx = instrument_module(module, probes, kernel="scaled")
                    piped = time.perf_counter()
                    print_module(module)
                    done = time.perf_counter()
                runs.append((done - start, parsed - start, done - piped, dict(ctx.timings)))
            count = sum(1 for line in text.splitlines() if line.startswith("\t") and not line.startswith("\t.") and line.strip())
            scale = 1e6 / count
            total, parse, printing = (statistics.median(r[k] for r in runs) * scale for k in range(3))
            passes = " ".join(f"{name}={statistics.median(r[3][name] for r in runs) * scale:.2f}" for name in runs[0][3])
            print(f"{probe_name:14s} {count:7d} {total:7.2f} {parse:7.2f} {printing:7.2f}  {passes}")
    print(f"(µs per instruction, medians) machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


def _engine_of(root: Path):
    """(instrument_module, parse_module, print_module, load_probes, cycle_collection_paused) of the checkout at `root`."""
    saved = {name: module for name, module in sys.modules.items() if name == "neutrino" or name.startswith("neutrino.")}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        engine = importlib.import_module("neutrino.engine")
        ptx = importlib.import_module("neutrino.isa.ptx")
        probefile = importlib.import_module("neutrino.probefile")
        return engine.instrument_module, ptx.parse_module, ptx.print_module, probefile.load_probes, engine.cycle_collection_paused
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == "neutrino" or n.startswith("neutrino.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def against(other: Path, probe_name: str, rounds: int) -> None:
    versions = {"this": (instrument_module, parse_module, print_module, load_probes, cycle_collection_paused), "other": _engine_of(other)}
    probes = {name: v[3](probe_name) for name, v in versions.items()}
    texts = [path.read_text() for path in CORPUS]
    samples: dict[str, list[list[float]]] = {name: [[] for _ in texts] for name in versions}
    for round_ in range(rounds):
        for i, text in enumerate(texts):
            for name in ("this", "other") if round_ % 2 == 0 else ("other", "this"):
                instrument, parse, print_, _, paused = versions[name]
                with paused():
                    start = time.perf_counter()
                    module = parse(text)
                    instrument(module, probes[name])
                    print_(module)
                    samples[name][i].append(time.perf_counter() - start)
    medians = {name: [statistics.median(runs) * 1e3 for runs in per_file] for name, per_file in samples.items()}
    for name in versions:
        print(f"{name:6s} median per file {statistics.median(medians[name]):.3f} ms, sum {sum(medians[name]):.2f} ms")
    ratios = [a / b for a, b in zip(medians["this"], medians["other"])]
    print(f"this/other per file: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    print(f"probe={probe_name} files={len(texts)} rounds={rounds} other={other}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", "--probe", action="append", help="built-in tool or probe file (repeatable; default block_sched)")
    parser.add_argument("-n", "--rounds", type=int, default=20)
    parser.add_argument("--scaling", action="store_true", help="per-instruction cost on generated kernels of growing size")
    parser.add_argument("--sizes", default="1000,10000,100000", help="instruction counts for --scaling")
    parser.add_argument("--against", type=Path, help="another checkout to time in the same run, interleaved")
    args = parser.parse_args()
    if args.against:
        against(args.against, (args.probe or ["block_sched"])[0], args.rounds)
        return
    if args.scaling:
        scaling(args.probe or ["block_sched", "gmem_bytes"], [int(s) for s in args.sizes.split(",")], args.rounds)
        return
    args.probe = (args.probe or ["block_sched"])[0]
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
