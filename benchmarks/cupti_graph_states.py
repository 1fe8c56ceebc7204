"""What a CUDA graph replay costs the GPU by the CUPTI state it was instantiated in and is launched in (issue 24).

One process, no Neutrino (benchmarks/cupti_floor.c loaded by ctypes), graph8 (8 tiny Triton kernels) timed on the
GPU alone (the GPU kept busy while the host enqueues each replay). Three copies of the graph, instantiated:
  P  before any activity kind is on,
  A  with kernel records (CONCURRENT_KERNEL) on,
  B  with kernel records and graph-level records (GRAPH_TRACE) on.
Phases cycle (--cycles, --phase-steps): `off` (every kind off: P, A, B), `kernel` (kernel records on: A, B),
`quiet` (kernel records on, switched off around each replay of A, on again after: A; the host cost of the two
switches is printed), `graph` (kernel and graph-level records on: B). A last phase launches P with kernel records
on, once, after everything is printed (whether CUPTI survives a graph instantiated before its kinds).

--host: instead, what a quiet replay's launch costs the host with the timeline's other parts on (A built with
kernel records and copies on): `off`, `copies` (MEMCPY and MEMSET on), `callbacks` (CUPTI callbacks on the copy
and graph-launch ids, the shim's `host` level), `quiet` (both: the timeline's state during a quiet replay),
`kernel` (kernel records on too).

usage: python benchmarks/cupti_graph_states.py [--cycles N] [--phase-steps N] [--host]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
K, G, C = 1, 2, 4  # cupti_floor_set's kind bits: kernel records, GRAPH_TRACE, copies (MEMCPY and MEMSET)
COPY_AND_GRAPH_IDS, TSC = 3, 3  # callbacks on the copy and graph-launch ids, storing the TSC (the shim's `host`)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--phase-steps", type=int, default=30)
    ap.add_argument("--host", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from cupti_floor_ab import build
    from neutrino.runtime.context_tables.cupti import find_cupti

    lib = build(Path(tempfile.mkdtemp()))
    lib.cupti_floor_kernel_records.restype = __import__("ctypes").c_double
    import torch
    from overhead_workloads import capture_graph8

    rc = lib.cupti_floor_init(str(find_cupti()[0]).encode())
    if rc:
        raise SystemExit(f"cupti_floor_init failed at step {rc}")
    graphs = {}
    for name, kinds in ((("A", K | C),) if args.host else (("P", 0), ("A", K), ("B", K | G))):
        lib.cupti_floor_set(kinds, 0, 0)
        graphs[name] = capture_graph8()
    lib.cupti_floor_set(0, 0, 0)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    switch_ns: list[float] = []
    host_ns: dict[str, list[float]] = {}

    def replay(key: str, name: str, quiet: bool = False) -> float:
        torch.cuda._sleep(200000)
        begin.record()
        t0 = time.perf_counter_ns()
        if quiet:
            switch_ns.append(lib.cupti_floor_kernel_records(0))
        graphs[name][0].replay()
        if quiet:
            switch_ns.append(lib.cupti_floor_kernel_records(1))
        host_ns.setdefault(key, []).append(time.perf_counter_ns() - t0)
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end) * 1e3

    phases = {"off": (0, ("P", "A", "B")), "kernel": (K, ("A", "B")), "quiet": (K, ("A",)), "graph": (K | G, ("B",))}
    callbacks = {}
    if args.host:
        phases = {"off": (0, ("A",)), "copies": (C, ("A",)), "callbacks": (0, ("A",)), "quiet": (C, ("A",)),
                  "kernel": (K | C, ("A",))}
        callbacks = {"callbacks": COPY_AND_GRAPH_IDS, "quiet": COPY_AND_GRAPH_IDS, "kernel": COPY_AND_GRAPH_IDS}
    spans: dict[str, list[float]] = {}
    for cycle in range(args.cycles + 1):
        for phase, (kinds, names) in phases.items():
            ids = callbacks.get(phase, 0)
            lib.cupti_floor_set(kinds, ids, TSC if ids else 0)
            for _ in range(args.phase_steps):
                for name in names:
                    key = f"{phase}:{name}"
                    span = replay(key, name, quiet=phase == "quiet" and not args.host)
                    if cycle:
                        spans.setdefault(key, []).append(span)
        lib.cupti_floor_set(0, 0, 0)
        torch.cuda.synchronize()
    base = statistics.median(spans["off:A" if args.host else "off:P"])
    print(f"# graph8 on {torch.cuda.get_device_name()}: {args.cycles} cycles x {args.phase_steps} steps per phase")
    print(f"{'phase:graph':12s} {'median us':>10s} {'x off':>8s} {'host us/launch':>15s}")
    for key, values in spans.items():
        med = statistics.median(values)
        print(f"{key:12s} {med:10.3f} {med / base:8.3f} {statistics.median(host_ns[key]) / 1e3:15.2f}")
    if args.host:
        return
    print(f"switch CONCURRENT_KERNEL off/on: median {statistics.median(switch_ns) / 1e3:.2f} us a call, "
          f"p90 {sorted(switch_ns)[int(len(switch_ns) * 0.9)] / 1e3:.2f} us", flush=True)
    lib.cupti_floor_set(K, 0, 0)
    print("P launched with kernel records on:", end=" ", flush=True)
    for _ in range(5):
        replay("last:P", "P")
    lib.cupti_floor_counts((__import__("ctypes").c_uint64 * 64)())
    print("survived", flush=True)


if __name__ == "__main__":
    main()
