"""Issue 22's completeness target: the kernels of our timeline against torch.profiler's, one for one.

    python benchmarks/timeline_completeness.py [--steps 20] [--out FILE.md]

The torch.compile MLP training step of benchmarks/timeline_workload.py (Triton kernels, cuBLAS GEMMs, ATen ops)
runs 10 warm-up steps, then STEPS measured steps between two synchronizes, in three processes:

  profiler   no Neutrino; torch.profiler (CUDA activities) records the measured steps only
  timeline   `neutrino -k <nothing matches>`: our timeline, nothing probed
  probed     `neutrino -p block_sched`: our timeline, the Triton kernels probed

Our kernels are those of timeline.bin (the runtime's own clock kernels left out) whose GPU interval lies
inside the measured window (CLOCK_REALTIME, read by the program after each synchronize: CUPTI's clock). The
profiler's are the `kernel` events of its Chrome trace. Names are compared demangled (c++filt, as Kineto
demangles); per name, the launch count. Total kernel time: the sum of (end - start) over kernels, µs; the
profiled and the probed runs are other processes, so their times carry run-to-run spread, and the probed run's
Triton kernels run their probes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARMUP = 10


def child(mode: str, steps: int, out: Path) -> None:
    """One process's measured window; writes {window, kernels (profiler mode only)} to `out`."""
    import time

    import torch

    sys.path.insert(0, str(HERE))
    from timeline_workload import make_compile_step

    step, x = make_compile_step()
    for _ in range(WARMUP):
        step(x)
    torch.cuda.synchronize()
    if mode == "profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step(x)
            torch.cuda.synchronize()
        trace = out.with_suffix(".trace.json")
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
        kernels = [(e["name"], float(e["dur"])) for e in events if e.get("cat") == "kernel"]
        out.write_text(json.dumps({"kernels": kernels}))
        return
    t0 = time.time_ns()
    for _ in range(steps):
        step(x)
    torch.cuda.synchronize()
    out.write_text(json.dumps({"window": [t0, time.time_ns()]}))


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    res = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True)
    out = res.stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def ours(run_dir: Path, window: list[int]) -> list[tuple[str, float]]:
    from neutrino import timeline as run_timeline

    tl = run_timeline.read_timeline(run_dir)
    tl = tl[(tl["kind"] == run_timeline.KERNEL) & (tl["start_ns"] >= window[0]) & (tl["end_ns"] <= window[1])]
    names = [str(n) for n in tl["name"]]
    plain = demangle(sorted(set(names)))
    return [(plain[n], (int(e) - int(s)) / 1e3) for n, s, e in zip(names, tl["start_ns"], tl["end_ns"])]


def run(mode: str, steps: int, tmp: Path) -> list[tuple[str, float]]:
    out = tmp / f"{mode}.json"
    cmd = [sys.executable, __file__, "--child", mode, "--steps", str(steps), "--result", str(out)]
    tracedir = tmp / f"trace_{mode}"
    if mode == "timeline":
        cmd = [sys.executable, "-m", "neutrino", "-p", "block_sched", "-k", "nothing_matches_this_xyz", "-q",
               "--tracedir", str(tracedir), "--", *cmd]
    elif mode == "probed":
        cmd = [sys.executable, "-m", "neutrino", "-p", "block_sched", "-q", "--tracedir", str(tracedir), "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{mode}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    data = json.loads(out.read_text())
    if mode == "profiler":
        return [(n, d) for n, d in data["kernels"]]
    runs = sorted(p for p in tracedir.rglob("timeline.bin"))
    if len(runs) != 1:
        raise SystemExit(f"{mode}: {len(runs)} timeline.bin under {tracedir}")
    return ours(runs[0].parent, data["window"])


def compare(reference: list[tuple[str, float]], other: list[tuple[str, float]]) -> dict:
    ref, oth = Counter(n for n, _ in reference), Counter(n for n, _ in other)
    missing, extra = ref - oth, oth - ref
    t_ref, t_oth = sum(d for _, d in reference), sum(d for _, d in other)
    return {"kernels": len(other), "names": len(oth), "missing": sum(missing.values()), "extra": sum(extra.values()),
            "total_us": t_oth, "time_ratio": t_oth / t_ref if t_ref else float("nan"),
            "missing_names": missing.most_common(5), "extra_names": extra.most_common(5)}


def table(results: dict[str, list[tuple[str, float]]], steps: int) -> str:
    ref = results["profiler"]
    lines = [f"torch.compile MLP training step, {steps} measured steps (benchmarks/timeline_completeness.py)", "",
             "| process | kernels | distinct names | missing vs profiler | extra vs profiler | kernel time µs | × profiler |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    for mode, kernels in results.items():
        c = compare(ref, kernels)
        lines.append(f"| {mode} | {c['kernels']} | {c['names']} | {c['missing']} | {c['extra']} | "
                     f"{c['total_us']:.1f} | {c['time_ratio']:.4f} |")
        for label in ("missing_names", "extra_names"):
            if c[label]:
                notes.append(f"- {mode} {label.split('_')[0]}: " + "; ".join(f"{n[:90]} ×{k}" for n, k in c[label]))
    return "\n".join(lines + [""] + notes) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps, Path(args.result))
        return
    with tempfile.TemporaryDirectory() as td:
        results = {mode: run(mode, args.steps, Path(td)) for mode in ("profiler", "timeline", "probed")}
    text = table(results, args.steps)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
