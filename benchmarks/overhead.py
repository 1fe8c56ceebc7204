"""Overhead as users feel it (run on the GPU machine): prints a Markdown table.

    python benchmarks/overhead.py [--iters N] [--tools plain,block_sched,...] [--out FILE.md]

Runs benchmarks/overhead_workloads.py plain and under `neutrino -p TOOL --` for
each configuration, one process per configuration, all in one run (so the ratios
compare like with like):

* stream:    Triton streaming kernel, 16M fp32 elements: per-launch CUDA-event median
* attention: Triton attention, 8 x 2048 x 64 fp16: per-launch CUDA-event median
* mlp:       torch.compile 4-block MLP, forward + backward + SGD: wall time per step
* launch:    host time per launch of a tiny kernel launched back to back
* graph:     replay of a captured CUDA graph of 4 Triton launches (CUDA-event median)
* graph_eager: the same 4 launches made eagerly, timed on the GPU alone (the probe code's own cost)
* graph_16m: the graph workload with 16M elements per kernel (about 70 µs each)
* graph8:    a graph of 8 tiny Triton kernels (256 blocks x 4 warps, ~2 µs each; issue 24)
* eager1:    one of graph8's kernels launched eagerly, CUDA events around each launch (per-launch median)
* eager8:    graph8's 8 kernels launched eagerly, one span timed on the GPU alone (issue 24's eager tiny kernels;
             run it with OVERHEAD_GPU_ONLY=1500000: the sleep must outlast 8 probed launches' host path)
* graph_decode: a decode step (8 MLP blocks, batch 8, fp16) under torch.compile(mode="reduce-overhead"):
               one CUDA graph of cuBLAS GEMMs and Triton kernels replayed per call

Each cell is `time (ratio to plain)`; `same` says whether every output hash
equalled the plain run's. With `--rounds R` every configuration runs R times,
the configurations interleaved round by round (the machine's speed drifts), and
each cell is the median over the rounds. A configuration's trace summary (probed launches,
drops) is printed below the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "overhead_workloads.py"

CONFIGS = {
    "plain": None,
    "block_sched": ["-p", "block_sched"],
    "gmem_bytes": ["-p", "gmem_bytes"],
    "tensorop": ["-p", "tensorop"],
    "dmat every:50": ["-p", "dmat", "--launches", "every:50"],
    "block_sched every:50": ["-p", "block_sched", "--launches", "every:50"],
    # every other launch probed: probed and unprobed launches compared in one loop of one process
    "block_sched every:2": ["-p", "block_sched", "--launches", "every:2"],
    "gmem_bytes every:2": ["-p", "gmem_bytes", "--launches", "every:2"],
    "block_sched 0:1": ["-p", "block_sched", "--launches", "0:1"],
    "dmat": ["-p", "dmat"],
    "block_sched graphs": ["-p", "block_sched", "--graphs"],  # the graph workload's replays probed
    "gmem_bytes graphs": ["-p", "gmem_bytes", "--graphs"],
    # sampling inside graphs: a replay left out runs its probe gated off (issue 24)
    "block_sched graphs every:50": ["-p", "block_sched", "--graphs", "--launches", "every:50"],
    "gmem_bytes graphs every:50": ["-p", "gmem_bytes", "--graphs", "--launches", "every:50"],
    # the same without the CUPTI timeline: what the timeline adds to a host-bound replay loop
    "block_sched graphs no-timeline": ["-p", "block_sched", "--graphs", "--no-timeline"],
    "block_sched graphs every:50 no-timeline": ["-p", "block_sched", "--graphs", "--launches", "every:50",
                                                "--no-timeline"],
    "gmem_bytes graphs no-timeline": ["-p", "gmem_bytes", "--graphs", "--no-timeline"],
    # eager loops without the CUPTI timeline: the timeline's share of a probed loop's host time
    "block_sched no-timeline": ["-p", "block_sched", "--no-timeline"],
    "gmem_bytes no-timeline": ["-p", "gmem_bytes", "--no-timeline"],
    # nothing probed, the timeline on: what CUPTI's records (one per kernel, graph nodes included) cost alone
    "timeline only": ["-p", "block_sched", "-k", "neutrino_matches_no_kernel"],
    # cap = "count" sized before every launch (the counting launch and a sync each), as before issue 24;
    # with the device ring (count maps of code built since) the option changes nothing: the same as "dmat"
    "dmat recount-every 1": ["-p", "dmat", "--recount-every", "1"],
    # the decode step bisected: only some of its Triton kernels probed (issue 24)
    "block_sched graphs only-gelu": ["-p", "block_sched", "--graphs", "-k", "gelu"],
    "block_sched graphs only-norm": ["-p", "block_sched", "--graphs", "-k", "layer_norm"],
}
# no launch timed by the runtime's events (--time-every beyond the loop: only each kernel's first launch), with and
# without the timeline: what the timing events of every 8th launch cost a loop of tiny kernels (issue 24)
for _tool in ("block_sched", "gmem_bytes"):
    CONFIGS[f"{_tool} untimed"] = ["-p", _tool, "--time-every", str(1 << 30)]
    CONFIGS[f"{_tool} no-timeline untimed"] = ["-p", _tool, "--no-timeline", "--time-every", str(1 << 30)]
# configurations that differ by environment: the device gate alone, as before the host chose replays
CONFIG_ENV = {"block_sched graphs every:50 device-gate": {"NEUTRINO_GRAPH_PICK": "0"},
              "gmem_bytes graphs every:50 device-gate": {"NEUTRINO_GRAPH_PICK": "0"},
              # the timeline with graph-level records (GRAPH_TRACE: a replay's nodes not traced one by one)
              "block_sched graphs every:50 graph-records": {"NEUTRINO_TIMELINE_LEVEL": "copies,host,hooks,graphs"},
              "block_sched graphs graph-records": {"NEUTRINO_TIMELINE_LEVEL": "copies,host,hooks,graphs"},
              # no twin: the replays left out switch the probed graph's nodes (as before the twin)
              "block_sched graphs every:50 switching": {"NEUTRINO_GRAPH_TWIN": "0"},
              "block_sched graphs every:50 no-timeline switching": {"NEUTRINO_GRAPH_TWIN": "0"},
              # the timeline's levels (spec/runtime.md, "Timeline"): copies without the host times and launch
              # hooks; kernel records alone (a level word matching none)
              "timeline only level-copies": {"NEUTRINO_TIMELINE_LEVEL": "copies"},
              "timeline only level-kernels": {"NEUTRINO_TIMELINE_LEVEL": "kernels"},
              # the chain (spec/runtime.md, "The chain"): no append node, every replay's maps straight into a ring
              # slot, drained by shim/graphs.c's poller (issue 24)
              "block_sched graphs chain": {"NEUTRINO_GRAPH_CHAIN": "1"},
              "block_sched graphs no-timeline chain": {"NEUTRINO_GRAPH_CHAIN": "1"},
              "gmem_bytes graphs no-timeline chain": {"NEUTRINO_GRAPH_CHAIN": "1"},
              # the chain under sampling chosen by the host: the twin for the replays left out (issue 24)
              "block_sched graphs every:50 no-timeline chain": {"NEUTRINO_GRAPH_CHAIN": "1"},
              # the graph defaults before 2026-11-28: the append node, every replay's nodes on the timeline
              "block_sched graphs old-defaults": {"NEUTRINO_GRAPH_CHAIN": "0", "NEUTRINO_TIMELINE_GRAPH_NODES": "all"},
              "gmem_bytes graphs old-defaults": {"NEUTRINO_GRAPH_CHAIN": "0", "NEUTRINO_TIMELINE_GRAPH_NODES": "all"},
              # NEUTRINO_MEASURE_CAPTURE (capture.py): the capture left unprobed; the program's kernels captured
              # with the append path's machinery around them (the chain off)
              "block_sched graphs unprobed-capture": {"NEUTRINO_MEASURE_CAPTURE": "unprobed"},
              "block_sched graphs original-kernels": {"NEUTRINO_MEASURE_CAPTURE": "original",
                                                      "NEUTRINO_GRAPH_CHAIN": "0"}}
# NEUTRINO_MEASURE (shim/writer.c; benchmarks only, results not kept): the runtime's own GPU operations per
# probed eager launch turned off one by one (docs/overhead.md, "The runtime's own GPU time per eager launch")
for _tool in ("block_sched", "gmem_bytes"):
    for _base in (_tool, f"{_tool} no-timeline", f"{_tool} untimed", f"{_tool} no-timeline untimed"):
        CONFIG_ENV.update({f"{_base} no-end-event": {"NEUTRINO_MEASURE": "no-end-event"},f"{_base} no-copy": {"NEUTRINO_MEASURE": "no-copy"},
                           f"{_base} no-zero": {"NEUTRINO_MEASURE": "no-zero"},
                           f"{_base} no-writer": {"NEUTRINO_MEASURE": "no-copy,no-zero"},
                           f"{_base} zero-by-copy": {"NEUTRINO_MEASURE": "zero-by-copy"},
                           f"{_base} zero-by-memset": {"NEUTRINO_MEASURE": "zero-by-memset"},
                           f"{_base} timed-end": {"NEUTRINO_MEASURE": "timed-end"},
                           f"{_base} nothing-ours": {"NEUTRINO_MEASURE": "no-copy,no-zero,no-end-event"}})
ENV_SUFFIXES = (" no-end-event", " device-gate", " graph-records", " switching", " level-copies", " level-kernels", " no-copy",
                " no-zero", " no-writer", " zero-by-copy", " zero-by-memset", " timed-end", " nothing-ours", " chain", " old-defaults",
                " unprobed-capture", " original-kernels")
CONFIGS.update({name: CONFIGS[next((name.removesuffix(x) for x in ENV_SUFFIXES if name.endswith(x)), name)]
                for name in CONFIG_ENV})
WORKLOADS = ("stream", "attention", "mlp", "launch", "graph", "graph_eager", "graph_16m", "graph_decode", "graph8", "eager8", "eager1")


def run_config(name: str, args: list[str] | None, iters: int, tmp: Path, only: str,
               cpus: set[int] | None = None, tree: Path = REPO) -> dict:
    """`tree`: the checkout whose neutrino (and shim) runs the configuration (--tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    env.setdefault("NEUTRINO_CACHE_DIR", str(tmp / "ncache"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))
    env.setdefault("TRITON_CACHE_DIR", str(tmp / "triton"))
    env.update(CONFIG_ENV.get(name, {}))
    cmd = [sys.executable, str(CHILD), "--iters", str(iters), "--only", only]
    tracedir = tmp / re.sub(r"\W", "_", f"{tree.name}_{name}")
    if args is not None:
        cmd = [sys.executable, "-m", "neutrino.runtime.start.launcher", *args, "--tracedir", str(tracedir), "--", *cmd]
    # --cpus: every configuration on the same cores (a host-bound loop's time depends on where it runs)
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    # run from the tree: `python -m` puts the working directory first on sys.path, before PYTHONPATH
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, preexec_fn=pin, cwd=tree)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("OVERHEAD_RESULT ")), None)
    if r.returncode != 0 or line is None:
        return {"error": f"rc={r.returncode}: {(r.stderr or r.stdout)[-1500:]}"}
    out = json.loads(line[len("OVERHEAD_RESULT "):])
    out["_summary"] = "; ".join(ln.strip() for ln in r.stderr.splitlines() if ln.startswith("neutrino:"))[:600]
    out["_trace"] = str(tracedir)
    return out


def median_run(runs: list[dict]) -> dict:
    """One configuration over several rounds: the median time per workload; outputs must agree."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = dict(ok[0])
    for w, first in ok[0].items():
        if w.startswith("_") or not isinstance(first, dict):
            continue
        vals = [r[w] for r in ok if w in r]
        out[w] = dict(first, us=statistics.median(v["us"] for v in vals),
                      **({"host_us": statistics.median(v["host_us"] for v in vals)} if "host_us" in first else {}),
                      **{k: statistics.median(v[k] for v in vals) for k in ("us_even", "us_odd") if k in first},
                      hash=first["hash"] if all(v["hash"] == first["hash"] for v in vals) else "differs")
    return out


def table(results: dict[str, dict], workloads: list[str]) -> str:
    plain = results.get("plain", {})
    head = "| configuration | " + " | ".join(workloads) + " | same outputs |"
    rows = [head, "|" + " --- |" * (len(workloads) + 2)]
    for name, res in results.items():
        if "error" in res:
            rows.append(f"| {name} | " + " | ".join("error" for _ in workloads) + " | — |")
            continue
        cells = []
        same = True
        for w in workloads:
            v, base = res.get(w), plain.get(w)
            if v is None:
                cells.append("—")
                continue
            ratio = f" ({v['us'] / base['us']:.2f}x)" if base and name != "plain" else ""
            cells.append(f"{v['us']:,.1f} µs{ratio}")
            same &= base is None or v["hash"] == base["hash"]
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if same else 'NO'} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--tools", default=",".join(CONFIGS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-warmup", action="store_true", help="skip the run that fills the compiler caches")
    ap.add_argument("--rounds", type=int, default=1, help="run the configurations this many times, interleaved")
    ap.add_argument("--cpus", default=None, help="pin every configuration to these cores, e.g. 2-5")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                    help="another checkout: a tool written LABEL:CONFIG runs CONFIG with PATH's neutrino and shim "
                         "(e.g. --tree main=.dev-lead/trees/main --tools plain,main:block_sched,block_sched)")
    args = ap.parse_args()
    trees = {label: Path(path).resolve() for label, _, path in (t.partition("=") for t in args.tree)}
    workloads = args.workloads.split(",")
    cpus = None
    if args.cpus:
        lo, _, hi = args.cpus.partition("-")
        cpus = set(range(int(lo), int(hi or lo) + 1))
    results = {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        # Warm the compiler caches once, so no configuration pays torch.compile's cold start (the
        # timings are taken after warm-up inside each process either way; this only saves wall time).
        if not args.no_warmup:
            run_config("warm-up", None, 20, tmp, args.workloads)
        runs: dict[str, list[dict]] = {}
        for _ in range(args.rounds):
            for name in args.tools.split(","):
                # `LABEL:CONFIG` names another tree; a configuration's own colons (`every:50`) are not labels
                label, _, config = ("", "", name) if name in CONFIGS else name.partition(":")
                if label and label not in trees:
                    raise SystemExit(f"overhead.py: {name}: no --tree {label}=PATH")
                res = run_config(config, CONFIGS[config], args.iters, tmp, args.workloads, cpus,
                                 trees.get(label, REPO))
                runs.setdefault(name, []).append(res)
                print(f"{name}: {json.dumps({k: v for k, v in res.items() if not k.startswith('_')})}",
                      file=sys.stderr, flush=True)
        results = {name: median_run(rs) for name, rs in runs.items()}
    text = table(results, workloads)
    text += "\n\nHost time per loop iteration (µs; above the kernel's time the loop is host-bound):\n\n"
    text += "\n".join(f"- {name}: " + ", ".join(f"{w} {res[w]['host_us']:.1f}" for w in workloads
                                                if isinstance(res.get(w), dict) and "host_us" in res[w])
                       for name, res in results.items() if "error" not in res)
    same_loop = [f"- {name}, {w}: probed launches {res[w]['us_even']:.1f} µs, unprobed {res[w]['us_odd']:.1f} µs "
                 f"({res[w]['us_even'] / res[w]['us_odd']:.2f}x)"
                 for name, res in results.items() if name.endswith("every:2") and "error" not in res
                 for w in workloads if isinstance(res.get(w), dict) and "us_even" in res[w]]
    if same_loop:
        text += ("\n\nSame loop, same process (`--launches every:2`: even iterations probed, odd ones not; "
                 "medians):\n\n" + "\n".join(same_loop))
    notes = [f"- {n}: {r.get('_summary') or r.get('error', '')}" for n, r in results.items() if n != "plain"]
    report = text + "\n\n" + "\n".join(notes) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
