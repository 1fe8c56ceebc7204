#!/bin/sh
# Rebuilds the committed PTX of this folder (CUDA 13.0 nvcc): each source plain and with
# -lineinfo, -G and -rdc=true for sm_90, and plain for sm_80.
set -e
cd "$(dirname "$0")"
for src in calls lines features; do
  nvcc -ptx -arch=sm_90 "$src.cu" -o "$src.sm90.ptx"
  nvcc -ptx -arch=sm_80 "$src.cu" -o "$src.sm80.ptx"
  nvcc -ptx -arch=sm_90 -lineinfo "$src.cu" -o "$src.lineinfo.sm90.ptx"
  nvcc -ptx -arch=sm_90 -G "$src.cu" -o "$src.G.sm90.ptx"
  nvcc -ptx -arch=sm_90 -rdc=true "$src.cu" -o "$src.rdc.sm90.ptx"
done
# ptxas 13.0 crashes (SIGSEGV) on the -G build of features.cu itself (a .global inside a
# function with debug info): not valid input, so not kept.
rm features.G.sm90.ptx
