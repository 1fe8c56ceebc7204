#!/bin/bash
# Issues 22 and 24, what the CUPTI timeline costs: one device call. BUDGET seconds (default 185).
# Under $OUT (8 files at most): device.txt; floor_eager.txt, floor_graph8.txt (benchmarks/cupti_floor_ab.py:
# CUPTI alone, phases in one process); tl_eager.txt, tl_compile.txt (benchmarks/timeline_cost.py under
# neutrino, one process each: timeline paused / records only / CUPTI launch callbacks / launch hooks);
# graph8.log (benchmarks/overhead.py, graph8 on the GPU alone, with the timeline and without, and the
# timeline paused/on inside each probed process: OVERHEAD_TIMELINE_AB); gputests.log (the GPU tests in
# GPU_TESTS); attrs.txt (CUPTI alone with activity attributes: CUPTI_FLOOR_ATTRS), as time allows.
# STEPS: which of floor,floor_graph8,tl_eager,graph8,tests,tl_compile,attrs to run (default all, in that order);
# GRAPH8_TOOLS: overhead.py's --tools for graph8.
set -u
OUT=${OUT:-/tmp/cupti_cost_out}
BUDGET=${BUDGET:-185}
STEPS=${STEPS:-floor,floor_graph8,tl_eager,graph8,tests,tl_compile,attrs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
left() { local n=$((BUDGET - SECONDS)); [ "$n" -gt "$1" ] && echo "$1" || echo "$((n > 1 ? n : 1))"; }
want() { [[ ",$STEPS," == *",$1,"* ]] && [ $((BUDGET - SECONDS)) -gt 8 ]; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt" 2>&1
date -u >> "$OUT/device.txt"
want floor && timeout "$(left 25)" python3 benchmarks/cupti_floor_ab.py --workload eager --cycles 10 \
  --phase-steps 20 > "$OUT/floor_eager.txt" 2>&1
if want floor_graph8; then  # two processes: kernel records; graph-level records (a crash in one leaves the other)
  timeout "$(left 20)" python3 benchmarks/cupti_floor_ab.py --workload graph8 --cycles 8 --phase-steps 20 \
    --phases none,kernel > "$OUT/floor_graph8.txt" 2>&1
  timeout "$(left 20)" python3 benchmarks/cupti_floor_ab.py --workload graph8 --cycles 8 --phase-steps 20 \
    --phases none,graph,kernel_graph >> "$OUT/floor_graph8.txt" 2>&1
fi
want tl_eager && NEUTRINO_BENCH_AB_WAYS=1 timeout "$(left 40)" python3 benchmarks/timeline_cost.py --modes eager \
  --configs ab --phase-steps 25 --cycles 8 > "$OUT/tl_eager.txt" 2>&1
want graph8 && OVERHEAD_GPU_ONLY=1 OVERHEAD_TIMELINE_AB=20:8 timeout "$(left 50)" python3 benchmarks/overhead.py \
  --no-warmup --workloads graph8 --iters 200 \
  --tools "${GRAPH8_TOOLS:-plain,block_sched graphs every:50,block_sched graphs every:50 no-timeline}" \
  > "$OUT/graph8.log" 2>&1
if want tests && [ -n "${GPU_TESTS:-}" ]; then
  timeout "$(left 200)" python3 -m pytest -m gpu -q -s $GPU_TESTS > "$OUT/gputests.log" 2>&1
fi
want tl_compile && NEUTRINO_BENCH_AB_WAYS=1 timeout "$(left 80)" python3 benchmarks/timeline_cost.py --modes compile \
  --configs ab --phase-steps 25 --cycles 6 > "$OUT/tl_compile.txt" 2>&1
if want attrs; then
  CUPTI_FLOOR_ATTRS=zeroed,small timeout "$(left 20)" python3 benchmarks/cupti_floor_ab.py --workload eager \
    --cycles 10 --phase-steps 20 --phases none,kernel,cb_all > "$OUT/attrs.txt" 2>&1
  CUPTI_FLOOR_ATTRS=pinned timeout "$(left 20)" python3 benchmarks/cupti_floor_ab.py --workload graph8 --cycles 8 \
    --phase-steps 20 --phases none,kernel,graph >> "$OUT/attrs.txt" 2>&1
fi
echo "done after ${SECONDS}s" >> "$OUT/device.txt"
