"""CUPTI's own cost, A/B inside one process (no Neutrino): activity kinds and callback ids by phase.

Workloads (--workload):
  eager   the eager loop of timeline_workload.py (50 tiny ATen kernels per step), launch-bound: per
          step the CUDA-event span of its launches (= the host's launch rate)
  graph8  a CUDA graph of 8 tiny Triton kernels (overhead_workloads.py's graph8: 256 blocks x 4 warps),
          timed on the GPU alone: the GPU is kept busy (torch.cuda._sleep) while the host enqueues each
          replay, so the span is what the replay costs the GPU

Phases cycle inside the process (--phase-steps steps each, --cycles cycles after one of warm-up), so
the machine's drift and the spread between processes are out of the comparison. A phase is
benchmarks/cupti_floor.c's cupti_floor_set(kinds, ids, callbacks): activity kinds (kernel records,
graph-level records, copies), callback ids (none; all launch and copy ids of both domains; the driver
domain's; the copy and graph-launch ids only) and what the callback does (nothing; the TSC stored by
correlation id at the outermost entry, as the shim's `host` level does).

Printed per phase: the median span (ms for eager, us for graph8), its ratio to the first phase (no
records), the difference per kernel (us) = (median - median of the first phase) / kernels per step,
and the activity records CUPTI handed over per step during the phase (by kind: kernel, graph, copy).
CUPTI_FLOOR_ATTRS (see cupti_floor.c) sets activity attributes at start.

usage: python benchmarks/cupti_floor_ab.py [--workload eager|graph8] [--cycles N] [--phase-steps N]
       [--phases a,b,...]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
K, G, C = 1, 2, 4  # kind bits of cupti_floor_set
ALL, DRIVER, COPIES_ONLY = 1, 2, 3  # callback ids
PHASES = {  # key: (label, kinds, ids, callback mode)
    "none": ("no CUPTI records", 0, 0, 0),
    "kernel": ("kernel records", K, 0, 0),
    "kernel_copies": ("kernel + copy records", K | C, 0, 0),
    "graph": ("graph-level records (GRAPH_TRACE)", G, 0, 0),
    "kernel_graph": ("kernel + graph-level records", K | G, 0, 0),
    "cb_copy_ids": ("kernel records + callbacks on copy/graph ids", K, COPIES_ONLY, 3),
    "cb_driver": ("kernel records + callbacks, driver ids", K, DRIVER, 3),
    "cb_all": ("kernel records + callbacks, all ids (TSC)", K, ALL, 3),
    "cb_all_empty": ("kernel records + callbacks, all ids, empty", K, ALL, 1),
}
DEFAULT_PHASES = {"eager": "none,kernel,kernel_copies,cb_copy_ids,cb_driver,cb_all",
                  "graph8": "none,kernel,graph,kernel_graph,cb_all"}
COUNTED = ((10, "kernel"), (51, "graph"), (1, "memcpy"), (2, "memset"))


def build(scratch: Path) -> ctypes.CDLL:
    lib_path = scratch / "cupti_floor.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", f"-I{HERE.parent / 'shim'}", "-o", str(lib_path),
                    str(HERE / "cupti_floor.c"), "-ldl"], check=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.cupti_floor_clock_ns.restype = ctypes.c_double
    return lib


def eager_workload(torch):
    from timeline_workload import eager_step

    x = torch.randn(256, 256, device="cuda")
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def step() -> float:
        torch.cuda.synchronize()
        begin.record()
        eager_step(x)
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end)  # ms
    return step, 50.0


def graph8_workload(torch):
    from overhead_workloads import capture_graph8

    graph, outs, inputs = capture_graph8()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def step() -> float:
        torch.cuda._sleep(200000)
        begin.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end) * 1e3  # us
    step.tensors = (outs, inputs)  # the graph's memory: alive as long as it is replayed
    return step, 8.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="eager", choices=("eager", "graph8"))
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--phase-steps", type=int, default=20)
    ap.add_argument("--phases", default=None, help=f"comma list of {','.join(PHASES)}")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    phases = (args.phases or DEFAULT_PHASES[args.workload]).split(",")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from neutrino.runtime.context_tables.cupti import find_cupti

    lib = build(Path(tempfile.mkdtemp()))
    clocks = [lib.cupti_floor_clock_ns(w, 1_000_000) for w in (0, 1)]
    import torch  # loads its libcupti (the one in use); CUDA starts later, in the workload

    rc = lib.cupti_floor_init(str(find_cupti()[0]).encode())  # before CUDA starts: attributes apply
    if rc:
        raise SystemExit(f"cupti_floor_init failed at step {rc}")

    # every kind of the phases on while the workload is built (a graph is instantiated with them on)
    kinds_at_build = 0
    for p in phases:
        kinds_at_build |= PHASES[p][1]
    lib.cupti_floor_set(kinds_at_build, 0, 0)
    step, kernels = (eager_workload if args.workload == "eager" else graph8_workload)(torch)
    counts = (ctypes.c_uint64 * 64)()
    spans: dict[str, list[float]] = {p: [] for p in phases}
    records: dict[str, dict[str, int]] = {p: {name: 0 for _, name in COUNTED} for p in phases}
    for cycle in range(args.cycles + 1):  # the first cycle warms up, not counted
        for p in phases:
            _, kinds, ids, mode = PHASES[p]
            lib.cupti_floor_set(kinds, ids, mode)
            lib.cupti_floor_counts(counts)
            before = list(counts)
            for _ in range(args.phase_steps):
                span = step()
                if cycle:
                    spans[p].append(span)
            torch.cuda.synchronize()
            lib.cupti_floor_counts(counts)
            for kind, name in COUNTED:
                records[p][name] += (counts[kind] - before[kind]) if cycle else 0
            if cycle:  # as it goes: a crash in a later phase leaves these
                print(f"cycle {cycle} {p}: median {statistics.median(spans[p][-args.phase_steps:]):.4f}, records "
                      f"{ {name: counts[kind] - before[kind] for kind, name in COUNTED} }", flush=True)
    lib.cupti_floor_set(0, 0, 0)
    unit = "ms" if args.workload == "eager" else "us"
    base = statistics.median(spans[phases[0]])
    print(f"# {args.workload} on {torch.cuda.get_device_name()}; CUPTI_FLOOR_ATTRS="
          f"{__import__('os').environ.get('CUPTI_FLOOR_ATTRS', '')}; clock_gettime {clocks[0]:.1f} ns, "
          f"rdtsc {clocks[1]:.1f} ns; {args.cycles} cycles x {args.phase_steps} steps per phase")
    print(f"{'phase':46s} {'median ' + unit:>10s} {'ratio':>7s} {'us/kernel':>10s}  records per step")
    out = {}
    for p in phases:
        med = statistics.median(spans[p])
        per_kernel = (med - base) * (1e3 if unit == "ms" else 1.0) / kernels
        n = len(spans[p])
        per_step = ", ".join(f"{name} {records[p][name] / n:.2f}" for _, name in COUNTED if records[p][name])
        print(f"{PHASES[p][0]:46s} {med:10.4f} {med / base:7.3f} {per_kernel:10.3f}  {per_step or '-'}")
        out[p] = {"median": med, "ratio": med / base, "us_per_kernel": per_kernel,
                  "records_per_step": {k: v / n for k, v in records[p].items()}}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
