"""Ranges and the tensor trace on the GPU machine (issue 22 §3-4). Skipped without an NVIDIA GPU.

`torch.cuda.nvtx.range`, `range_push/pop`, `emit_nvtx()` (torch's own bundled NVTX) and
`neutrino.annotate` reach ranges.bin with the probed launches inside them; a Triton kernel
reading an nn.Linear's weight gets that argument named `weight` with its shape and dtype (the
garbage collector walked at most once: tensors.py); a
torch.compile'd step's Triton kernel gets its arguments resolved too. The cost of the argument
trace per launch is measured (printed, never asserted).
"""

from __future__ import annotations

import re
import sys

from gpuutil import WORKLOADS, base_env, gpu, run_plain, run_probed

from neutrino import ranges as nr

pytestmark = gpu


def test_ranges_and_tensors_of_probed_launches(tmp_path):
    env = base_env(tmp_path)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    cmd = [sys.executable, str(WORKLOADS / "w_context.py"), "check"]
    r, trace = run_probed("block_sched", cmd, tmp_path / "t", env)
    print(r.stdout[-800:], r.stderr[-1500:])
    run = trace.path
    ranges = nr.read_ranges(run)
    names = [str(n) for n in ranges["name"]]
    print("ranges:", len(ranges), sorted(set(names))[:30])
    src = {str(x["name"]): int(x["source"]) for x in ranges}
    assert src["nvtx_outer"] == 1 and src["pushed"] == 1 and src["in_profiler"] == 1
    assert src["annot_inner"] == 3 and src["compiled_step"] == 3
    assert any(n.startswith("aten::") for n in names), "emit_nvtx() ranges missing"
    argsets, uses = nr.read_launch_args(run)
    around = nr.launch_ranges(run)
    scale = [la for la in trace.launches if la.kernel == "scale"]
    assert len(scale) == 5, [la.kernel for la in trace.launches]  # 3 on the weight, "pushed", "in_profiler"
    first3 = scale[:3]
    for la in first3:
        assert around[la.index][-2:] == ["nvtx_outer", "annot_inner"], around.get(la.index)
    assert len({uses[la.index] for la in first3}) == 1  # one argument set for three launches
    weight_set = argsets[uses[first3[0].index]]
    w = weight_set["args"][0]["tensor"]
    print("weight argument:", weight_set["args"][0], "out argument:", weight_set["args"][1])
    assert w["name"] == "weight" and w["shape"] == [32, 64] and w["dtype"] == "float32" and w["strides"] == [64, 1]
    assert weight_set["args"][1]["tensor"]["shape"] == [32 * 64]
    assert around[scale[3].index][-1:] == ["pushed"] and around[scale[4].index][-1:] == ["in_profiler"]
    compiled = [la for la in trace.launches if la.kernel.startswith("triton_")]
    assert compiled and all(around[la.index][-1:] == ["compiled_step"] for la in compiled)
    tensors = [a["tensor"] for la in compiled for a in argsets[uses[la.index]]["args"] if a["tensor"]]
    print("compiled step tensors:", tensors)
    assert tensors and any(t["name"] and re.fullmatch(r"(buf|primals_|arg)\w*|weight", t["name"]) for t in tensors)
    (ct,) = [e for e in trace.events if e["event"] == "context_tables"]
    print("context_tables:", ct)
    assert ct["nvtx_injection"] == "neutrino" and ct["resolution_failures"] == 0
    walks = [e for e in trace.events if e["event"] == "tensor_walk"]
    print("tensor_walk:", walks)
    # torch was imported before the runtime started (at the first CUDA call): one garbage-collector
    # walk at most, every later build from the modules torch's registration hooks told
    assert walks and sum(1 for w in walks if w["source"] == "gc") <= 1


def test_cost_of_argument_trace_per_launch(tmp_path):
    """Plain, probed without and with the argument trace: per-launch time of a tiny Triton kernel
    (host-bound loop, CUDA events over 2000 launches, median of 5), three interleaved rounds.
    Printed for spec/runtime.md, never asserted."""
    env = base_env(tmp_path)
    cmd = [sys.executable, str(WORKLOADS / "w_context.py"), "bench", "2000"]
    medians: dict[str, list[float]] = {"plain": [], "probed, no argument trace": [], "probed, argument trace": []}
    for k in range(3):
        medians["plain"].append(_median(run_plain(cmd, env).stdout))
        r, _ = run_probed("block_sched", cmd, tmp_path / f"n{k}", dict(env, NEUTRINO_ARGS="0"))
        medians["probed, no argument trace"].append(_median(r.stdout))
        r, trace = run_probed("block_sched", cmd, tmp_path / f"a{k}", env)
        medians["probed, argument trace"].append(_median(r.stdout))
    for what, values in medians.items():
        print(f"[{what}] per-launch us, median of each round: {values}")
    argsets, uses = nr.read_launch_args(trace.path)
    print(f"argument sets {len(argsets)}, uses {len(uses)}")
    assert len(uses) >= 10000 and len(argsets) <= 3


def _median(stdout: str) -> float:
    return float(re.search(r"per-launch us: median ([0-9.]+)", stdout).group(1))
