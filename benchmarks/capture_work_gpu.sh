#!/usr/bin/env bash
# Issue 24 (graph B's ~9% under --graphs): which stream work of ours still lands inside a capture of the program in a
# real process. The shim counts our copies, memsets, event records and waits made while a capture is open, by who
# made them (the exit event's `captures` and `stream_work_in_capture`: writer, poller, launch, pick, runtime;
# spec/trace-format.md). One GPU call of ~40 s:
#   bash benchmarks/capture_work_gpu.sh
# graph_residual_child.py (graphs A probed, B not; every:50) with the timeline off and on; then graph8 under
# overhead.py's workload (every replay probed). A non-zero count names the work to move out of the capture.
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
export OVERHEAD_GPU_ONLY=1
show() {  # the exit event's capture fields of every run under $1
  python3 - "$1" <<'PY'
import json, sys
from pathlib import Path
for log in sorted(Path(sys.argv[1]).glob("*/event.log")):
    for line in log.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "exit" and "captures" in e:
            print(f"  {log.parent.name}: captures {e['captures']}, stream work in a capture {e['stream_work_in_capture']}")
PY
}
for tl in --no-timeline ""; do
  d="$out/capture_work${tl:+_notl}"
  echo "== graph_residual_child.py, every:50, B replayed alone ${tl:-(timeline on)}"
  timeout 60 python3 -m neutrino.runtime.start.launcher -p block_sched --filter _plain $tl --graphs --launches every:50 \
      --tracedir "$d" -- python3 benchmarks/graph_residual_child.py --iters 100 --replay B 2>&1 | grep -E "RESIDUAL|neutrino:" | cut -c1-300
  show "$d"
done
d="$out/capture_work_graph8"
echo "== graph8 (overhead_workloads.py), every replay probed, timeline off"
timeout 60 python3 -m neutrino.runtime.start.launcher -p block_sched --graphs --no-timeline --tracedir "$d" -- \
    python3 benchmarks/overhead_workloads.py --iters 100 --only graph8 2>&1 | tail -3 | cut -c1-300
show "$d"
