#!/usr/bin/env bash
# Issue 24, session 10 (h-chain): one GPU call of at most ~150 s for the append-free graph data path prototype.
#   bash benchmarks/graph_chain_gpu.sh        # output printed, and written under $OUT (or /tmp)
# benchmarks/graph_chain.py: a graph of 8 Triton vadd kernels (256 blocks x 4 warps), block_sched on every replay,
# GPU alone, per-replay CUDA-event medians of 200 replays, 15 interleaved rounds after 1 not counted, every probed row
# checked exactly after every round; then 1,000 replays of the candidate with a 16-slot ring drained by a host
# thread while they run, and 40 with an 8-slot ring nobody drains (written 8, dropped 32 per node).
# Rows: plain; the probe code only (gated pointer, no append); untagged pointer (no gate load); main's append node
# (session 8's kernel after all 8, as append_node_cost.py builds it); the chain scheme and its variants; the host
# choosing the slot with cuGraphExecKernelNodeSetParams before each launch (GPU µs and host µs per replay).
# First the offline part (ptxas for sm_90a) so a failure there is told apart. A row whose kernel faults the context
# is named by the script (FAULT-ROW) and the run repeated without it (at most twice).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
echo "== ptxas sm_90a, every kernel"
timeout 30 python benchmarks/graph_chain.py --ptx-only "$out/graph_chain_ptx" 2>&1 | tee "$out/graph_chain_ptx.txt"
echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)"
skip=""
for attempt in 1 2 3; do
    left=$((145 - (SECONDS - start)))
    [ "$left" -gt 20 ] || break
    echo "== graph_chain.py on the GPU (attempt $attempt${skip:+, without: $skip})"
    timeout "$left" python benchmarks/graph_chain.py --rounds 15 --skip "$skip" --json "$out/graph_chain.json" \
        2>&1 | tee "$out/graph_chain_$attempt.md"
    rc=${PIPESTATUS[0]}
    echo "(rc $rc; wall $((SECONDS - start)) s)"
    [ "$rc" -eq 3 ] || break
    row=$(sed -n 's/^FAULT-ROW: //p' "$out/graph_chain_$attempt.md" | head -1)
    [ -n "$row" ] || break
    skip="${skip:+$skip|}$row"
done
