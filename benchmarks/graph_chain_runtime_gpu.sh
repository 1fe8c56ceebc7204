#!/usr/bin/env bash
# Issue 24, session 11 (h-native): the chain (spec/runtime.md, "The chain") on the real runtime, shim/graphs.c's
# poller and the native writer. One GPU call of at most ~150 s; output printed and written under $OUT (or /tmp).
#   bash benchmarks/graph_chain_runtime_gpu.sh
# 1. tests/gpu/test_gpu_graph_chain.py: a torch.cuda.graph of 3 Triton kernels in a chain, 1,000 replays,
#    NEUTRINO_GRAPH_CHAIN=1, block_sched: a frame per node per replay, every warp's record, outputs = plain.
# 2. overhead.py, GPU alone (OVERHEAD_GPU_ONLY=1), graph8 (8 tiny Triton kernels, every replay probed, timeline
#    off): plain; block_sched with the append node (today's default); block_sched with the chain. Prototype (H200,
#    session 10): plain 15.5, append 22.6, chain 18.7 µs per replay. Then graph_decode the same way if time is left.
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
cache="$(mktemp -d)"
export NEUTRINO_CACHE_DIR="$cache/neutrino" TRITON_CACHE_DIR="$cache/triton" TORCHINDUCTOR_CACHE_DIR="$cache/inductor"
echo "== GPU test: the chain with the native writer"
# (NEUTRINO_FAST_PROFILE=1: the probed run's stderr, printed by the test, says how many driver calls the poller's
# copy-out made for how many frames)
NEUTRINO_FAST_PROFILE=1 timeout 70 python -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_graph_chain.py 2>&1 \
    | tail -30 \
    | tee "$out/chain_gpu_test.txt"
echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)"
export OVERHEAD_GPU_ONLY=1
tools="plain,block_sched graphs no-timeline,block_sched graphs no-timeline chain"
for w in graph8 graph_decode; do
    left=$((148 - (SECONDS - start)))
    [ "$left" -gt 25 ] || { echo "== $w: skipped (no time left)"; continue; }
    echo "== $w, GPU alone: plain, append node, chain (µs per replay, ratio to plain; same outputs)"
    timeout "$left" python benchmarks/overhead.py --workloads "$w" --iters 200 --no-warmup --tools "$tools" \
        --out "$out/chain_$w.md" 2> >(tee "$out/chain_$w.log" >&2) || echo "(overhead.py $w: rc $?)"
done
rm -rf "$cache"
echo "== wall $((SECONDS - start)) s"
