#!/usr/bin/env bash
# The GPU acceptance run of issue 9 (device tool: carry .whl, see /work/.library/device/README.md).
# Part "bench": the overhead table (configurations interleaved over two rounds) and the MLP step.
# Part "tests": the runtime's GPU tests. Results under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc TORCHINDUCTOR_CACHE_DIR=/tmp/ic
nvidia-smi -L; date
case "${1:-bench}" in
bench)
  timeout 345 python3 benchmarks/overhead.py --no-warmup --rounds 3 --cpus 2-5 --iters 200 \
    --tools "plain,block_sched,gmem_bytes,tensorop,dmat every:50,block_sched 0:1,block_sched every:2,gmem_bytes every:2" --workloads stream,attention,launch \
    --out $OUT/overhead_a.md > $OUT/overhead_a.log 2>&1
  cat $OUT/overhead_a.md | head -40
  timeout 200 python3 benchmarks/overhead.py --cpus 2-5 --iters 30 --tools "plain,block_sched,gmem_bytes,tensorop,dmat every:50" \
    --workloads mlp --out $OUT/overhead_b.md > $OUT/overhead_b.log 2>&1
  head -12 $OUT/overhead_b.md ;;
tests)
  timeout 500 python3 -m pytest -m gpu -q -rA ${2:-tests/gpu} -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
  grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | tail -40 ;;
esac
date
