#!/usr/bin/env bash
# Graph-probe cost before and after a change, on one GPU in one run (issue 24):
#
#   bash benchmarks/graph_cost.sh BEFORE_TREE AFTER_TREE [ROUNDS] [eager]
#
# For each tree (a checkout with benchmarks/overhead.py), alternating, ROUNDS times: the graph of 8
# tiny Triton kernels (`graph8`) timed on the GPU alone (OVERHEAD_GPU_ONLY=1: per-replay CUDA-event
# medians), plain, block_sched and gmem_bytes on every replay and with `--launches every:50`, all in
# one overhead.py run (ratios compare like with like). With `eager`: the eager tiny-kernel loops
# too (`launch`: host time per launch; `graph_eager`: the same kernels launched eagerly, GPU alone),
# plain vs block_sched. NEUTRINO_FAST_PROFILE=1 makes the graph runs print the poller's driver
# calls per frame (below each table, the after tree only).
set -u
before=$1 after=$2 rounds=${3:-1} eager=${4:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in $(seq "$rounds"); do
  for tree in "$before" "$after"; do
    echo "== round $r: $tree (graph8, GPU alone)"
    (cd "$tree" && PYTHONPATH="$PWD:${PYTHONPATH:-}" OVERHEAD_GPU_ONLY=1 NEUTRINO_FAST_PROFILE=1 \
      python benchmarks/overhead.py --no-warmup --workloads graph8 --iters 300 \
      --tools "plain,block_sched graphs,gmem_bytes graphs,block_sched graphs every:50,gmem_bytes graphs every:50")
  done
done
if [ "$eager" = eager ]; then
  for tree in "$before" "$after"; do
    echo "== $tree (eager tiny kernels: launch = host time per launch; graph_eager = GPU alone)"
    (cd "$tree" && PYTHONPATH="$PWD:${PYTHONPATH:-}" python benchmarks/overhead.py --no-warmup --workloads launch \
      --iters 300 --tools "plain,block_sched")
    (cd "$tree" && PYTHONPATH="$PWD:${PYTHONPATH:-}" OVERHEAD_GPU_ONLY=1 python benchmarks/overhead.py --no-warmup \
      --workloads graph_eager --iters 300 --tools "plain,block_sched")
  done
fi
