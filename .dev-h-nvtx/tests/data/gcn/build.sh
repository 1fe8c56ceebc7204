#!/usr/bin/env bash
# Regenerates the GCN corpus from the LLVM IR in src/ with LLVM 19's llc
# (Debian: apt-get install llvm-19). Output: <name>.<gfx>.s, checked in.
# LLVM 19 is pinned: code-object directives differ between LLVM versions, and
# the tests assemble the probed results with the same version's llvm-mc.
set -euo pipefail
cd "$(dirname "$0")"
LLC=${LLC:-llc-19}
for src in src/*.ll; do
  name=$(basename "$src" .ll)
  for gfx in gfx90a gfx942; do
    "$LLC" -O2 -mtriple=amdgcn-amd-amdhsa -mcpu="$gfx" "$src" -o "$name.$gfx.s"
  done
done
