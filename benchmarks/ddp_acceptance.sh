#!/usr/bin/env bash
# Issue 14 acceptance: a DDP training step of a small torch.compile model under
# `torchrun --nproc_per_node=2`, plain and under block_sched and gmem_bytes; then
# benchmarks/ddp_check.py (losses bitwise identical per rank, one trace per rank,
# block_sched complete, report and combined Perfetto export). Results under $OUT.
#
# Two GPUs: NCCL, one rank per GPU. One GPU: both ranks on it, gloo (same code paths
# of ours: two processes, two trace directories). Set NPROC to change the rank count.
# Device tool: carry .whl if the machine lacks tomlkit/pyelftools/zstandard (see gpu_acceptance.sh).
set -u
OUT=${OUT:-/tmp/ddp_acceptance}
NPROC=${NPROC:-2}
mkdir -p "$OUT"
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
export TORCHINDUCTOR_CACHE_DIR=$OUT/inductor TRITON_CACHE_DIR=$OUT/triton NEUTRINO_CACHE_DIR=$OUT/ncache
# No compile worker processes: they would inherit RANK.
export TORCHINDUCTOR_COMPILE_THREADS=1
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "GPUs:", torch.cuda.device_count())'
TORCHRUN=(python3 -m torch.distributed.run --standalone --nproc_per_node="$NPROC")
STEP=(benchmarks/ddp_step.py --steps 6)
NEUTRINO=(python3 -m neutrino.cli)
t0=$(date +%s)
run() {  # run NAME CMD...: its output in $OUT/NAME.log, a line with its status and time
    local name=$1; shift
    local s=$(date +%s)
    timeout 240 "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $(( $(date +%s) - s )) s"; grep -E "^rank |^neutrino:" "$OUT/$name.log" | head -8
    [ $rc -eq 0 ] || { tail -30 "$OUT/$name.log"; }
}
run warmup "${TORCHRUN[@]}" "${STEP[@]}" --out "$OUT/warmup"
run plain "${TORCHRUN[@]}" "${STEP[@]}" --out "$OUT/plain"
for tool in block_sched gmem_bytes; do
    run "$tool" "${NEUTRINO[@]}" -p "$tool" --tracedir "$OUT/trace_$tool" -- "${TORCHRUN[@]}" "${STEP[@]}" --out "$OUT/$tool"
done
python3 benchmarks/ddp_check.py "$OUT" block_sched gmem_bytes
rc=$?
echo "total $(( $(date +%s) - t0 )) s"
exit $rc
