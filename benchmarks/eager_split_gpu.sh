#!/usr/bin/env bash
# Issue 24 (h-eager): the runtime's own GPU time per probed eager launch, split, and main against this branch.
#   bash benchmarks/eager_split_gpu.sh [PARTS...]      PARTS: split trees runtime tests (default: split trees)
#   MAIN=.dev-lead/trees/main NEW=.dev-lead/trees/h-eager (the defaults; NEW falls back to this checkout)
# Each part has its own time limit; output printed and written under $OUT (or /tmp). Two calls of <= 150 s:
#   bash benchmarks/eager_split_gpu.sh split trees     # ~20 s + ~100 s
#   bash benchmarks/eager_split_gpu.sh runtime         # ~130 s
#   bash benchmarks/eager_split_gpu.sh tests           # the exact-result GPU tests on NEW (gmem_exact, aggregation)
# split:   benchmarks/eager_split.py, no runtime: vadd probed by block_sched / gmem_bytes at 16,384 blocks (the
#          stream loop's shape) and 256 (a ~3 µs kernel), each of the runtime's per-launch GPU operations added
#          one row at a time (end event timed / untimed, start event, copy-out and memset on a second stream per
#          launch or per writer batch, zeroing by a copy engine, CUPTI kernel and copy records), GPU alone with a
#          100 µs spin before each launch (overhead.py's loop) and back to back. `Δ ring` = what the row adds.
# trees:   overhead.py's eager stream and attention loops on the GPU alone, main's runtime against this branch's,
#          interleaved in one run (--tree): plain, block_sched, gmem_bytes; "same outputs" must say yes.
# runtime: this branch's runtime with its operations switched off one by one (NEUTRINO_MEASURE, shim/writer.c;
#          measurement only): timed-end (main's timing end event), no-writer (no copy-out, no zeroing),
#          zero-by-copy, no-timeline, no-timeline nothing-ours (no end event, copy or zeroing: the probed
#          kernel alone through the runtime), and `timeline only` (CUPTI's records, nothing probed). The program's outputs stay the same in every row ("same outputs":
#          yes); only the trace's results are wrong where a switch is on (measurement only, not checked here).
# overhead.py prints each configuration's line as it finishes (kept if a part's time limit ends it).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
MAIN="${MAIN:-.dev-lead/trees/main}"
NEW="${NEW:-.dev-lead/trees/h-eager}"
[ -d "$NEW" ] || NEW=.
parts="${*:-split trees}"
start=$SECONDS
echo "== trees: main=$MAIN new=$NEW ($(git -C "$NEW" log --oneline -1 2>/dev/null)); parts: $parts"
# overhead NAME LIMIT ROUNDS TOOLS [--tree ...]: the eager loops on the GPU alone, each configuration's line as
# it ends (kept if the limit cuts the run), then the table ($out/NAME.md, .log)
overhead() {
  local name=$1 limit=$2 rounds=$3 tools=$4
  shift 4
  OVERHEAD_GPU_ONLY=1 timeout "$limit" python benchmarks/overhead.py --no-warmup --rounds "$rounds" --iters 200 \
      --workloads stream,attention "$@" --tools "$tools" --out "$out/$name.md" > "$out/$name.log" 2>&1
  local rc=$?
  grep ': {' "$out/$name.log" | cut -c1-400
  echo "(rc $rc; wall $((SECONDS - start)) s)"
  cat "$out/$name.md" 2>/dev/null
}
for part in $parts; do
  case "$part" in
  split)
    echo "== eager_split.py"
    timeout 50 python benchmarks/eager_split.py --rounds 2 --launches 200 --budget 35 --json "$out/eager_split.json" 2>&1 \
        | tee "$out/eager_split.md"
    echo "(rc ${PIPESTATUS[0]}; wall $((SECONDS - start)) s)";;
  trees)
    echo "== overhead.py stream, attention, GPU alone: main against this branch"
    overhead eager_trees 95 2 "plain,main:block_sched,new:block_sched,main:gmem_bytes,new:gmem_bytes" \
        --tree "main=$MAIN" --tree "new=$NEW";;
  runtime)
    echo "== overhead.py stream, attention, GPU alone: this branch's runtime, its operations switched off"
    overhead eager_runtime_split 140 1 "plain,new:block_sched,new:block_sched no-timeline,new:block_sched no-timeline nothing-ours,new:block_sched no-writer,new:block_sched timed-end,new:timeline only,new:gmem_bytes,new:gmem_bytes no-timeline nothing-ours,new:block_sched zero-by-copy" \
        --tree "new=$NEW";;
  tests)
    echo "== GPU tests of exact results on this branch's tree"
    (cd "$NEW" && timeout 140 python -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gmem_exact.py \
        tests/gpu/test_gpu_aggregation.py 2>&1 | tail -15)
    echo "(wall $((SECONDS - start)) s)";;
  *) echo "unknown part $part (split, trees, runtime, tests)";;
  esac
done
echo "== wall $((SECONDS - start)) s"
