#!/usr/bin/env bash
# Issue 24, session 9 (h-resid): graph B's ~10% under --graphs, the third split. One GPU call, at most ~150 s.
#   bash benchmarks/graph_resid_gpu.sh [third|fourth]   # table printed, and written under $OUT (or /tmp)
# graph_residual.py --isolate third (ISOLATE_THIRD): graph B replayed alone (300 replays, GPU alone) beside one of
# what A's probing leaves in the process: A's instrumented module launched eagerly (--no-graphs), A's probed capture
# never instantiated, A's graph destroyed before B's replays, no plan (no twin), and, in a plain process, A's probed
# cubin (neutrino's code cache, made by the rows before) or A's PTX compiled by our ptxas call, loaded. Each row
# also gives the context's limits, flags and cache configuration read after B's replays. `fourth`
# (ISOLATE_FOURTH): what neutrino does inside A's capture, done by a plain process inside A's capture, one thing a
# row (graph_residual_child.py --during). Each variant's B median
# goes to stderr (and resid_third.log) as it ends: a timeout still leaves those. Then the probed cubins' resources.
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
export OVERHEAD_GPU_ONLY=1
cache="$(mktemp -d)"
export NEUTRINO_CACHE_DIR="$cache/neutrino" TRITON_CACHE_DIR="$cache/triton" TORCHINDUCTOR_CACHE_DIR="$cache/inductor"
split="${1:-third}"
start=$SECONDS
echo "== graph B beside what A's probing leaves (--isolate $split)"
timeout 135 python benchmarks/graph_residual.py --isolate "$split" --iters 300 --out "$out/resid_$split.md" \
    2> >(tee "$out/resid_$split.log" >&2) || echo "(graph_residual.py: rc $?)"
echo "== probed cubins' resources (cuobjdump -res-usage)"
tool="$(command -v cuobjdump || true)"
find "$cache/neutrino" -name probed.cubin 2>/dev/null | while read -r c; do
    grep -ho "\.entry [A-Za-z0-9_]*" "$(dirname "$c")/probed.ptx" | head -1
    [ -n "$tool" ] && "$tool" -res-usage "$c" 2>&1 | grep -A1 -i "function" | head -4
done | tee "$out/probed_res_usage.txt"
rm -rf "$cache"
echo "== wall $((SECONDS - start)) s"
