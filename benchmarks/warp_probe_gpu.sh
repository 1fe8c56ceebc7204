#!/usr/bin/env bash
# Issue 24, session 9 (h-warp): one GPU call of at most ~150 s for the smaller warp-level probe code.
#   bash benchmarks/warp_probe_gpu.sh        # output printed, and written under $OUT (or /tmp)
# 1. benchmarks/probe_cost.py, 3 interleaved rounds, the variants below and `NAME (before)`: vadd instrumented by
#    main at 30a0ca5 (benchmarks/probe_cost_before/), timed in the same process: per-launch and per-replay (graph of
#    8) GPU time before -> after, registers, and the checks: gmem_bytes' bytes exact (and 0 gated), the hist's
#    samples exact, block_sched one complete record and count per warp ("warps=2048 ok": 1,024 counts + 1,024 records).
# 2. The GPU tests that check exact results under probing, most direct first (-v: each PASSED line as it ends, so a
#    timeout still says which passed): gmem_bytes exact bytes (wmma, cp.async, Triton matmul), sum/hist/tensorop
#    totals against per-thread records (tensorop counts mma sites by a site-guarded accumulation, now a select),
#    block_sched and gmem_bytes on the Triton kernels (outputs bitwise identical, vadd's bytes exact).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
echo "== probe_cost.py --rounds 3 --before benchmarks/probe_cost_before"
timeout 45 python benchmarks/probe_cost.py --rounds 3 --before benchmarks/probe_cost_before \
    --only "+param,block_sched,block_sched (before),block_sched gated,gmem_bytes,gmem_bytes (before),gmem_bytes gated,hist match.any,hist (before)" \
    --json "$out/probe_cost_s9.json" 2>&1 | tee "$out/probe_cost_s9.md" || echo "(probe_cost.py: rc $?)"
echo "== GPU tests (wall $((SECONDS - start)) s so far)"
timeout 95 python -m pytest -v -x -p no:cacheprovider tests/gpu/test_gpu_gmem_exact.py tests/gpu/test_gpu_aggregation.py \
    "tests/gpu/test_gpu_tools.py::test_tool_on_triton_kernels[block_sched]" \
    "tests/gpu/test_gpu_tools.py::test_tool_on_triton_kernels[gmem_bytes]" \
    2>&1 | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|error|Error|assert" | tail -40 | tee "$out/gpu_tests_s9.txt"
echo "(pytest: rc ${PIPESTATUS[0]})"
echo "== wall $((SECONDS - start)) s"
