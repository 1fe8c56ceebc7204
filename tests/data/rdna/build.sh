#!/usr/bin/env bash
# Regenerates the RDNA (gfx1100, wave32) corpus with LLVM 19's llc (Debian: apt-get install llvm-19):
# the GCN corpus's LLVM IR (../gcn/src: streaming add, LDS reduction, loop, atomics) and src/ here
# (a WMMA loop, a kernel with a call). Output: <name>.gfx1100.s, checked in. LLVM 19 is pinned, as for GCN.
set -euo pipefail
cd "$(dirname "$0")"
LLC=${LLC:-llc-19}
for src in ../gcn/src/vadd.ll ../gcn/src/lds_reduce.ll ../gcn/src/loop_sum.ll ../gcn/src/atomics.ll src/*.ll; do
  name=$(basename "$src" .ll)
  "$LLC" -O2 -mtriple=amdgcn-amd-amdhsa -mcpu=gfx1100 "$src" -o "$name.gfx1100.s"
done
