"""The timeline on a real GPU: every kernel with its times (CUPTI through shim/cupti.c), probed ones
flagged, the program's own torch.profiler kept working, probes and CUPTI on one clock.

Run on the device machine: `python -m pytest tests/gpu/test_gpu_timeline.py -q -s`.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuutil import WORKLOADS, base_env, gpu, run_plain, run_probed
from neutrino.timeline import (FLAG_PROBED, KERNEL, clock_calibrations, globaltimer_offset, globaltimer_to_ns,
                               has_gpu_time, kernels_by_origin, read_timeline)

pytestmark = gpu

GLOBALTIMER_PROBE = '''
[gt]
position = "kernel"
datamodel = "warp:16"
before = """.reg .b64 %t0; mov.u64 %t0, %globaltimer;"""
after = """.reg .b64 %t1; mov.u64 %t1, %globaltimer; SAVE.u64 {%t0, %t1};"""
'''


def _events(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "event.log").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def _kernels(run_dir: Path, untimed: bool = False) -> np.ndarray:
    tl = read_timeline(run_dir, untimed=untimed)
    return tl[tl["kind"] == KERNEL]


def _match_launches(launches, kernels):
    """Each probed launch with its kernel record: by probe_launch, else the i-th launch of a kernel
    name with the i-th record of that name (one stream: both in launch order)."""
    by_index = {int(k["probe_launch"]): k for k in kernels if k["probe_launch"] >= 0}
    if all(la.index in by_index for la in launches):
        return [(la, by_index[la.index]) for la in launches]
    pairs = []
    for name in {la.kernel for la in launches}:
        mine = sorted((la for la in launches if la.kernel == name), key=lambda la: la.index)
        recs = kernels[kernels["name"] == name]
        assert len(recs) == len(mine), f"{name}: {len(mine)} probed launches, {len(recs)} timeline records"
        pairs += list(zip(mine, recs))
    return pairs


def test_eager_program_every_kernel_with_times(tmp_path):
    """0 probed kernels (ATen and cuBLAS ship SASS only), yet every kernel is on the timeline: as many
    as torch.profiler counts in a separate run of the same steps, each with start < end."""
    pytest.importorskip("torch")
    env = base_env(tmp_path)
    run_plain([sys.executable, str(WORKLOADS / "w_timeline.py"), "profile", str(tmp_path / "p.json"), "5"], env)
    theirs = json.loads((tmp_path / "p.json").read_text())
    r, trace = run_probed("block_sched", [sys.executable, str(WORKLOADS / "w_timeline.py"), "plain",
                                          str(tmp_path / "o.json"), "5"], tmp_path / "tr", env)
    kernels = _kernels(trace.path)
    print(f"\ntimeline kernels {len(kernels)}, torch.profiler kernels {theirs['n_kernels']}, "
          f"origins {kernels_by_origin(kernels)}")
    print([line for line in r.stderr.splitlines() if "kernel launch" in line])
    other = sorted({n for n in kernels["name"] if kernels_by_origin(kernels[kernels["name"] == n]).get("other")})
    print(f"origin 'other': {other}\ncounts {_events(trace.path, 'timeline_counts')}")
    assert len(kernels) == theirs["n_kernels"]
    assert len(set(kernels["name"])) == len(theirs["kernels"])
    assert (kernels["end_ns"] > kernels["start_ns"]).all()
    # the launch callbacks (default level): every kernel's thread, and its launch call before its GPU start
    lag = kernels["start_ns"].astype(np.int64) - kernels["host_ns"].astype(np.int64)
    print(f"host_ns known {int((kernels['host_ns'] > 0).sum())}/{len(kernels)}, tid known "
          f"{int((kernels['tid'] > 0).sum())}; GPU start - launch call: median {int(np.median(lag))} ns, "
          f"min {int(lag.min())} ns")
    assert (kernels["tid"] > 0).all() and (kernels["host_ns"] > 0).all() and (lag > 0).all()
    (counts,) = _events(trace.path, "timeline_counts")
    assert counts["with_host_time"] == counts["records"]  # copies and memsets too
    assert not (kernels["flags"] & FLAG_PROBED).any()
    origins = kernels_by_origin(kernels)
    assert origins.get("ATen", 0) > 0 and origins.get("cuBLAS", 0) > 0, origins
    (start,) = _events(trace.path, "timeline")
    assert start["enabled"] and start["version"] >= 130000, start
    settings = start["cupti_settings"]  # CUPTI's own settings read back (none set: its defaults)
    print(f"cupti_settings {settings}")
    assert settings["kernel_records"] == "concurrent" and "device_buffer_bytes" in settings, settings
    assert "kernel launch(es) ran (" in r.stderr


def test_every_eager_kernel_knows_its_nvtx_range(tmp_path):
    """Unprobed ATen/cuBLAS kernels of steps in torch.cuda.nvtx.range("eager_step") (host running
    ahead: no synchronization between steps) are placed in their step by their launch call's host
    time: every step holds as many kernels, and the report's range column names `eager_step` for
    every launch of each kernel that runs only in steps."""
    pytest.importorskip("torch")
    from neutrino import ranges as nr
    from neutrino.analysis import context

    env = base_env(tmp_path)
    steps = 6
    r, trace = run_probed("block_sched", [sys.executable, str(WORKLOADS / "w_timeline.py"), "ranged",
                                          str(tmp_path / "o.json"), str(steps)], tmp_path / "tr", env)
    tl = read_timeline(trace.path)
    ranges = nr.read_ranges(trace.path)
    step_ranges = ranges[ranges["name"] == "eager_step"]
    assert len(step_ranges) == steps, sorted(set(ranges["name"].tolist()))
    around = nr.timeline_ranges(trace.path)
    in_step = [i for i, names in enumerate(around) if names and names[-1] == "eager_step"]
    per_step = np.bincount(np.searchsorted(np.sort(step_ranges["start_ns"].astype(np.int64)),
                                           tl["host_ns"][in_step].astype(np.int64), side="right") - 1,
                           minlength=steps)
    by_gpu = nr.enclosing_all(ranges, tl["tid"][in_step], tl["start_ns"][in_step])
    moved = sum(1 for hit in by_gpu if not hit or str(ranges["name"][hit[-1]]) != "eager_step")
    print(f"\nkernels per step (host time) {per_step.tolist()}; of {len(in_step)} step kernels, {moved} have "
          f"their GPU start outside any step range; all in `loop`: {all(a[:1] == ['loop'] for a in around if a)}")
    assert per_step.min() == per_step.max() > 0
    assert all(around[i][0] == "loop" for i in in_step)
    rows = context.load(trace.path).rows
    kernel_rows = [row for row in rows if row.origin in ("ATen", "cuBLAS") and row.count % steps == 0]
    print([(row.name[:40], row.count, row.range, row.range_launches) for row in rows[:8]])
    assert kernel_rows and all(row.range == "eager_step" and row.range_launches == row.count for row in kernel_rows)


@pytest.mark.parametrize("clock_flush", ["1", "0"])
def test_program_with_its_own_torch_profiler(tmp_path, clock_flush):
    """torch.profiler inside the program (Kineto registers its own CUPTI buffers and its clock): its
    profile keeps its kernels, and the timeline keeps every kernel, inside the profiler's window and
    outside, each with its GPU times (the shim flushes CUPTI before Kineto's clock replaces CUPTI's:
    spec/runtime.md, "Coexistence"). NEUTRINO_TIMELINE_CLOCK_FLUSH=0 shows the gap that flush closes:
    the kernels of the steps before the profiler came without GPU times."""
    pytest.importorskip("torch")
    env = base_env(tmp_path)
    env.update(NEUTRINO_TIMELINE_CLOCK_FLUSH=clock_flush, NEUTRINO_TIMELINE_DEBUG="1")
    out = tmp_path / "self.json"
    r, trace = run_probed("block_sched", [sys.executable, str(WORKLOADS / "w_timeline.py"), "self", str(out), "5"],
                          tmp_path / "tr", env, timeout=120)
    theirs = json.loads(out.read_text())
    every = _kernels(trace.path, untimed=True)
    timed = has_gpu_time(every)
    kernels, untimed = every[timed], every[~timed]
    (counts,) = _events(trace.path, "timeline_counts")
    per_step = theirs["n_kernels"] / theirs["steps"]
    print(f"\nprogram's profile: {theirs['n_kernels']} kernels ({theirs['chrome_kernels']} in its chrome trace, "
          f"{theirs['key_averages']} key averages); timeline: {len(every)} kernels over "
          f"{theirs['steps_total']} steps, {len(untimed)} without GPU time; counts {counts}")
    calls = _events(trace.path, "timeline_profiler")
    first = calls[0]["first"] if calls else []
    clock_at = [c["time"] * 1e9 for c in first if c["call"] == "timestamp_callback"]
    if len(untimed):  # where they are: by launch order among all kernels, their names, launched before the clock?
        order = np.argsort(every["host_ns"], kind="stable")
        rank = {int(i): r for r, i in enumerate(order)}
        print("without GPU time (launch rank / total, name):",
              [(rank[int(i)], len(every), str(every["name"][i])[:40]) for i in np.flatnonzero(~timed)[:20]])
        if clock_at:
            before = int((untimed["host_ns"].astype(np.float64) < clock_at[0]).sum())
            print(f"launched before the program registered its clock: {before} of {len(untimed)} without GPU time, "
                  f"{int((every['host_ns'].astype(np.float64) < clock_at[0]).sum())} of {len(every)} in all")
    print("program's CUPTI calls:", [(c["call"], c.get("kind")) for c in first][:40])
    print("\n".join(line for line in r.stderr.splitlines() if "without GPU time" in line)[:3000])
    assert theirs["n_kernels"] > 0 and theirs["chrome_kernels"] == theirs["n_kernels"] and theirs["key_averages"] > 0
    # every kernel is on the timeline; those CUPTI gave no time are the stated gap (flags bit 2, counted)
    assert len(every) >= per_step * theirs["steps_total"] - 1e-9
    assert counts["no_gpu_time"] >= len(untimed)
    if clock_flush == "1":
        assert len(untimed) == 0 and "clock_flush" in [c["call"] for c in first]
    gaps = _events(trace.path, "timeline_host_gap")
    subscribes = [c for c in first if c["call"] == "subscribe"]
    print(f"host gaps {gaps}; subscribes {subscribes}; host_ns known {int((every['host_ns'] > 0).sum())}/"
          f"{len(every)}")
    # Kineto takes CUPTI's callback subscriber and keeps it: shared with ours, no kernel loses its host time
    assert not gaps and all(c["kind"] == 2 for c in subscribes)
    assert (every["host_ns"] > 0).all() and (every["tid"] > 0).all()
    # one clock: Kineto stamps CUPTI's records with its TSC clock from its start on; ours are mapped back,
    # so every kernel with GPU time starts after its launch call and within a second of it
    lag = kernels["start_ns"].astype(np.int64) - kernels["host_ns"].astype(np.int64)
    print(f"GPU start - launch call: min {lag.min()} ns, max {lag.max()} ns")
    assert (lag > 0).all() and (lag < 10**9).all()


@pytest.mark.parametrize("level", ["copies,api,ext", None])
def test_torch_compile_step_probed_triton_flagged(tmp_path, level):
    """A torch.compile step under block_sched: cuBLAS/ATen/Triton kernels on the timeline; every
    probed launch of the trace is one Triton kernel record flagged probed, joined by probe_launch:
    through CUPTI's external correlation (with API records: each kernel's thread too), or at the
    default level by order when the timeline stops."""
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    if level:
        env["NEUTRINO_TIMELINE_LEVEL"] = level
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "ic")
    r, trace = run_probed("block_sched", [sys.executable, str(WORKLOADS / "w_inductor.py"), str(tmp_path / "o.npz")],
                          tmp_path / "tr", env)
    kernels = _kernels(trace.path)
    origins = kernels_by_origin(kernels)
    probed = kernels[(kernels["flags"] & FLAG_PROBED) != 0]
    print(f"\norigins {origins}; flagged probed {len(probed)}; trace launches {len(trace.launches)}; "
          f"counts {_events(trace.path, 'timeline_counts')}; start {_events(trace.path, 'timeline')}")
    print([line for line in r.stderr.splitlines() if "kernel launch" in line])
    assert origins.get("Triton", 0) > 0 and (origins.get("cuBLAS", 0) + origins.get("ATen", 0)) > 0, origins
    missing = sorted({la.index for la in trace.launches} - set(probed["probe_launch"].tolist()))
    unflagged = kernels[(kernels["flags"] & FLAG_PROBED) == 0]
    unflagged = unflagged[[n.startswith("triton_") for n in unflagged["name"]]]
    by_index = {la.index: la for la in trace.launches}
    print(f"probe_launch missing {len(missing)}: {[(i, by_index[i].kernel[:40], by_index[i].event) for i in missing[:6]]}")
    print(f"unflagged Triton records: {[(r['name'][:40], int(r['correlation']), int(r['tid'])) for r in unflagged[:6]]}")
    assert len(probed) == len(trace.launches)
    assert sorted(probed["probe_launch"].tolist()) == sorted(la.index for la in trace.launches)
    assert all(n.startswith("triton_") for n in probed["name"])
    by_index = {la.index: la for la in trace.launches}
    for rec in probed:
        la = by_index[int(rec["probe_launch"])]
        assert tuple(rec["grid"]) == tuple(la.grid) and tuple(rec["block"]) == tuple(la.block)
        # --time-every's default: a launch not timed by events takes its record's GPU time
        if la.duration_from == "timeline":
            assert la.duration_ns == float(rec["end_ns"] - rec["start_ns"]) > 0
    assert None not in [la.duration_from for la in trace.launches]
    if level:
        assert (kernels["tid"] > 0).all()


def test_probed_launches_timed_by_their_timeline_records(tmp_path):
    """--time-every's default: each corpus Triton kernel launched 10 times under block_sched; its first two
    launches (the Python path's, the first C-path one) timed by events too, the 8 others by their timeline records
    alone; readers prefer the record (the kernel's own time: events add the launch's latency)."""
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    r, trace = run_probed("block_sched", [sys.executable, str(WORKLOADS / "w_triton.py"), str(tmp_path / "o.npz"),
                                          "10"], tmp_path / "tr", env)
    by_kernel = collections.defaultdict(list)
    for la in trace.launches:
        by_kernel[la.kernel].append(la)
    for name, las in by_kernel.items():
        print(f"\n{name[:40]}: {[(la.duration_from, round(la.duration_ns)) for la in las]}")
        assert [la.duration_from for la in las[2:]] == ["timeline"] * (len(las) - 2), name
        assert {la.duration_from for la in las[:2]} <= {"timeline", "events"}, name
        assert all(la.duration_ns > 0 for la in las)
    assert len(by_kernel) >= 4 and all(len(las) == 10 for las in by_kernel.values())


def test_jax_step_has_xla_kernels(tmp_path):
    pytest.importorskip("jax")
    env = base_env(tmp_path)
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    r, trace = run_probed("block_sched", [sys.executable, str(WORKLOADS / "w_jax.py"), "train", str(tmp_path / "o.npz")],
                          tmp_path / "tr", env)
    kernels = _kernels(trace.path)
    origins = kernels_by_origin(kernels)
    print(f"\nJAX origins {origins}; names {sorted(set(kernels['name']))[:12]}")
    assert origins.get("XLA", 0) > 0, origins
    assert (kernels["end_ns"] > kernels["start_ns"]).all()


def test_probe_globaltimer_inside_cupti_interval(tmp_path):
    """Clock alignment: every probed warp's %globaltimer start/end lies inside its kernel's CUPTI
    interval within 1 us (both are Unix-epoch ns on the device; spec/runtime.md states the skew)."""
    pytest.importorskip("triton")
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    probe = tmp_path / "gt.toml"
    probe.write_text(GLOBALTIMER_PROBE)
    r, trace = run_probed(str(probe), [sys.executable, str(WORKLOADS / "w_triton.py"), str(tmp_path / "o.npz"), "3"],
                          tmp_path / "tr", env)
    kernels = _kernels(trace.path)
    offset = globaltimer_offset(trace.path)
    assert offset is not None, _events(trace.path, "timeline_clock")
    early, late, raw = [], [], []
    for la, k in _match_launches(trace.launches, kernels):
        v = la.maps["gt"].valid()
        t0, t1 = globaltimer_to_ns([int(v["t0"].min()), int(v["t1"].max())], trace.path)
        early.append(int(k["start_ns"]) - int(t0))  # > 0: a warp started before the kernel
        late.append(int(t1) - int(k["end_ns"]))     # > 0: a warp ended after the kernel
        raw.append(int(k["start_ns"]) - (int(v["t0"].min()) + offset))
    print(f"\nmedian offset {offset} ns, calibrations (globaltimer, cupti) {clock_calibrations(trace.path)}; with one "
          f"offset: warp start before kernel start max {max(raw)} ns; interpolated: "
          f"over {len(early)} launches: warp start before kernel start max {max(early)} ns "
          f"(median {int(np.median(early))}), warp end after kernel end max {max(late)} ns (median {int(np.median(late))})")
    assert max(early) <= 1000 and max(late) <= 1000


GRAPH_PROGRAM = '''
import torch
x = torch.randn(1 << 16, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        y = torch.relu(x * 1.5 + 0.25).sin()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = torch.relu(x * 1.5 + 0.25).sin()
for _ in range(12):
    g.replay()
torch.cuda.synchronize()
print("replays done", float(y.sum()))
'''


GRAPH_PROGRAM_EAGER = GRAPH_PROGRAM.replace("""for _ in range(12):
    g.replay()""", """for i in range(12):
    if i % 4 == 3:  # still running when replay i + 1, a quiet one, switches kernel records off
        torch.cuda._sleep(2000000)
    g.replay()
    if i % 4 == 3:
        z = x.cos()""")


def test_graph_replays_quiet_past_the_sampled_ones(tmp_path):
    """The default (NEUTRINO_TIMELINE_GRAPH_EVERY=5 here): a torch CUDA graph's replays 1-3, 5 and 10 come node by
    node, the other 7 are quiet (no record: kernel records off during their launch) and no replay comes whole. An
    eager kernel running when a quiet replay switches records off (torch.cuda._sleep) keeps its record, and one
    launched after it is recorded; timeline_graphs.tsv tallies the replays. What CUPTI does when
    CONCURRENT_KERNEL is switched around a launch is checked here, not in the fake."""
    pytest.importorskip("torch")
    env = base_env(tmp_path)
    env["NEUTRINO_TIMELINE_GRAPH_EVERY"] = "5"
    r, trace = run_probed("block_sched", [sys.executable, "-c", GRAPH_PROGRAM_EAGER], tmp_path / "tr", env)
    tl = read_timeline(trace.path, graphs=True)
    graph = tl[(tl["flags"] & 2) != 0]
    (counts,) = _events(trace.path, "timeline_counts")
    by_replay = {}
    for rec in graph:
        by_replay.setdefault(int(rec["graph_replay"]), []).append(int(rec["kind"]))
    names = [str(n) for n in tl["name"][(tl["flags"] & 2) == 0]]
    spins, cos = sum("spin" in n for n in names), sum("cos" in n for n in names)
    tallies = (trace.path / "timeline_graphs.tsv").read_text()
    print(f"\nper replay {by_replay}; eager spin {spins}, cos {cos}; tallies {tallies!r}; counts {counts}")
    assert sorted(by_replay) == [1, 2, 3, 5, 10]
    assert all(kinds == [KERNEL] * len(by_replay[1]) and len(kinds) >= 4 for kinds in by_replay.values())
    assert spins == 3 and cos == 3
    assert tallies.splitlines()[1] == "1\t12\t5\t7\t0"
    assert counts["kernel_records_switch_errors"] == 0 and counts["graph_replays"] == 0


@pytest.mark.parametrize("nodes", ["3", "all"])
def test_graph_replays_sampled_then_recorded_whole(tmp_path, nodes):
    """NEUTRINO_TIMELINE_GRAPH_REST=whole: a torch CUDA graph (4 ATen kernel nodes) replayed 12 times. NEUTRINO_TIMELINE_GRAPH_NODES=3: its first 3 replays come node by node
    (CUPTI's kernel records, each with the replay's graph_exec and graph_replay), its other 9 as one GRAPH_TRACE
    record each, none with both, none lost. NEUTRINO_TIMELINE_GRAPH_NODES=all: every replay node by node. What
    CUPTI does when GRAPH_TRACE is switched between replays is checked here, not in the fake."""
    pytest.importorskip("torch")
    env = base_env(tmp_path)
    env["NEUTRINO_TIMELINE_GRAPH_NODES"], env["NEUTRINO_TIMELINE_GRAPH_REST"] = nodes, "whole"
    r, trace = run_probed("block_sched", [sys.executable, "-c", GRAPH_PROGRAM], tmp_path / "tr", env)
    tl = read_timeline(trace.path, graphs=True)
    graph = tl[(tl["flags"] & 2) != 0]
    (counts,) = _events(trace.path, "timeline_counts")
    (start,) = _events(trace.path, "timeline")
    execs = sorted(set(graph["graph_exec"].tolist()))
    by_replay = {}
    for rec in graph:
        by_replay.setdefault(int(rec["graph_replay"]), []).append(int(rec["kind"]))
    print(f"\ngraph_records {start['graph_records']}; graph execs {execs}; per replay {by_replay}; counts {counts}")
    assert execs == [1] and sorted(by_replay) == list(range(1, 13))
    assert (graph["host_ns"] > 0).all() and (graph["end_ns"] > graph["start_ns"]).all()
    sampled = 12 if nodes == "all" else 3
    for replay, kinds in by_replay.items():
        if replay <= sampled:
            assert kinds == [KERNEL] * len(by_replay[1]) and len(kinds) >= 4, (replay, kinds)
        else:
            assert kinds == [4], (replay, kinds)
    assert counts["graph_replays"] == 12 - sampled
