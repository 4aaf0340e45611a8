#!/usr/bin/env bash
# On the GPU machine (nvcc, no Rust needed): builds the probes against the
# crate's kernels and prints their tables. See docs/notes/gpu-notes.md section 6.
#   bash tools/gpu-probe/run.sh            # floor, then the Linear chain
#   RULES="old 2" ROWS="4 8 16" bash tools/gpu-probe/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kernels=$here/../../src/gpu/kernels
out=${OUT:-/tmp}/gpu-probe
mkdir -p "$out"
nvcc -O3 -std=c++17 -arch=sm_90 -o "$out/floor" "$here/floor.cu"
nvcc -O3 -std=c++17 -arch=sm_90 -I"$kernels" ${KFLAGS:-} -o "$out/linear_chain" "$here/linear_chain.cu"
"$out/floor"
for m in ${ROWS:-8}; do
  for r in ${RULES:-old}; do
    "$out/linear_chain" "$r" "$m"
  done
done
