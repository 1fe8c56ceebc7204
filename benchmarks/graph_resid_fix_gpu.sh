#!/usr/bin/env bash
# Issue 24, session 9 (h-resid): graph B's residual with the fix (our stream made before a capture begins, the
# probed nodes' memory zeroed after it ends). One GPU call, at most ~100 s; tables under $OUT (or /tmp).
#   bash benchmarks/graph_resid_fix_gpu.sh
# 1. graph_residual.py --isolate fifth (ISOLATE_FIFTH): which step of our stream inside a capture slows the later
#    replays (made inside; made before and used inside; made before and only waited for inside), and neutrino with
#    the fix: B alone against plain B alone (was 1.087-1.098), A and B alternating against plain (A / plain A
#    was 1.136). Each row's B median goes to stderr (resid_fifth.log) as it ends.
# 2. graph8 on the GPU alone, plain against block_sched --launches every:50 (timeline off): was 1.11x (target 1.05x);
#    --no-warmup: step 1 filled the Triton and neutrino caches (same kernel).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
export OVERHEAD_GPU_ONLY=1
cache="$(mktemp -d)"
export NEUTRINO_CACHE_DIR="$cache/neutrino" TRITON_CACHE_DIR="$cache/triton" TORCHINDUCTOR_CACHE_DIR="$cache/inductor"
start=$SECONDS
echo "== graph B with the fix, and our stream's steps inside a capture (--isolate fifth)"
timeout 62 python benchmarks/graph_residual.py --isolate fifth --iters 300 --out "$out/resid_fifth.md" \
    2> >(tee "$out/resid_fifth.log" >&2) || echo "(graph_residual.py: rc $?)"
echo "== graph8, GPU alone: plain against block_sched every:50 (µs per replay, ratio to plain)"
timeout 33 python benchmarks/overhead.py --workloads graph8 --iters 200 --no-warmup \
    --tools "plain,block_sched graphs every:50 no-timeline" --out "$out/graph8_every50.md" \
    2> >(tee "$out/graph8_every50.log" >&2) || echo "(overhead.py: rc $?)"
rm -rf "$cache"
echo "== wall $((SECONDS - start)) s"
