#!/usr/bin/env bash
# Diagnosis: where a probed launch's host time goes (NEUTRINO_FAST_PROFILE=1). Device tool, carry .whl.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc TORCHINDUCTOR_CACHE_DIR=/tmp/ic NEUTRINO_CACHE_DIR=/tmp/nc
nvcc -O2 -arch=sm_90 -gencode arch=compute_90,code=compute_90 -o /tmp/bench_launch benchmarks/bench_launch.cu -cudart shared || exit 1
N="python3 -m neutrino.runtime.launcher -q"
run() {  # name, env..., command
  local name=$1; shift
  echo "== $name"
  timeout 120 env "$@" 2>&1 | grep -E "ns_per_launch|OVERHEAD_RESULT|fast path, all|writer,|Error|error" | cut -c1-400
}
for r in ${ROUNDS:-1}; do
run "C plain" /tmp/bench_launch 20000 5
run "C block_sched" NEUTRINO_FAST_PROFILE=1 $N -p block_sched --tracedir /tmp/t1 -- /tmp/bench_launch 20000 5
run "C gmem_bytes" NEUTRINO_FAST_PROFILE=1 $N -p gmem_bytes --tracedir /tmp/t2 -- /tmp/bench_launch 20000 5
run "C block_sched noprof" $N -p block_sched --tracedir /tmp/t5 -- /tmp/bench_launch 20000 5
run "py plain" python3 benchmarks/overhead_workloads.py --iters 200 --only launch,attention,stream
run "py block_sched" NEUTRINO_FAST_PROFILE=1 $N -p block_sched --tracedir /tmp/t6 -- python3 benchmarks/overhead_workloads.py --iters 200 --only launch,attention,stream
run "py gmem_bytes" NEUTRINO_FAST_PROFILE=1 $N -p gmem_bytes --tracedir /tmp/t7 -- python3 benchmarks/overhead_workloads.py --iters 200 --only launch,attention,stream
rm -rf /tmp/t?
done
