#!/usr/bin/env bash
# Issue 24, session 10 (h-chain2): one GPU call (~40 s, at most 145 s) for the engine's graph_chain variant.
#   bash benchmarks/graph_chain_engine_gpu.sh     # output printed, and written under $OUT (or /tmp)
# benchmarks/graph_chain.py on a graph of 8 Triton vadd kernels, block_sched on every replay, GPU alone: plain, the
# probe code only, main's append node, the hand-made candidate (h-chain's prototype) and the same scheme as the
# engine makes it (instrument(..., graph_chain=True): the kernel the runtime will run), interleaved, 15 rounds after
# 1 not counted, each probed row checked exactly after every round; then the drained (16-slot ring, a host thread
# draining 1,000 replays) and full-ring (8 slots, 40 replays: written 8, dropped 32) runs of each chain variant.
# The engine's row should match the candidate's time (same code but for register names and branch shapes) and every
# check should say ok. ONLY (graph_chain.py --only) and NAME (of the output files) choose other rows: see
# benchmarks/graph_chain_late_head_gpu.sh.
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
echo "== ptxas sm_90a"
timeout 30 python benchmarks/graph_chain.py --ptx-only "$out/graph_chain_ptx" 2>&1 | grep -E "^(block_sched|chain_[a-z_]+):"
only=${ONLY:-"from the engine,count in the head (candidate),probe code only,main's append"}
left=$((145 - (SECONDS - start)))
echo "== graph_chain.py on the GPU"
timeout "$left" python benchmarks/graph_chain.py --rounds 15 \
    --only "$only" \
    --json "$out/${NAME:-graph_chain_engine}.json" 2>&1 | tee "$out/${NAME:-graph_chain_engine}.md"
echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)"
