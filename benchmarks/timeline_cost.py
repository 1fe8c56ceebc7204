"""Cost of the CUPTI timeline (issue 22 target: <= 1.03x per step) and the floor under it.

Per workload (timeline_workload.py: `eager`, 40 tiny ATen ops per step; `compile`, a torch.compile
MLP training step), each configuration is one process, run in interleaved rounds (the order rotates
each round). Per step: the GPU-event span of its launches (ms) and its wall time. The table gives
the medians over all steps of all rounds, the ratios to plain and to probing without the timeline
(of the event span, then of the wall time), and the event span per kernel (us) = median span / kernels per step (the timeline's kernel records
of a traced run over its steps).

configurations (--configs, comma list of the keys):
  plain      the workload alone
  floor      CUPTI alone (benchmarks/cupti_floor.c): CONCURRENT_KERNEL, buffers freed unread
  floor_cb   CUPTI alone plus callbacks on the launch/copy calls that return at once
  notl       neutrino -p block_sched --no-timeline
  copies     neutrino -p block_sched, NEUTRINO_TIMELINE_LEVEL=copies (no host times)
  default    neutrino -p block_sched (timeline at its default level: copies,host)
  ab         neutrino -p block_sched, one process: the timeline paused and on in alternating phases
             (--phase-steps steps each, --cycles cycles after one of warm-up; timeline_workload.py,
             NEUTRINO_BENCH_AB): the timeline's cost without the spread between processes
  floor_ab   CUPTI alone, one process: no records / kernel records / kernel records + launch callbacks

For the two A/B configurations the table gives, per phase, the median and mean GPU-event span and
wall time per step (ms), and each phase's ratio to the first phase (timeline paused, or no CUPTI
records) of the median span and of the mean wall time; they run once per workload (not per round).

--knobs K1,K2,... (CUPTI's own settings, spec/runtime.md "CUPTI settings"): per workload, one probed process per
knob (its NEUTRINO_TIMELINE_* variables set, KNOBS below), each an A/B of three rotating phases (timeline paused,
on at the default level, CUPTI's records alone without host times: NEUTRINO_BENCH_AB_WAYS=records). A knob's
cost is the ratio of its `on` (and `records`) phase to its own paused phase, so the spread between processes
does not enter; `default` twice (first and last) gives the noise between two processes of the same settings.
The table also gives what CUPTI read back (the `timeline` event's cupti_settings: the knob was applied, or
CUPTI's error). --budget S stops starting processes after S seconds (those left are listed).

--suite (the timeline's cost in one command, <= 150 s on an H100/H200 with --budget 110): one probed process per
workload, each an A/B of the timeline paused and on whose phase order is shuffled every cycle
(NEUTRINO_BENCH_AB_ORDER=random), in this order: the MLP training step run eagerly (`eager_mlp`: Linear layers),
the launch-bound tiny-kernel loop (`eager`, the worst case), the decode step replayed as one CUDA graph
(`decode_graph`, nothing probed: `-k neutrino_matches_no_kernel`) with three phases: paused, on (graph replays
sampled, NEUTRINO_TIMELINE_GRAPH_NODES=3) and on with every replay node by node; a check of what the sampled graph records were (a
`decode_graph` run at the default settings: per executable graph, its replays with node records and with one
graph-level record, against the launches the shim counted); the decode step without neutrino (`decode_plain`: each
decode phase is also given against it, across processes, since a graph instantiated while GRAPH_TRACE is on may
replay slower even with the timeline paused); the torch.compile MLP training step. Each result is
printed as it comes; one table at the end (phase, span median, x paused, wall median, x paused).

usage: python benchmarks/timeline_cost.py [--steps N] [--rounds R] [--modes eager,compile] [--configs ...]
       [--phase-steps N] [--cycles C] [--json F] [--knobs K,...] [--budget S] [--suite]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "timeline_workload.py"
WARMUP = 10  # timeline_workload.WARMUP
CONFIGS = {  # key: (label, neutrino options or None, NEUTRINO_TIMELINE_LEVEL, CUPTI floor callbacks)
    "plain": ("plain", None, None, None),
    "floor": ("CUPTI alone", None, None, "0"),
    "floor_cb": ("CUPTI alone + launch callbacks", None, None, "1"),
    "notl": ("probed, no timeline", ["--no-timeline"], None, None),
    "copies": ("timeline copies (no host time)", [], "copies", None),
    "default": ("timeline default (copies,host)", [], None, None),
    "ab": ("probed, timeline paused/on", [], None, None),
    "floor_ab": ("CUPTI alone, phases", None, None, "0"),
}
AB = {"ab": "timeline", "floor_ab": "floor"}
KNOBS = {  # name: (NEUTRINO_TIMELINE_* variables, what it changes)
    "default": ({}, "CUPTI's defaults (CONCURRENT_KERNEL, 3.2 MB device buffers x3 in device memory, per-thread)"),
    "serial": ({"NEUTRINO_TIMELINE_KERNEL_RECORDS": "serial"}, "KERNEL records instead of CONCURRENT_KERNEL"),
    "hwtrace": ({"NEUTRINO_TIMELINE_HW_TRACE": "1"}, "cuptiActivityEnableHWTrace(1) (Blackwell only)"),
    "pinned": ({"NEUTRINO_TIMELINE_HOST_PINNED": "1"}, "CUPTI's device buffers in pinned host memory"),
    "devbuf_small": ({"NEUTRINO_TIMELINE_DEVICE_BUFFER_BYTES": str(256 << 10)}, "256 KiB device buffers"),
    "devbuf_big": ({"NEUTRINO_TIMELINE_DEVICE_BUFFER_BYTES": str(32 << 20), "NEUTRINO_TIMELINE_DEVICE_BUFFERS": "4"},
                   "32 MiB device buffers, 4 allocated up front"),
    "zeroed": ({"NEUTRINO_TIMELINE_ZEROED_BUFFERS": "1"}, "our host buffers zeroed (calloc), CUPTI zeroes none"),
    "hostbuf_big": ({"NEUTRINO_TIMELINE_BUFFER_BYTES": str(64 << 20)}, "64 MiB host buffers (default 4 MiB)"),
    "flush10": ({"NEUTRINO_TIMELINE_FLUSH_PERIOD_MS": "10"}, "CUPTI's worker flushes every 10 ms"),
    "shared_buffers": ({"NEUTRINO_TIMELINE_PER_THREAD_BUFFERS": "0"}, "one activity buffer, not per thread"),
    "no_copies": ({"NEUTRINO_TIMELINE_LEVEL": "host,hooks"}, "no MEMCPY/MEMSET records (content changes)"),
    "no_callbacks": ({"NEUTRINO_TIMELINE_LEVEL": "copies,hooks"}, "no CUPTI subscriber (copies lose host times)"),
}
DEFAULT_KNOBS = "default,serial,hwtrace,pinned,devbuf_small,devbuf_big,zeroed,hostbuf_big,flush10,shared_buffers,default"


def find_cupti() -> str:
    sys.path.insert(0, str(HERE.parent))
    from neutrino.runtime.context_tables.cupti import find_cupti as find

    path, why = find()
    if path is None:
        raise SystemExit(why)
    return path


def build_floor(scratch: str) -> str:
    out = f"{scratch}/cupti_floor.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", f"-I{HERE.parent / 'shim'}", "-o", out,
                    str(HERE / "cupti_floor.c"), "-ldl"], check=True)
    return out


def run(key: str, mode: str, steps: int, env: dict, tracedir: str, floor: str, ab: str = "") -> dict:
    _, options, level, callbacks = CONFIGS[key]
    cmd = [sys.executable, str(WORKLOAD), mode, str(steps)]
    env = dict(env)
    if key in AB:
        env["NEUTRINO_BENCH_AB"] = f"{AB[key]}:{ab}"
    if level is not None:
        env["NEUTRINO_TIMELINE_LEVEL"] = level
    if callbacks is not None:
        env["NEUTRINO_BENCH_CUPTI_FLOOR"] = f"{floor}:{find_cupti()}:{callbacks}"
    if options is not None:
        cmd = [sys.executable, "-m", "neutrino", "-p", "block_sched", "-q", "--tracedir", tracedir, *options, "--", *cmd]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    out = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    if key == "default":
        out["kernels"] = timeline_kernels(tracedir)
    return out


def timeline_kernels(tracedir: str) -> int | None:
    for log in glob.glob(f"{tracedir}/**/event.log", recursive=True):
        for line in open(log):
            if '"timeline_counts"' in line:
                return int(json.loads(line).get("kernels", 0))
    return None


def timeline_settings(tracedir: str) -> dict:
    for log in glob.glob(f"{tracedir}/**/event.log", recursive=True):
        for line in open(log):
            event = json.loads(line)
            if event.get("event") == "timeline":
                return event.get("cupti_settings", {})
    return {}


def run_knobs(mode: str, knobs: list[str], env: dict, scratch: str, args, deadline: float) -> dict:
    """One A/B process per knob; prints each as it comes, then the table of ratios to each paused phase."""
    rows = {}
    for i, knob in enumerate(knobs):
        if time.monotonic() > deadline:
            print(f"{mode:8s} budget spent: not run: {', '.join(knobs[i:])}", flush=True)
            break
        variables, _ = KNOBS[knob]
        tracedir = f"{scratch}/trace-{mode}-knob{i}-{knob}"
        knob_env = dict(env, **variables, NEUTRINO_BENCH_AB_WAYS="records")
        t0 = time.monotonic()
        phases = run("ab", mode, 0, knob_env, tracedir, "", f"{args.phase_steps}:{args.cycles}")["phases"]
        stats = {name: {"median_event_ms": statistics.median(v["event_ms"]), "mean_wall_ms": statistics.fmean(v["step_ms"]),
                        "median_wall_ms": statistics.median(v["step_ms"]), "steps": len(v["event_ms"])}
                 for name, v in phases.items()}
        paused = stats["timeline paused"]
        on, records = stats["timeline on"], stats["records only, no host times"]
        row = {"variables": variables, "settings": timeline_settings(tracedir), "phases": stats,
               "x_on_span": on["median_event_ms"] / paused["median_event_ms"],
               "x_records_span": records["median_event_ms"] / paused["median_event_ms"],
               "x_on_wall": on["mean_wall_ms"] / paused["mean_wall_ms"], "seconds": time.monotonic() - t0}
        rows[f"{i}:{knob}"] = row
        print(f"{mode:8s} {knob:15s} paused {paused['median_event_ms']:7.3f} ms  on x{row['x_on_span']:6.3f}  "
              f"records x{row['x_records_span']:6.3f}  wall mean on x{row['x_on_wall']:6.3f}  "
              f"({paused['steps']} steps a phase, {row['seconds']:.0f} s)  cupti: "
              f"{' '.join(f'{k}={v}' for k, v in row['settings'].items())}", flush=True)
    print(f"\n{mode}: knob | on / paused (median span) | records only / paused | on / paused (mean wall) | changes")
    print("--- | ---: | ---: | ---: | ---")
    for key, row in rows.items():
        knob = key.split(":", 1)[1]
        print(f"{knob} | {row['x_on_span']:.3f} | {row['x_records_span']:.3f} | {row['x_on_wall']:.3f} | {KNOBS[knob][1]}")
    return rows


NOTHING_PROBED = ["-p", "block_sched", "-k", "neutrino_matches_no_kernel"]
SUITE = (  # (workload, NEUTRINO_BENCH_AB_WAYS, neutrino options, phase steps, cycles); cheapest and newest first,
    # the torch.compile step (the longest to build, measured before: 1.040x) last; `graph_check` is the check run
    ("eager_mlp", "", ["-p", "block_sched"], 25, 10),
    ("eager", "", ["-p", "block_sched"], 25, 10),
    ("decode_graph", "graphs", NOTHING_PROBED, 50, 8),
    ("graph_check", "", NOTHING_PROBED, 0, 0),
    ("decode_plain", "", None, 0, 0),  # the decode graph without neutrino: what the paused phase is next to
    ("compile", "", ["-p", "block_sched"], 25, 10),
)
PLAIN_DECODE_STEPS = 200
GRAPH_CHECK_STEPS = 30


def neutrino_run(options: list, mode: str, steps: int, env: dict, tracedir: str, timeout: float) -> dict:
    """timeline_workload.py under neutrino; its JSON line."""
    cmd = [sys.executable, "-m", "neutrino", *options, "-q", "--tracedir", tracedir, "--",
           sys.executable, str(WORKLOAD), mode, str(steps)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])


def graph_check(tracedir: str) -> list[str]:
    """What the sampled graph records were in a decode_graph run: per executable graph (graph_exec), its replays
    with node records (and kernel records per such replay), with one graph-level record, and with both (never
    expected); against the shim's counts of replays launched sampled and whole (timeline_counts)."""
    sys.path.insert(0, str(HERE.parent))
    import numpy as np

    from neutrino.timeline import FLAG_GRAPH, GRAPH_REPLAY, read_timeline

    logs = glob.glob(f"{tracedir}/**/event.log", recursive=True)
    if not logs:
        return ["graph check: no run directory"]
    run_dir = Path(logs[0]).parent
    events = [json.loads(line) for line in open(logs[0]) if line.strip()]
    counts = next((e for e in events if e.get("event") == "timeline_counts"), {})
    start = next((e for e in events if e.get("event") == "timeline"), {})
    tl = read_timeline(run_dir, graphs=True)
    graph = tl[(tl["flags"] & FLAG_GRAPH) != 0]
    lines = [f"graph check: graph_records={start.get('graph_records')}; launched sampled "
             f"{counts.get('graph_replays_sampled')}, whole {counts.get('graph_replays_whole')}, GRAPH_TRACE switches "
             f"{counts.get('graph_trace_switches')} ({counts.get('graph_trace_switch_ns', 0) / 1e3:.1f} us in all); graph-level records {counts.get('graph_replays')}, graph records "
             f"without graph_exec {int((graph['graph_exec'] == 0).sum())} of {len(graph)}"]
    for exec_no in np.unique(graph["graph_exec"]).tolist():
        mine = graph[graph["graph_exec"] == exec_no]
        whole = mine[mine["kind"] == GRAPH_REPLAY]
        nodes = mine[mine["kind"] != GRAPH_REPLAY]
        per_replay = np.unique(nodes["graph_replay"], return_counts=True)
        both = set(whole["graph_replay"].tolist()) & set(nodes["graph_replay"].tolist())
        node_ns = (nodes["end_ns"].astype(np.int64) - nodes["start_ns"].astype(np.int64)).sum()
        whole_ns = (whole["end_ns"].astype(np.int64) - whole["start_ns"].astype(np.int64))
        lines.append(f"  graph {exec_no}: replays with node records {len(per_replay[0])} "
                     f"(replays {per_replay[0].tolist()[:8]}, kernel records each {sorted(set(per_replay[1].tolist()))}, "
                     f"node time per replay {node_ns / max(len(per_replay[0]), 1) / 1e3:.1f} us), replays recorded whole "
                     f"{len(whole)} (median {np.median(whole_ns) / 1e3 if len(whole) else 0:.1f} us), both {len(both)}")
    return lines


def run_suite(env: dict, scratch: str, deadline: float) -> dict:
    """--suite: the A/B processes, then the graph check; one table at the end."""
    rows, report = [], {"graph_check": ["graph check: budget spent, not run"]}
    for mode, ways, options, phase_steps, cycles in SUITE:
        if time.monotonic() > deadline:
            print(f"budget spent: {mode} not run", flush=True)
            continue
        t0 = time.monotonic()
        if mode == "decode_plain":  # a graph instantiated with GRAPH_TRACE on may replay slower even paused
            try:
                r = subprocess.run([sys.executable, str(WORKLOAD), "decode_graph", str(PLAIN_DECODE_STEPS)], env=env,
                                   capture_output=True, text=True, timeout=300)
                out = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
                report["decode_plain"] = {"median_event_ms": statistics.median(out["event_ms"]),
                                          "steps": len(out["event_ms"])}
                print(f"decode_graph plain (no neutrino): span median {report['decode_plain']['median_event_ms']:.4f} "
                      f"ms over {len(out['event_ms'])} replays ({time.monotonic() - t0:.0f} s)", flush=True)
            except (IndexError, ValueError, subprocess.TimeoutExpired) as e:
                print(f"decode_plain failed: {e}", flush=True)
            continue
        if mode == "graph_check":
            try:
                neutrino_run(options, "decode_graph", GRAPH_CHECK_STEPS, dict(env, NEUTRINO_TIMELINE_GRAPH_NODES="3"),
                             f"{scratch}/suite-graph-check", 300)
                report["graph_check"] = graph_check(f"{scratch}/suite-graph-check")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                report["graph_check"] = [f"graph check failed: {e}"]
            print("\n".join(report["graph_check"]) + f"\ngraph check: {time.monotonic() - t0:.0f} s", flush=True)
            continue
        ab_env = dict(env, NEUTRINO_BENCH_AB=f"timeline:{phase_steps}:{cycles}", NEUTRINO_BENCH_AB_ORDER="random")
        if ways:
            ab_env["NEUTRINO_BENCH_AB_WAYS"] = ways
        if ways == "graphs":  # "on" samples graph replays (opt-in since the GPU test crash of 2026-11-27)
            ab_env["NEUTRINO_TIMELINE_GRAPH_NODES"] = "3"
        try:
            phases = neutrino_run(options, mode, 0, ab_env, f"{scratch}/suite-{mode}", 300)["phases"]
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"{mode}: failed: {e}", flush=True)
            continue
        report[mode] = ab_table(mode, "ab", phases)
        print(f"{mode}: {time.monotonic() - t0:.0f} s", flush=True)
        first = next(iter(report[mode].values()))
        for name, row in report[mode].items():
            rows.append((mode, name, row, first))
    print("\nworkload | phase | steps | span median ms | x paused | wall median ms | x paused | wall mean x paused")
    print("--- | --- | ---: | ---: | ---: | ---: | ---: | ---:")
    for mode, name, row, first in rows:
        print(f"{mode} | {name} | {row['steps']} | {row['median_event_ms']:.4f} | "
              f"{row['median_event_ms'] / first['median_event_ms']:.3f} | {row['median_wall_ms']:.4f} | "
              f"{row['median_wall_ms'] / first['median_wall_ms']:.3f} | {row['mean_wall_ms'] / first['mean_wall_ms']:.3f}")
    print("\n".join(report["graph_check"]), flush=True)
    if "decode_plain" in report and "decode_graph" in report:
        plain = report["decode_plain"]["median_event_ms"]
        print("decode_graph against plain (another process): " + ", ".join(
            f"{name} {row['median_event_ms'] / plain:.3f}x" for name, row in report["decode_graph"].items()))
    return report


def ab_table(mode: str, key: str, phases: dict) -> dict:
    """Print one A/B process's phases; their medians and means."""
    rows, first = {}, None
    for name, v in phases.items():
        ev, wall = v["event_ms"], v["step_ms"]
        row = {"median_event_ms": statistics.median(ev), "mean_event_ms": statistics.fmean(ev),
               "median_wall_ms": statistics.median(wall), "mean_wall_ms": statistics.fmean(wall), "steps": len(ev)}
        first = first or row
        print(f"{mode:8s} {key:9s} {name:34s} span med {row['median_event_ms']:7.3f} mean "
              f"{row['mean_event_ms']:7.3f}  wall med {row['median_wall_ms']:7.3f} mean {row['mean_wall_ms']:7.3f}  "
              f"x span med {row['median_event_ms'] / first['median_event_ms']:6.3f}  "
              f"x wall mean {row['mean_wall_ms'] / first['mean_wall_ms']:6.3f}  ({row['steps']} steps)", flush=True)
        rows[name] = row
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--configs", help="comma list of CONFIGS keys (default: all of them, none with --knobs)")
    ap.add_argument("--phase-steps", type=int, default=25)
    ap.add_argument("--cycles", type=int, default=12)
    ap.add_argument("--json", help="write the samples here")
    ap.add_argument("--knobs", help=f"CUPTI settings to compare, one process each (e.g. {DEFAULT_KNOBS})")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds after which no process is started")
    ap.add_argument("--suite", action="store_true", help="the one-command cost measurement (see the docstring)")
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget
    if args.suite:
        scratch = tempfile.mkdtemp(prefix="timeline_suite_")
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{scratch}/inductor", TRITON_CACHE_DIR=f"{scratch}/triton",
                   PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
        report = run_suite(env, scratch, deadline)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
        return
    knobs = args.knobs.split(",") if args.knobs else []
    unknown = [k for k in knobs if k not in KNOBS]
    if unknown:
        raise SystemExit(f"unknown knob(s) {', '.join(unknown)}; known: {', '.join(KNOBS)}")
    keys = [k for k in (args.configs if args.configs is not None else "" if knobs else ",".join(CONFIGS)).split(",") if k]
    ab_keys = [k for k in keys if k in AB]
    keys = [k for k in keys if k not in AB]
    scratch = tempfile.mkdtemp(prefix="timeline_cost_")
    floor = build_floor(scratch) if {"floor", "floor_cb", "floor_ab"} & set(keys + ab_keys) else ""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{scratch}/inductor", TRITON_CACHE_DIR=f"{scratch}/triton",
               PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    report = {}
    print(f"{'workload':8s} {'config':32s} {'event ms':>9s} {'wall ms':>8s} {'vs plain':>9s} {'vs notl':>8s} "
          f"{'us/kernel':>9s} {'wall/plain':>10s} {'wall/notl':>9s}")
    for mode in args.modes.split(","):
        run("plain", mode, 5, env, scratch, floor)  # compile caches warm before anything is timed
        if knobs:
            report[f"{mode}_knobs"] = run_knobs(mode, knobs, env, scratch, args, deadline)
        report[f"{mode}_ab"] = {key: ab_table(mode, key, run(key, mode, 0, env, f"{scratch}/trace-{mode}-{key}", floor,
                                                         f"{args.phase_steps}:{args.cycles}")["phases"])
                                for key in ab_keys}
        if not keys:
            continue
        samples: dict[str, dict[str, list]] = {k: {"event_ms": [], "step_ms": []} for k in keys}
        kernels = None
        for r in range(args.rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                out = run(key, mode, args.steps, env, f"{scratch}/trace-{mode}-{key}-{r}", floor)
                print(f"  {mode} round {r} {key}: wall ms median {statistics.median(out['step_ms']):.3f}, "
                      f"event ms median {statistics.median(out['event_ms']):.3f}", flush=True)  # a cut-off run keeps these
                samples[key]["event_ms"] += out["event_ms"]
                samples[key]["step_ms"] += out["step_ms"]
                kernels = out.get("kernels") or kernels
        per_step = kernels / (WARMUP + args.steps) if kernels else None
        med = {k: statistics.median(v["event_ms"]) for k, v in samples.items()}
        wall = {k: statistics.median(v["step_ms"]) for k, v in samples.items()}
        for k in keys:
            vs_plain = f"{med[k] / med['plain']:8.3f}x" if "plain" in med else ""
            vs_notl = f"{med[k] / med['notl']:7.3f}x" if "notl" in med else ""
            per_kernel = f"{med[k] * 1e3 / per_step:9.2f}" if per_step else ""
            wall_plain = f"{wall[k] / wall['plain']:9.3f}x" if "plain" in wall else ""
            wall_notl = f"{wall[k] / wall['notl']:8.3f}x" if "notl" in wall else ""
            print(f"{mode:8s} {CONFIGS[k][0]:32s} {med[k]:9.3f} {wall[k]:8.3f} {vs_plain:>9s} {vs_notl:>8s} "
                  f"{per_kernel:>9s} {wall_plain:>10s} {wall_notl:>9s}")
        print(f"{mode:8s} kernels per step (timeline): {per_step and round(per_step, 1)}")
        report[mode] = {"kernels_per_step": per_step, "median_event_ms": med, "median_wall_ms": wall}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
