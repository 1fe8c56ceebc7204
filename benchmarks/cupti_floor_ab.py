"""CUPTI's per-launch cost and the launch callbacks' cost, A/B inside one process (no Neutrino).

The eager loop of timeline_workload.py (50 tiny ATen kernels per step) runs in phases that cycle
(PHASE_STEPS steps each, CYCLES times): no CUPTI records; CONCURRENT_KERNEL records; plus launch
callbacks that do nothing; plus callbacks reading clock_gettime at every entry; plus callbacks
reading the TSC at the outermost entry (benchmarks/cupti_floor.c). Per step: the CUDA-event span
of its launches. Printed: per phase the median span (ms), its ratio to no records, and the
difference per kernel (us) = (median - median without records) / kernels per step; and the cost of
one host clock read (ns).

usage: python benchmarks/cupti_floor_ab.py [--cycles N] [--phase-steps N] [--kernels-per-step K]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHASES = (("no CUPTI records", 0, 0), ("kernel records", 1, 0), ("+ callbacks, empty", 1, 1),
          ("+ callbacks, clock_gettime each entry", 1, 2), ("+ callbacks, TSC outermost entry", 1, 3))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--phase-steps", type=int, default=20)
    ap.add_argument("--kernels-per-step", type=float, default=50.0, help="timeline_cost.py prints it")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import torch

    from neutrino.runtime.context_tables.cupti import find_cupti
    from timeline_workload import eager_step

    lib_path = Path(tempfile.mkdtemp()) / "cupti_floor.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", f"-I{HERE.parent / 'shim'}", "-o", str(lib_path),
                    str(HERE / "cupti_floor.c"), "-ldl"], check=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.cupti_floor_clock_ns.restype = ctypes.c_double
    clocks = [lib.cupti_floor_clock_ns(w, 1_000_000) for w in (0, 1)]
    x = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    rc = lib.cupti_floor_init(str(find_cupti()[0]).encode())
    if rc:
        raise SystemExit(f"cupti_floor_init failed at step {rc}")
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spans: dict[str, list[float]] = {name: [] for name, _, _ in PHASES}
    for cycle in range(args.cycles + 1):  # the first cycle warms up, not counted
        for name, kernels, callbacks in PHASES:
            lib.cupti_floor_phase(kernels, callbacks)
            for _ in range(args.phase_steps):
                torch.cuda.synchronize()
                begin.record()
                eager_step(x)
                end.record()
                torch.cuda.synchronize()
                if cycle:
                    spans[name].append(begin.elapsed_time(end))
    base = statistics.median(spans[PHASES[0][0]])
    print(f"# {torch.cuda.get_device_name()}; clock_gettime(CLOCK_REALTIME) {clocks[0]:.1f} ns, rdtsc {clocks[1]:.1f} ns")
    print(f"{'phase':40s} {'median ms':>10s} {'ratio':>7s} {'us/kernel':>10s}")
    for name, _, _ in PHASES:
        med = statistics.median(spans[name])
        print(f"{name:40s} {med:10.4f} {med / base:7.3f} {(med - base) * 1e3 / args.kernels_per_step:10.3f}")


if __name__ == "__main__":
    main()
