"""analyze_hook of the built-in block_sched tool (neutrino/tools/block_sched/): one summary line per kernel.

The runtime calls analyze(result_path, launch) for every probed launch after the
program has ended (never on its launch path), then finish(stream) once: that
prints, per kernel, the launches seen and the mean scheduling figures over a
sample of them (`sampled`: spec/tools.md).
"""

from __future__ import annotations

import sys


# Per-kernel running sums, kept between analyze() calls of one run (this module is loaded per run).
_kernels: dict[str, dict] = {}
EVERY_UNTIL = 4  # launches 0..3 of each kernel are analysed, then 4, 8, 16, ...: the summary's sample


def sampled(n: int) -> bool:
    """Whether a kernel's n-th launch (0-based) is in the exit summary's sample: the first
    EVERY_UNTIL, then each power of two. A program's exit then costs O(kernels x log launches),
    not a pass over every per-warp record (`neutrino report` reads them all)."""
    return n < EVERY_UNTIL or n & (n - 1) == 0


def analyze(result_path: str, launch: dict) -> None:
    # imported here: this hook is loaded when the runtime starts, the analysis (numpy) runs after the program
    from neutrino.tools.block_sched.analysis import analyze_launch
    from neutrino.trace import Launch, read_result

    name = str(launch.get("kernel", "?"))
    k = _kernels.setdefault(name, {"launches": 0, "analysed": 0, "blocks": 0, "sms": 0, "busy": 0.0, "tail": 0.0,
                                   "gaps": 0})
    k["launches"] += 1
    if not sampled(k["launches"] - 1):
        return

    result = read_result(result_path, int(launch.get("result_offset", 0) or 0))
    md = result.maps.get("block_sched")
    if md is None:
        return
    view = Launch(
        index=int(launch.get("index", 0)), kernel=str(launch.get("kernel", "?")), grid=result.grid, block=result.block,
        shared_bytes=result.shared_bytes, duration_ns=launch.get("duration_ns"), frame=launch.get("frame"),
        result_path=result.path, event=launch,
    )
    s = analyze_launch(view, md).stats
    k["analysed"] += 1
    k["blocks"] += s.blocks
    k["sms"] = max(k["sms"], len(s.sms))
    k["busy"] += s.busy_imbalance if s.busy_imbalance == s.busy_imbalance else 0.0
    k["tail"] += s.tail_fraction if s.tail_fraction == s.tail_fraction else 0.0
    k["gaps"] += s.gap_count


def finish(stream=None) -> None:
    stream = stream or sys.stderr
    for name, k in sorted(_kernels.items(), key=lambda kv: -kv[1]["launches"]):
        n = k["analysed"]
        if not n:
            continue
        sample = "" if n == k["launches"] else f" ({n} analysed: neutrino report for all)"
        stream.write(
            f"neutrino: block_sched {name}: {k['launches']} launch(es){sample}, {k['blocks'] / n:.0f} blocks on up to "
            f"{k['sms']} SMs, busy max/mean {k['busy'] / n:.2f}, tail {k['tail'] / n:.1%}, gaps {k['gaps'] / n:.1f} "
            "per launch\n")
    _kernels.clear()
