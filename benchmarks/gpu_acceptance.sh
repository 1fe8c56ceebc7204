#!/usr/bin/env bash
# The final GPU run of 2026-11-23 (device tool: carry .whl, see /work/.library/device/README.md):
# the overhead table (two parts, to fit a short lease) and pytest -m gpu; results under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; date
export TRITON_CACHE_DIR=/tmp/tc TORCHINDUCTOR_CACHE_DIR=/tmp/ic
timeout 95 python3 benchmarks/overhead.py --no-warmup --iters 60 --tools "plain,block_sched,gmem_bytes,tensorop,dmat every:50,block_sched 0:1" --workloads stream,attention,launch --out $OUT/overhead_a.md > $OUT/overhead_a.log 2>&1
tail -12 $OUT/overhead_a.md
timeout 125 python3 benchmarks/overhead.py --no-warmup --iters 40 --tools "plain,block_sched,gmem_bytes,tensorop" --workloads mlp --out $OUT/overhead_b.md > $OUT/overhead_b.log 2>&1
tail -8 $OUT/overhead_b.md
date
timeout 160 python3 -m pytest -m gpu -q -rA tests/gpu -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | tail -40
date
