#!/bin/bash
# The lines tools on the GPU machine in one go (docs/lines.md): GPU tests, then cost and ncu agreement.
#   bash benchmarks/lines_device.sh OUT [NCU_MODES] [REPS] [lines_cost.py options, e.g. --no-registers]
# LINES_TESTS_S / LINES_COST_S (default 55 / 140): the seconds the GPU tests / the cost run may take.
# Writes OUT/gpu_tests.log, OUT/lines_cost.log and OUT/lc.tgz (lc/: lines_cost.json, ncu pages and metric
# lists, and the Triton expensive-line kernel's plain and light PTX), few files for the device's return.
out=${1:?OUT directory}; ncu_modes=${2-cuda,matmul,attention}; reps=${3:-40}; shift 3 2>/dev/null || shift $#
mkdir -p "$out/lc"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu_tests.log"
(ncu --version 2>&1 | tail -1) | tee -a "$out/gpu_tests.log"
timeout "${LINES_TESTS_S:-55}" python -m pytest -m gpu tests/gpu/test_gpu_lines.py -rA -s -q -p no:cacheprovider >> "$out/gpu_tests.log" 2>&1
echo "gpu tests rc $?" | tee -a "$out/gpu_tests.log"
tail -5 "$out/gpu_tests.log"
cost_s=${LINES_COST_S:-140}
timeout "$cost_s" python benchmarks/lines_cost.py --modes cuda,matmul,attention,loop,call,triton --ncu "$ncu_modes" \
    --reps "$reps" --budget-s $((cost_s - 5)) --out "$out/lc" "$@" > "$out/lines_cost.log" 2>&1
echo "lines_cost rc $?" | tee -a "$out/lines_cost.log"
cp /tmp/lines_cost_*/triton/triton_{plain,lines_light}.ptx "$out/lc/" 2>/dev/null
tar czf "$out/lc.tgz" -C "$out" lc && rm -rf "$out/lc"
tail -25 "$out/lines_cost.log"
