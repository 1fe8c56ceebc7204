"""analyze_hook of the built-in block_sched probe: one line per probed launch.

Called by the runtime as analyze(result_path, launch) after each result file is
written; prints the scheduling summary of that launch to stderr.
"""

from __future__ import annotations

import sys

from neutrino.analysis.block_sched import analyze_launch
from neutrino.trace import Launch, read_result


def analyze(result_path: str, launch: dict) -> None:
    result = read_result(result_path)
    md = result.maps.get("block_sched")
    if md is None:
        return
    view = Launch(
        index=int(launch.get("index", 0)), kernel=str(launch.get("kernel", "?")), grid=result.grid, block=result.block,
        shared_bytes=result.shared_bytes, duration_ns=launch.get("duration_ns"), frame=launch.get("frame"),
        result_path=result.path, event=launch,
    )
    s = analyze_launch(view, md).stats
    print(
        f"neutrino: block_sched {view.kernel}: {s.blocks} blocks on {len(s.sms)} SMs, "
        f"busy max/mean {s.busy_imbalance:.2f}, tail {s.tail_fraction:.1%}, gaps {s.gap_count}",
        file=sys.stderr,
    )
