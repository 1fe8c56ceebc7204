#!/usr/bin/env bash
# Issue 24, session 9 (h-warp): one GPU call of at most ~145 s for the smaller warp-level probe code.
#   bash benchmarks/warp_probe_gpu.sh        # output printed, and written under $OUT (or /tmp)
# 1. benchmarks/probe_cost.py on vadd at graph8's shape (256 blocks) and at the stream workload's (16,384 blocks),
#    2 interleaved rounds, each tool against `NAME (before)`: vadd as main at 30a0ca5 instrumented it
#    (benchmarks/probe_cost_before/), timed in the same process: GPU µs per eager launch and per replay of a graph of
#    8, before -> after, registers; the checks: gmem_bytes' bytes exact, the hist's samples exact, block_sched one
#    complete record and count per warp ("counts+records=2048 ok" at 256 blocks: 1,024 warps). `gmem_bytes 128 rows`: the warps' atomics
#    spread over 128 rows instead of 32 (what more rows would buy on 16,384 blocks; bytes summed over all rows).
# 2. overhead.py's eager stream and attention loops on the GPU alone, plain / block_sched / gmem_bytes (main at
#    30a0ca5 measured 51.3 / 56.1 / 60.3 and 32.7 / 36.0 / 35.5 µs on an H200); "same outputs" must say yes.
# The exact-result GPU tests (tests/gpu/test_gpu_gmem_exact.py, test_gpu_aggregation.py, test_gpu_tools.py's Triton
# kernels) do not fit beside these in 150 s: a separate call, `python -m pytest -v tests/gpu/test_gpu_gmem_exact.py
# tests/gpu/test_gpu_aggregation.py` (and test_gpu_tools.py -k "triton and (block_sched or gmem_bytes)").
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
only="block_sched,block_sched (before),gmem_bytes,gmem_bytes (before),hist match.any,hist (before)"
echo "== probe_cost.py, vadd 256 blocks (graph8's kernel)"
timeout 22 python benchmarks/probe_cost.py --rounds 2 --before benchmarks/probe_cost_before --only "$only" \
    --json "$out/probe_cost_s9_256.json" 2>&1 | tee "$out/probe_cost_s9_256.md"
echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)"
echo "== probe_cost.py, vadd 16384 blocks (the stream workload's shape)"
timeout 22 python benchmarks/probe_cost.py --grid 16384 --rounds 2 --launches 100 --replays 50 \
    --before benchmarks/probe_cost_before --only "$only,gmem_bytes 128 rows" \
    --json "$out/probe_cost_s9_16k.json" 2>&1 | tee "$out/probe_cost_s9_16k.md"
echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)"
echo "== overhead.py stream, attention: GPU alone"
OVERHEAD_GPU_ONLY=1 timeout 100 python benchmarks/overhead.py --no-warmup --rounds 2 --iters 200 \
    --tools "plain,block_sched,gmem_bytes" --workloads stream,attention --out "$out/overhead_gpu_s9.md" 2>&1 | tail -30
echo "(rc ${PIPESTATUS[0]})"
cat "$out/overhead_gpu_s9.md" 2>/dev/null
echo "== wall $((SECONDS - start)) s"
