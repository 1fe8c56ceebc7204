#!/usr/bin/env bash
# Issue 24, session 10 (h-lean): the lean append kernel and its launch-order edge, end to end, before and
# after, in one GPU call of at most ~145 s:
#
#   bash benchmarks/graph_lean_gpu.sh BEFORE_TREE AFTER_TREE [off|on|decode]
#
# BEFORE_TREE, AFTER_TREE: two checkouts (main and the branch), each with benchmarks/overhead.py.
# For each tree, one overhead.py run (its own plain run, so its ratios compare like with like): graph8 (a
# graph of 8 tiny Triton kernels) on the GPU alone (OVERHEAD_GPU_ONLY=1: per-replay CUDA-event medians of
# 300 replays), plain, then block_sched under --graphs on every replay and with `--launches every:50`,
# timeline off, then the same two with the timeline on (the most telling rows first: a tree cut by its
# time limit still has them in graph_lean_<side>.log, one JSON line per configuration as it ends).
# Then, the after tree only, one short probed run whose event log says which edge the append node got on
# this GPU: `graph_append` with `launch_order` a node id (the launch-order edge) or null (ordinary edges),
# and any `graph_edge_ordinary` (an instantiation refused). `off` / `on`: the timeline-off / timeline-on
# rows only (with plain: two calls of ~45 s per tree each, should all five rows not fit in 64 s per tree).
# `decode`: the workload is graph_decode (a torch.compile reduce-overhead decode step), timeline off: a
# call of its own (its first process compiles with Inductor).
# Tables and logs under $OUT (or /tmp): graph_lean_before.md, graph_lean_after.md, *.log, edge.txt.
set -u
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd) mode=${3:-}
out="${OUT:-/tmp}"
cache="$(mktemp -d)"
# one set of caches for both trees: the Triton and Inductor builds are the same, and the probed code too
# (the branch changes no instrumented output; the shim is cached by its source's hash)
export OVERHEAD_GPU_ONLY=1 NEUTRINO_CACHE_DIR="$cache/neutrino" TRITON_CACHE_DIR="$cache/triton" \
    TORCHINDUCTOR_CACHE_DIR="$cache/inductor"
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
workload=graph8 limit=64 iters=300
off="block_sched graphs no-timeline,block_sched graphs every:50 no-timeline"
on="block_sched graphs,block_sched graphs every:50"
case "$mode" in
  "") tools="plain,$off,$on" ;;
  off) tools="plain,$off" ;;
  on) tools="plain,$on" ;;
  decode) workload=graph_decode iters=200 tools="plain,$off" ;;
  *) echo "graph_lean_gpu.sh: the third argument is off, on or decode, not '$mode'" >&2; exit 2 ;;
esac
for side in before after; do
  tree=$before
  [ "$side" = after ] && tree=$after
  echo "== $side: $tree ($workload, GPU alone; µs per replay, ratio to this tree's plain)"
  (cd "$tree" && PYTHONPATH="$tree:${PYTHONPATH:-}" timeout "$limit" python benchmarks/overhead.py --no-warmup \
      --workloads "$workload" --iters "$iters" --tools "$tools" --out "$out/graph_lean_$side.md") \
      2> >(tee "$out/graph_lean_$side.log" >&2) || echo "(overhead.py, $side: rc $?)"
  echo "== wall $((SECONDS - start)) s"
done
left=$((145 - (SECONDS - start)))
if [ "$left" -gt 8 ]; then
  echo "== after: the append node's edge on this GPU (block_sched, --graphs, every:50, $workload)"
  rm -rf "$out/edge_trace"
  (cd "$after" && PYTHONPATH="$after:${PYTHONPATH:-}" timeout "$left" python -m neutrino.runtime.start.launcher \
      -p block_sched --graphs --launches every:50 --tracedir "$out/edge_trace" -- \
      python benchmarks/overhead_workloads.py --iters 50 --only "$workload" > /dev/null) 2>&1 | grep "^neutrino:" | tail -3
  # (the run directory is <tracedir>/<time>_<pid>/event.log)
  find "$out/edge_trace" -name event.log -exec grep -h '"event":"graph_append"\|"event":"graph_edge_ordinary"' {} + \
      > "$out/edge.txt" 2>/dev/null
  if [ -s "$out/edge.txt" ]; then head -4 "$out/edge.txt"; else echo "(no graph_append event: see $out/edge_trace)"; fi
else
  echo "(no time left for the edge check)"
fi
rm -rf "$cache"
echo "== wall $((SECONDS - start)) s"
