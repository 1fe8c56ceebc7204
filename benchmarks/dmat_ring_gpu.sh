#!/bin/bash
# The GPU checks of the count-sized maps' device ring (issue 24, item 3) in one call, logs under $OUT:
#   device.txt    the GPU
#   bench.txt     dmat on the attention loop vs plain (benchmarks/dmat_ring.py): per-launch median,
#                 records kept / dropped per launch, launches dropped
#   gputests.txt  tests/gpu/test_gpu_counting_side_effects.py and tests/gpu/test_gpu_dmat_ns.py
#   sanitizer.txt compute-sanitizer --tool memcheck on a small dmat run (counting_side_effects.cu)
#   gpuonly.txt   the attention loop with OVERHEAD_GPU_ONLY=1 (the kernel's own time)
# Usage (repository root): OUT=/tmp/out bash benchmarks/dmat_ring_gpu.sh
set -u
OUT=${OUT:-/tmp/dmat_ring_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PATH=$PATH:/usr/local/cuda/bin:/usr/local/cuda-13.0/bin
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt" 2>&1
timeout 70 python benchmarks/dmat_ring.py --iters 100 > "$OUT/bench.txt" 2>&1
echo "rc=$? after $((SECONDS - start)) s" >> "$OUT/bench.txt"
timeout 70 python -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_counting_side_effects.py \
    tests/gpu/test_gpu_dmat_ns.py > "$OUT/gputests.txt" 2>&1
echo "rc=$? after $((SECONDS - start)) s" >> "$OUT/gputests.txt"
{
    san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    work=$(mktemp -d)
    nvcc -gencode arch=compute_90,code=compute_90 -o "$work/cse" tests/gpu/workloads/counting_side_effects.cu
    NEUTRINO_CACHE_DIR=$work/nc timeout 40 "$san" --tool memcheck --target-processes all --error-exitcode 9 \
        python -m neutrino.runtime.start.launcher -p dmat --tracedir "$work/t" -- "$work/cse" "$work/out.bin" 2>&1 | tail -25
    echo "sanitizer rc=${PIPESTATUS[0]}"
    python - "$work/t" <<'EOF'
import sys
from pathlib import Path
import neutrino.trace as nt
runs = [p for p in Path(sys.argv[1]).iterdir() if (p / "event.log").exists()]
t = max((nt.load(p) for p in runs), key=lambda t: len(t.launches))
for la in t.launches:
    md = la.maps["dmat"]
    print(f"launch {la.index} {la.kernel}: records {md.record_stats()[0]}, dropped {md.dropped}, cap {md.cap}")
EOF
    echo "after $((SECONDS - start)) s"
} > "$OUT/sanitizer.txt" 2>&1
left=$((180 - (SECONDS - start)))
if [ "$left" -gt 30 ]; then
    timeout $((left - 5)) python benchmarks/dmat_ring.py --iters 100 --gpu-only > "$OUT/gpuonly.txt" 2>&1
    echo "rc=$? after $((SECONDS - start)) s" >> "$OUT/gpuonly.txt"
fi
