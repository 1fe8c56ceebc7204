#!/usr/bin/env bash
# Issue 24, session 9 (h-warp): one GPU call of at most ~150 s for the smaller warp-level probe code.
#   bash benchmarks/warp_probe_gpu.sh        # output printed, and written under $OUT (or /tmp)
# 1. benchmarks/probe_cost.py, 2 interleaved rounds, every variant plus `NAME (before)`: vadd instrumented by main
#    at 30a0ca5 (benchmarks/probe_cost_before/), timed in the same process: per-launch and per-replay (graph of 8)
#    GPU time before -> after, registers, and the checks (gmem_bytes bytes exact, hist samples exact, block_sched
#    one complete record and count per warp: "warps=2048 ok").
# 2. The GPU tests that check exact results under probing: gmem_bytes exact bytes (wmma, cp.async, Triton matmul),
#    sum/hist/tensorop totals against per-thread records (tensorop counts mma sites by a guarded accumulation), and block_sched/gmem_bytes on the Triton kernels
#    (outputs bitwise identical, vadd's bytes exact).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
echo "== probe_cost.py --rounds 2 --before benchmarks/probe_cost_before"
timeout 50 python benchmarks/probe_cost.py --rounds 2 --before benchmarks/probe_cost_before \
    --json "$out/probe_cost_s9.json" 2>&1 | tee "$out/probe_cost_s9.md" || echo "(probe_cost.py: rc $?)"
echo "== GPU tests (wall $((SECONDS - start)) s so far)"
timeout 90 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_gmem_exact.py tests/gpu/test_gpu_aggregation.py \
    "tests/gpu/test_gpu_tools.py::test_tool_on_triton_kernels[block_sched]" \
    "tests/gpu/test_gpu_tools.py::test_tool_on_triton_kernels[gmem_bytes]" \
    2>&1 | tail -25 | tee "$out/gpu_tests_s9.txt" || echo "(pytest: rc $?)"
echo "== wall $((SECONDS - start)) s"
