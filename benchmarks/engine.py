"""Per-kernel time of parse + default pipeline + print over the corpus.

    python benchmarks/engine.py [-p PROBE] [-n ROUNDS]
    python benchmarks/engine.py --scaling [-p PROBE ...] [--sizes 1000,10000,100000]
    python benchmarks/engine.py --against OTHER_CHECKOUT [-p PROBE] [-n ROUNDS]

Each round instruments every corpus file once, files in turn, so that a slow
spell of a shared machine touches all files alike rather than a few. Prints,
per corpus file, the median over the rounds of each phase and of the whole,
then the median and max over files, in milliseconds, with the machine.

`--against` times this checkout and another one (an older commit, say from
`git archive REV | tar -x -C DIR`), each in a process of its own, alternating
file by file, so that a noisy machine slows both alike; it prints each one's
median per file and the per-file ratios. Both time the corpus of this
checkout.

`--scaling` instead instruments generated kernels of growing size (one kernel,
pruned to it as the runtime does with `-k`) and prints the cost per
instruction of the whole and of each phase and pass: a column that grows
with the size is a pass that is not linear.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from neutrino.engine import cycle_collection_paused, instrument_module
from neutrino.isa.ptx import parse_module, print_module
try:
    from neutrino.toolbox import load_probes
except ImportError:  # a checkout from before the tool registry (--against an older commit)
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


def worker(probe_name: str) -> None:
    """For `--against`: reads corpus indices on stdin, answers each with the seconds one instrumentation took."""
    probes = load_probes(probe_name)
    texts = [path.read_text() for path in CORPUS]
    for line in sys.stdin:
        print(sum(time_once(texts[int(line)], probes)), flush=True)


def against(other: Path, probe_name: str, rounds: int) -> None:
    """Each checkout in a process of its own (the engine imports some modules late), driven file by file in turn."""
    this = Path(__file__).resolve().parent.parent
    procs = {}
    for name, root in (("this", this), ("other", other.resolve())):
        env = dict(os.environ, PYTHONPATH=str(root))
        procs[name] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "-p", probe_name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root,
        )
    samples: dict[str, list[list[float]]] = {name: [[] for _ in CORPUS] for name in procs}
    for round_ in range(rounds):
        for i in range(len(CORPUS)):
            for name in ("this", "other") if (round_ + i) % 2 == 0 else ("other", "this"):
                proc = procs[name]
                proc.stdin.write(f"{i}\n")
                proc.stdin.flush()
                samples[name][i].append(float(proc.stdout.readline()))
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
    parser.add_argument("-p", "--probe", action="append", help="built-in tool or probe file (repeatable; default block_sched)")
    parser.add_argument("-n", "--rounds", type=int, default=20)
    parser.add_argument("--scaling", action="store_true", help="per-instruction cost on generated kernels of growing size")
    parser.add_argument("--sizes", default="1000,10000,100000", help="instruction counts for --scaling")
    parser.add_argument("--against", type=Path, help="another checkout to time in the same run, interleaved")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker((args.probe or ["block_sched"])[0])
        return
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
