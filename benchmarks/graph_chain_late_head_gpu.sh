#!/usr/bin/env bash
# Issue 24, session 11 (h-headwait): one GPU call (~45 s, at most 145 s) for the engine's late_head option.
#   bash benchmarks/graph_chain_late_head_gpu.sh     # output printed, and written under $OUT (or /tmp)
# benchmarks/graph_chain.py on a graph of 8 Triton vadd kernels (256 blocks x 4 warps), block_sched on every replay,
# GPU alone: plain, the probe code only (gated pointer, the 1.15x target's floor), the untagged pointer, the engine's
# chain variant (instrument(..., graph_chain=True)) and the same with late_head=True (the head's words consumed at
# the exit: every warp loads its data without waiting for the head; benchmarks/chain_head_sass.py shows where),
# interleaved, 15 rounds after 1 not counted, each probed row checked exactly after every round; then the drained
# (16-slot ring, a host thread draining 1,000 replays) and full-ring (8 slots, 40 replays) runs of each chain kernel.
# Read: "chain from the engine, late_head" against "chain from the engine" (session 11: 1.20x on an H200) and
# "probe code only" (~1.16x); every check must say ok.
ONLY="from the engine,probe code only,untagged pointer" NAME=graph_chain_late_head \
    exec bash "$(dirname "$0")/graph_chain_engine_gpu.sh"
