#!/usr/bin/env bash
# Host time per launch of an empty kernel (benchmarks/bench_launch.cu, CUDA runtime, C: no Python),
# plain and under each configuration, interleaved over rounds. Device tool, carry .whl.
# With NEUTRINO_FAST_PROFILE=1 each probed run also prints where its host time goes, step by step.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NEUTRINO_CACHE_DIR=/tmp/nc
nvcc -O2 -arch=sm_90 -gencode arch=compute_90,code=compute_90 -o /tmp/bench_launch benchmarks/bench_launch.cu -cudart shared || exit 1
N="python3 -m neutrino.runtime.start.launcher -q --tracedir /tmp/lh"
declare -A CFG=([plain]="" ["block_sched --launches 0:1 (not selected)"]="-p block_sched --launches 0:1"
                [block_sched]="-p block_sched" [gmem_bytes]="-p gmem_bytes")
for r in 1 2 3; do
  for name in plain "block_sched --launches 0:1 (not selected)" block_sched gmem_bytes; do
    args=${CFG[$name]}
    if [ -z "$args" ]; then v=$(taskset -c 2-5 /tmp/bench_launch 20000 5); else v=$(taskset -c 2-5 $N $args -- /tmp/bench_launch 20000 5 2>&1 | grep -E "ns_per_launch|fast path, all|writer,"); fi
    echo "$name: $v"; rm -rf /tmp/lh
  done
done
