#!/bin/bash
# Issue 24, graph replays chosen on the host (shim/graphpick.c): one device call (~170 s).
# Writes under $OUT: device.txt, sampling.log and graphs.log (GPU tests), graph8.md and graph8.log
# (benchmarks/overhead.py, graph8 on the GPU alone: plain, every replay probed, --launches every:50
# with the host's choice and with the device gate alone), host.md (the same loop host-bound, if
# time is left). BUDGET: seconds for all of it (default 160).
set -u
OUT=${OUT:-/tmp/graph_pick_out}
BUDGET=${BUDGET:-160}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
left() { local n=$((BUDGET - SECONDS)); [ "$n" -gt "$1" ] && echo "$1" || echo "$((n > 1 ? n : 1))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt" 2>&1
date -u >> "$OUT/device.txt"
timeout "$(left 55)" python3 -m pytest -m gpu -x -q -s tests/gpu/test_gpu_graph_sampling.py > "$OUT/sampling.log" 2>&1
OVERHEAD_GPU_ONLY=1 timeout "$(left 70)" python3 benchmarks/overhead.py --no-warmup --workloads graph8 --iters 200 \
  --tools "plain,block_sched graphs,gmem_bytes graphs,block_sched graphs every:50,gmem_bytes graphs every:50,block_sched graphs every:50 device-gate,gmem_bytes graphs every:50 device-gate" \
  --out "$OUT/graph8.md" > "$OUT/graph8.log" 2>&1
timeout "$(left 40)" python3 -m pytest -m gpu -x -q tests/gpu/test_gpu_graphs.py -k "not reduce_overhead" > "$OUT/graphs.log" 2>&1
if [ $((BUDGET - SECONDS)) -gt 20 ]; then
  timeout "$(left 30)" python3 benchmarks/overhead.py --no-warmup --workloads graph8 --iters 500 \
    --tools "plain,block_sched graphs every:50" --out "$OUT/host.md" > "$OUT/host.log" 2>&1
fi
echo "done after ${SECONDS}s" >> "$OUT/device.txt"
