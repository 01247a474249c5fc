#!/usr/bin/env bash
# Builds dev/kernels/attn_argmax_lab.cu (on this machine; nvcc, sm_90a) into
# BUILD/lab/attn_argmax_lab, with the "before" decode kernel of commit
# b7b61da copied beside it (C linkage dropped: it lives in namespace old).
# Usage: dev/kernels/attn_argmax_lab.sh [BUILD (default build/gpu-h1)]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/gpu-h1}
mkdir -p $B/lab
git show b7b61da:src/backend/cuda/cuda_attn_decode.cu | sed 's/^extern "C" //' \
  >$B/lab/old_attn_decode.cu
nvcc -arch=sm_90a -O3 -std=c++17 -Isrc -Iinclude -I$B/lab dev/kernels/attn_argmax_lab.cu \
  -o $B/lab/attn_argmax_lab
