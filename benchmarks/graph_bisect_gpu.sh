#!/usr/bin/env bash
# Issue 24, session 11 (h-bisect): graph B's residual under every:50 (~1.08 of plain B), bisected inside neutrino.
# One GPU call, at most ~150 s; the table printed and written under $OUT (or /tmp), rewritten after every row.
#   bash benchmarks/graph_bisect_gpu.sh
# graph_residual.py --isolate bisect: graph B alone (300 replays, GPU alone, CUDA-event medians) under
# block_sched --graphs --launches every:50 --no-timeline, graph A probed beside it, with the steps of neutrino's
# capture of A switched off or moved before the capture (NEUTRINO_MEASURE_CAPTURE, capture.py MEASURE_KNOBS; and
# NEUTRINO_GRAPH_PICK=0, NEUTRINO_GRAPH_POLL_US=0): the reference (plain B), the baseline, all steps off, nothing of
# ours in the capture (`unprobed`), each step alone; then, if all steps drop B and no single one does, the smallest
# set that drops it (delta debugging, until the time budget); the reference again and --no-graphs. Each row's B
# median also goes to stderr (bisect.log) as it ends: a timeout keeps those.
# A second form, for the follow-up call once the bisect names steps whose switch keeps every result (pool,
# warm-append, late-stream, ordinary-edges, and no-relax with the first two): graph8 itself (overhead.py, GPU alone,
# the issue's target: block_sched every:50 <= 1.05x of plain), plain against every:50 without and with them:
#   bash benchmarks/graph_bisect_gpu.sh graph8 pool,warm-append
set -u
cd "$(dirname "$0")/.."
if [ "${1:-}" = graph8 ]; then
    out="${OUT:-/tmp}"
    export OVERHEAD_GPU_ONLY=1
    start=$SECONDS
    for words in "" "${2:?which words}"; do
        echo "== graph8, GPU alone: plain against block_sched every:50, NEUTRINO_MEASURE_CAPTURE=${words:-(unset)}"
        NEUTRINO_MEASURE_CAPTURE="$words" timeout 70 python benchmarks/overhead.py --workloads graph8 --iters 300 \
            --rounds 2 --tools "plain,block_sched graphs every:50 no-timeline" --out "$out/graph8_${words:-unset}.md" \
            2> >(tee "$out/graph8_${words:-unset}.log" >&2) || echo "(overhead.py: rc $?)"
    done
    echo "== wall $((SECONDS - start)) s"
    exit 0
fi
out="${OUT:-/tmp}"
export OVERHEAD_GPU_ONLY=1
cache="$(mktemp -d)"
export NEUTRINO_CACHE_DIR="$cache/neutrino" TRITON_CACHE_DIR="$cache/triton" TORCHINDUCTOR_CACHE_DIR="$cache/inductor"
start=$SECONDS
echo "== $(git rev-parse --short HEAD 2>/dev/null) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
echo "== graph B under every:50, neutrino's capture steps switched off (--isolate bisect)"
timeout 145 python benchmarks/graph_residual.py --isolate bisect --iters 300 --budget-s 135 --out "$out/bisect.md" \
    2> >(tee "$out/bisect.log" >&2) || echo "(graph_residual.py: rc $?)"
rm -rf "$cache"
echo "== wall $((SECONDS - start)) s"
