#!/usr/bin/env bash
# Issue 24: block_sched's and gmem_bytes' exit-path variants on Triton's vadd, GPU alone (benchmarks/probe_tail.py;
# about 60 s, ≤ 150 s). Writes $OUT/probe_tail_256.json and $OUT/probe_tail_16384.json; exits non-zero if any
# variant's records or byte totals are wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
rc=0
timeout 100 python3 benchmarks/probe_tail.py --grid 256 --rounds 15 --json "$OUT/probe_tail_256.json" || rc=$?
timeout 45 python3 benchmarks/probe_tail.py --grid 16384 --rounds 5 --launches 100 --replays 100 \
    --json "$OUT/probe_tail_16384.json" || rc=$?
exit $rc
