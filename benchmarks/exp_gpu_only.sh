#!/usr/bin/env bash
# Diagnosis (issue 9): the probed kernels' own GPU time (OVERHEAD_GPU_ONLY) and the launch path's host time.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc TORCHINDUCTOR_CACHE_DIR=/tmp/ic NEUTRINO_CACHE_DIR=/tmp/nc
N="python3 -m neutrino.runtime.launcher -q"
W="python3 benchmarks/overhead_workloads.py --iters 200 --only attention,stream"
run() { local name=$1; shift; echo "== $name"; timeout 150 env "$@" 2>&1 | grep -E "OVERHEAD_RESULT|fast path, all|writer,|rror" | cut -c1-400; }
run "gpu-only plain" OVERHEAD_GPU_ONLY=1 $W
run "gpu-only block_sched" OVERHEAD_GPU_ONLY=1 $N -p block_sched --tracedir /tmp/g1 -- $W
run "gpu-only gmem_bytes" OVERHEAD_GPU_ONLY=1 $N -p gmem_bytes --tracedir /tmp/g2 -- $W
run "loop plain" $W
run "loop block_sched" NEUTRINO_FAST_PROFILE=1 $N -p block_sched --tracedir /tmp/g3 -- $W
find /tmp/tc -name "*.ptx" | while read f; do cp "$f" $OUT/ 2>/dev/null; done
ls /tmp/g1/*/ 2>/dev/null | head; rm -rf /tmp/g?
