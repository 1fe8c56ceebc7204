#!/usr/bin/env bash
# Issue 24, session 12 (h-drops): the chain dropped replays the append node wrote. One GPU call of at most ~150 s;
# output printed and written under $OUT (or /tmp).
#   bash benchmarks/graph_chain_drops_gpu.sh
# 1. tests/gpu/test_gpu_graphs.py::test_manual_capture_gmem_bytes_exact_per_replay (the chain the default: 2 Triton
#    kernels, 1,000 replays back to back, gmem_bytes; before: 1,753 of 2,000 written on an H200) and
#    tests/gpu/test_gpu_graph_chain.py's first test (3 kernels, block_sched, a ring of 512 < 1,000 replays).
# 2. The same manual program with NEUTRINO_GRAPH_RING_SLOTS=512 (K = 512, half the replays), back to back, under
#    NEUTRINO_FAST_PROFILE=1: whether the poller keeps up with a program that launches as fast as it can. Its
#    summary line ("N of 2000 replay result(s) written") and the chains' line ("P passes, S polls passed over
#    as idle, at most M slots taken from one ring in one pass": M near 512 means the ring nearly filled).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
cache="$(mktemp -d)"
export NEUTRINO_CACHE_DIR="$cache/neutrino" TRITON_CACHE_DIR="$cache/triton"
echo "== 1. GPU tests: gmem_bytes manual capture (chain), the chain of 3"
NEUTRINO_FAST_PROFILE=1 timeout 100 python -m pytest -q -s -p no:cacheprovider \
    "tests/gpu/test_gpu_graphs.py::test_manual_capture_gmem_bytes_exact_per_replay" \
    "tests/gpu/test_gpu_graph_chain.py::test_chain_of_three_triton_kernels_every_replay" 2>&1 \
    | grep -E "passed|failed|Error|assert|replay result|graph chains|copied out|\[chain\]|\[manual" \
    | cut -c1-400 | tail -30 | tee "$out/drops_gpu_tests.txt"
echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)"
left=$((145 - (SECONDS - start)))
if [ "$left" -gt 20 ]; then
    echo "== 2. manual, gmem_bytes, K = 512, 1,000 replays back to back"
    NEUTRINO_GRAPH_RING_SLOTS=512 NEUTRINO_FAST_PROFILE=1 timeout "$left" python -m neutrino.runtime.start.launcher \
        -p gmem_bytes --tracedir "$cache/t512" --graphs -- \
        python tests/gpu/workloads/w_graphs.py manual "$cache/p512.npz" 1000 2>&1 \
        | grep -E "replay result|graph chains|copied out|launch\(es\)|Error" | tee "$out/drops_gpu_k512.txt"
    find "$cache/t512" -name event.log -exec grep -h '"event":"graph_chain' {} + 2>/dev/null | cut -c1-300 | head -3
else
    echo "== 2. skipped (no time left)"
fi
rm -rf "$cache"
echo "== wall $((SECONDS - start)) s"
