#!/usr/bin/env bash
# Issue 14 acceptance: a DDP training step of a small torch.compile model under
# `torchrun --nproc_per_node=2`, plain and under block_sched and gmem_bytes; then
# benchmarks/ddp_check.py (losses bitwise identical per rank, one trace per rank,
# block_sched complete, report and combined Perfetto export). Work (traces, compiler caches)
# under $WORK (default /tmp/ddp_acceptance); logs, reports and the check's output copied to
# $OUT when set (the device tool's result folder).
#
# Two GPUs: NCCL, one rank per GPU. One GPU: both ranks on it, gloo (same code paths
# of ours: two processes, two trace directories). Set NPROC to change the rank count.
# Device tool: carry .whl if the machine lacks tomlkit/pyelftools/zstandard (see gpu_acceptance.sh).
set -u
WORK=${WORK:-/tmp/ddp_acceptance}
NPROC=${NPROC:-2}
rm -rf "$WORK"; mkdir -p "$WORK"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
# Keep NVLink multicast off (the device tool's KINDS.md); the launcher also sets these when unset.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One compiler cache for every run: the warm-up run autotunes, the others reuse its choices,
# so all runs execute the same kernels (a different autotuned config could change the sums).
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor TRITON_CACHE_DIR=$WORK/triton NEUTRINO_CACHE_DIR=$WORK/ncache
# No compile worker processes: they would inherit RANK.
export TORCHINDUCTOR_COMPILE_THREADS=1
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "GPUs:", torch.cuda.device_count())'
TORCHRUN=(python3 -m torch.distributed.run --standalone --nproc_per_node="$NPROC")
STEP=(benchmarks/ddp_step.py --steps 6)
NEUTRINO=(python3 -m neutrino.cli)
t0=$(date +%s)
run() {  # run NAME CMD...: its output in $WORK/NAME.log, a line with its status and time
    local name=$1; shift
    local s=$(date +%s)
    timeout 240 "$@" > "$WORK/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $(( $(date +%s) - s )) s"; grep -E "^rank |^neutrino:" "$WORK/$name.log" | head -12
    [ $rc -eq 0 ] || { tail -30 "$WORK/$name.log"; }
}
run warmup "${TORCHRUN[@]}" "${STEP[@]}" --out "$WORK/warmup"
run plain "${TORCHRUN[@]}" "${STEP[@]}" --out "$WORK/plain"
for tool in block_sched gmem_bytes; do
    run "$tool" "${NEUTRINO[@]}" -p "$tool" --tracedir "$WORK/trace_$tool" -- "${TORCHRUN[@]}" "${STEP[@]}" --out "$WORK/$tool"
done
python3 benchmarks/ddp_check.py "$WORK" block_sched gmem_bytes 2>&1 | tee "$WORK/check.log"
rc=${PIPESTATUS[0]}
echo "total $(( $(date +%s) - t0 )) s"
if [ -n "${OUT:-}" ]; then
    cp "$WORK"/*.log "$WORK"/report_*.txt "$OUT"/ 2>/dev/null
    for f in "$WORK"/*.perfetto.json; do [ -f "$f" ] && gzip -c "$f" > "$OUT/$(basename "$f").gz"; done
    du -sh "$WORK"/trace_* 2>/dev/null
fi
exit $rc
