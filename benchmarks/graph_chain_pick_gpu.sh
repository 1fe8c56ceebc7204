#!/usr/bin/env bash
# Issue 24, session 11 (h-chainpick): the chain (spec/runtime.md, "The chain", "Sampling") under `--launches`
# chosen on the host (the twin for the replays left out). One GPU call of at most ~150 s; output under $OUT (or /tmp).
#   bash benchmarks/graph_chain_pick_gpu.sh
# 1. tests/gpu/test_gpu_graph_chain.py::test_chain_every_100_of_10000_replays: 3 Triton kernels in a chain,
#    10,000 replays, every:100: 100 frames per node numbered 0, 100, ..., 9,900, outputs = plain, 9,900 twin launches.
# 2. overhead.py, GPU alone, graph8: plain; block_sched every:50 with the append node (today's default) and with
#    the chain (the selected replays' cost: the chain's, the others the twin's).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
cache="$(mktemp -d)"
export NEUTRINO_CACHE_DIR="$cache/neutrino" TRITON_CACHE_DIR="$cache/triton" TORCHINDUCTOR_CACHE_DIR="$cache/inductor"
echo "== GPU test: the chain under every:100"
timeout 80 python -m pytest -q -s -p no:cacheprovider "tests/gpu/test_gpu_graph_chain.py::test_chain_every_100_of_10000_replays" 2>&1 \
    | tail -30 | tee "$out/chain_pick_gpu_test.txt"
echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)"
export OVERHEAD_GPU_ONLY=1
left=$((148 - (SECONDS - start)))
if [ "$left" -gt 25 ]; then
    echo "== graph8, GPU alone: plain, every:50 append node, every:50 chain (µs per replay, ratio to plain)"
    timeout "$left" python benchmarks/overhead.py --workloads graph8 --iters 200 --no-warmup \
        --tools "plain,block_sched graphs every:50 no-timeline,block_sched graphs every:50 no-timeline chain" \
        --out "$out/chain_pick_graph8.md" 2> >(tee "$out/chain_pick_graph8.log" >&2) || echo "(overhead.py: rc $?)"
else
    echo "== graph8: skipped (no time left)"
fi
rm -rf "$cache"
echo "== wall $((SECONDS - start)) s"
