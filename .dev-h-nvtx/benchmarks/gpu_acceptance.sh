#!/usr/bin/env bash
# The GPU acceptance run of issue 9 (device tool: carry .whl, see /work/.library/device/README.md).
# Parts (one device call each, under its 10-minute limit): bench, mlp, graph, tests. Results under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc TORCHINDUCTOR_CACHE_DIR=/tmp/ic
nvidia-smi -L; date
case "${1:-bench}" in
bench)  # ~6 min: stream, attention, launch; 3 interleaved rounds, every process on cores 2-5
  timeout 345 python3 benchmarks/overhead.py --no-warmup --rounds 3 --cpus 2-5 --iters 200 \
    --tools "plain,block_sched,gmem_bytes,tensorop,dmat every:50,block_sched 0:1,block_sched every:2,gmem_bytes every:2" --workloads stream,attention,launch \
    --out $OUT/overhead_a.md > $OUT/overhead_a.log 2>&1
  cat $OUT/overhead_a.md | head -40 ;;
mlp)  # ~5 min: the torch.compile training step
  timeout 540 python3 benchmarks/overhead.py --cpus 2-5 --iters 30 --tools "plain,block_sched,gmem_bytes,tensorop,dmat every:50" \
    --workloads mlp --out $OUT/overhead_b.md > $OUT/overhead_b.log 2>&1
  head -12 $OUT/overhead_b.md ;;
graph)  # graph replays, every replay probed (issue 12)
  timeout 540 python3 benchmarks/overhead.py --cpus 2-5 --rounds 2 --iters 1000 --tools "plain,block_sched graphs" \
    --workloads graph,graph_16m,graph_decode --out $OUT/overhead_g.md > $OUT/overhead_g.log 2>&1
  head -12 $OUT/overhead_g.md ;;
tests)  # ~6 min for tests/gpu/test_gpu_{runtime,aggregation,gmem_exact,calls}.py; pass others as $2
  timeout 560 python3 -m pytest -m gpu -rA --timeout 170 -p no:cacheprovider ${2:-tests/gpu/test_gpu_runtime.py tests/gpu/test_gpu_aggregation.py tests/gpu/test_gpu_gmem_exact.py tests/gpu/test_gpu_calls.py} > $OUT/gpu_tests.log 2>&1
  grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | tail -40 ;;
esac
date
