#!/usr/bin/env bash
# Rebuild the real-world PTX corpus in tests/data/realworld/ from the sources
# here. Not run by pytest: the outputs are committed. Needs nvcc (CUDA 13.0
# was used), Python with llvmlite, and network access once to fetch the
# nvidia-cutlass wheel (or CUTLASS_DIR pointing at a CUTLASS checkout).
#
#   tests/realworld_src/build.sh [nvcc|cutlass|llvm|triton ...]   (default: all)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="$HERE/../data/realworld"
NVCC="nice nvcc -ptx -std=c++17 -diag-suppress 20054,177,550"
PY="${PYTHON:-python}"
cd "$HERE"  # -G debug info records the working directory: build from here, always

# nvcc_variant SOURCE ARCH [FLAG...]: one PTX file named SOURCE.ARCH[.flags].ptx
nvcc_variant() {
    local src="$1" arch="$2"; shift 2
    local tag=""
    for f in "$@"; do
        case "$f" in
            -G) tag="$tag.G" ;;
            -lineinfo) tag="$tag.lineinfo" ;;
            -rdc=true) tag="$tag.rdc" ;;
            *) tag="$tag.$(echo "$f" | tr -c 'a-zA-Z0-9_\n' _)" ;;
        esac
    done
    local base; base="$(basename "$src" .cu)"
    echo "nvcc $base $arch $*"
    $NVCC -arch="$arch" "$@" "$src" -o "$OUT/nvcc/$base.$arch$tag.ptx"
}

# Each source in a few variants, not all: -G output of library-heavy code is
# ~1 MB a file, and cub_prims.sm_90.G is the one large -G file we keep.
build_nvcc() {
    mkdir -p "$OUT/nvcc"
    local s="$HERE/cuda"
    nvcc_variant "$s/calls_printf.cu" sm_80
    nvcc_variant "$s/calls_printf.cu" sm_90 -lineinfo
    nvcc_variant "$s/calls_printf.cu" sm_80 -G
    nvcc_variant "$s/calls_printf.cu" sm_90 -rdc=true
    nvcc_variant "$s/extern_calls.cu" sm_80 -rdc=true
    nvcc_variant "$s/extern_calls.cu" sm_90a -rdc=true -lineinfo
    nvcc_variant "$s/coop_groups.cu" sm_80
    nvcc_variant "$s/coop_groups.cu" sm_90 -lineinfo
    nvcc_variant "$s/coop_groups.cu" sm_90 -rdc=true
    nvcc_variant "$s/cub_prims.cu" sm_80
    nvcc_variant "$s/cub_prims.cu" sm_90a -lineinfo
    nvcc_variant "$s/cub_prims.cu" sm_90 -G
    nvcc_variant "$s/barrier_pipeline.cu" sm_80
    nvcc_variant "$s/barrier_pipeline.cu" sm_90 -lineinfo
    nvcc_variant "$s/barrier_pipeline.cu" sm_90a -rdc=true
    nvcc_variant "$s/half_bf16.cu" sm_80
    nvcc_variant "$s/half_bf16.cu" sm_90 -G
    nvcc_variant "$s/half_bf16.cu" sm_90a -rdc=true -lineinfo
    nvcc_variant "$s/tensor_core.cu" sm_80
    nvcc_variant "$s/tensor_core.cu" sm_90 -lineinfo
    nvcc_variant "$s/tensor_core.cu" sm_80 -G
    nvcc_variant "$s/hopper_asm.cu" sm_90a
    nvcc_variant "$s/hopper_asm.cu" sm_90a -lineinfo
    nvcc_variant "$s/hopper_asm.cu" sm_90a -G
    nvcc_variant "$s/hopper_misc.cu" sm_90a
    nvcc_variant "$s/hopper_misc.cu" sm_90a -lineinfo
}

cutlass_dir() {
    if [ -n "${CUTLASS_DIR:-}" ]; then echo "$CUTLASS_DIR"; return; fi
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/neutrino-realworld"
    if [ ! -d "$cache/cutlass/cutlass_library/source/include" ]; then
        mkdir -p "$cache"
        "$PY" -m pip download --no-deps nvidia-cutlass==4.2.0.0 -d "$cache" >&2
        "$PY" -m zipfile -e "$cache"/nvidia_cutlass-4.2.0.0-py3-none-any.whl "$cache/cutlass" >&2
    fi
    echo "$cache/cutlass/cutlass_library/source"
}

# cutlass_variant SOURCE ARCH [FLAG...]: one arch per source (CUTLASS builds are slow)
cutlass_variant() {
    local src="$1" arch="$2"; shift 2
    local dir; dir="$(cutlass_dir)"
    local base; base="$(basename "$src" .cu)"
    echo "nvcc (cutlass) $base $arch $*"
    $NVCC -arch="$arch" --expt-relaxed-constexpr -I"$dir/include" -I"$dir/tools/util/include" \
        "$@" "$src" -o "$OUT/cutlass/$base.$arch.ptx"
}

build_cutlass() {
    mkdir -p "$OUT/cutlass"
    local s="$HERE/cutlass"
    for f in "$s"/*.cu; do
        case "$(basename "$f")" in
            *sm90*) cutlass_variant "$f" sm_90a ;;
            *sm100*) cutlass_variant "$f" sm_100a ;;
            *) cutlass_variant "$f" sm_80 ;;
        esac
    done
}

build_llvm() {
    mkdir -p "$OUT/llvm"
    "$PY" "$HERE/llvm/build_llvm.py" "$OUT/llvm"
}

build_triton() {
    mkdir -p "$OUT/triton"
    "$PY" "$HERE/triton/build_triton.py" "$OUT/triton"
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(nvcc cutlass llvm triton)
for p in "${parts[@]}"; do "build_$p"; done
