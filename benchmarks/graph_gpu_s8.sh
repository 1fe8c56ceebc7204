#!/usr/bin/env bash
# Issue 24, session 8 (h-graphs4): one GPU call of at most ~150 s, two tables (docs/overhead.md, "Session 8").
#   bash benchmarks/graph_gpu_s8.sh            # tables printed, and written under $OUT (or /tmp)
# 1. graph8 and the decode graph on the GPU alone (OVERHEAD_GPU_ONLY=1), plain against block_sched with every
#    replay probed and with --launches every:50, timeline off: the probe's prologue with the block's sizes
#    constant (.reqntid) and the per-plan order lock (one stream: nothing of ours added) against the last
#    session's 1.74x / 1.35x (graph8) and 1.18x (decode, no timeline). Each configuration's figures go to stderr
#    as it ends (the table only at the end: a timeout leaves those lines).
# 2. graph_residual.py --isolate next: graph B replayed alone beside what --graphs makes for graph A, and each
#    kind of it made without neutrino (benchmarks/graph_residual.py, ISOLATE_NEXT).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
export OVERHEAD_GPU_ONLY=1
start=$SECONDS
echo "== graph8 + decode graph, GPU alone (µs per replay, ratio to plain)"
timeout 95 python benchmarks/overhead.py --workloads graph8,graph_decode --iters 200 \
    --tools "plain,block_sched graphs no-timeline,block_sched graphs every:50 no-timeline" \
    --out "$out/s8_graphs.md" || echo "(overhead.py: rc $?)"
echo "== graph B beside graph A's state (--isolate next)"
timeout 55 python benchmarks/graph_residual.py --isolate next --iters 100 --out "$out/s8_isolate_next.md" \
    || echo "(graph_residual.py: rc $?)"
echo "== wall $((SECONDS - start)) s"
