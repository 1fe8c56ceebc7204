"""Full dmat on the attention loop: per-launch cost and whether every record was kept (issue 24, item 3).

    python benchmarks/dmat_ring.py [--iters N] [--tools plain,dmat] [--gpu-only]

Runs benchmarks/overhead_workloads.py's attention workload plain and under each
configuration of benchmarks/overhead.py (one process each, as overhead.py does),
then reads the dmat trace: per probed launch of the attention kernel, the records
its ring kept and the records it dropped (reservations past the ring's slots),
and the launches the budgets dropped (run unprobed, counted in the exit event).
`--gpu-only` sets OVERHEAD_GPU_ONLY=1 (the GPU kept busy while the host enqueues:
the kernel's own time, not the host path's).

Prints one line per configuration: `name: X µs (R x plain), host H µs/iter, outputs same|DIFFER`,
then for traced ones `launches L probed (P attention), records per launch min/median/max,
dropped records D, dropped launches K`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import overhead  # noqa: E402 - benchmarks/overhead.py, next to this file


def trace_records(tracedir: Path) -> str:
    """Records kept and dropped per probed launch of the trace under `tracedir`."""
    import neutrino.trace as nt

    runs = [p for p in tracedir.iterdir() if (p / "event.log").exists()] if tracedir.exists() else []
    if not runs:
        return "no trace"
    trace = max((nt.load(p) for p in runs), key=lambda t: len(t.launches))
    kept, dropped = [], 0
    for la in trace.launches:
        md = la.maps.get("dmat")
        if md is None:
            continue
        valid, lost = md.record_stats()
        kept.append(valid)
        dropped += lost
    exits = [e for e in trace.events if e.get("event") == "exit"]
    dropped_launches = exits[-1].get("dropped", "?") if exits else "?"
    if not kept:
        return f"{len(trace.launches)} launches, none with a dmat map"
    return (f"{len(trace.launches)} probed launches, records per launch min {min(kept)} median "
            f"{int(statistics.median(kept))} max {max(kept)}, dropped records {dropped}, "
            f"dropped launches {dropped_launches}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--tools", default="plain,dmat")
    ap.add_argument("--gpu-only", action="store_true")
    args = ap.parse_args()
    if args.gpu_only:
        os.environ["OVERHEAD_GPU_ONLY"] = "1"
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        results = {}
        for name in args.tools.split(","):
            results[name] = overhead.run_config(name, overhead.CONFIGS[name], args.iters, tmp, "attention")
            res, plain = results[name], results.get("plain", {})
            if "error" in res:
                print(f"{name}: error {res['error']}", flush=True)
                continue
            att, base = res["attention"], plain.get("attention")
            ratio = f" ({att['us'] / base['us']:.2f}x plain)" if base and name != "plain" else ""
            same = "" if base is None or name == "plain" else (" outputs same" if att["hash"] == base["hash"]
                                                               else " outputs DIFFER")
            print(f"{name}: {att['us']:.1f} µs{ratio}, host {att['host_us']:.1f} µs/iter,{same}", flush=True)
            if overhead.CONFIGS[name] is not None:
                print(f"  {name}: {trace_records(Path(res['_trace']))}; {res.get('_summary', '')}", flush=True)


if __name__ == "__main__":
    main()
