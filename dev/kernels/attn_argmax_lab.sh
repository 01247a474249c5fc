#!/usr/bin/env bash
# Builds dev/kernels/attn_argmax_lab.cu (nvcc, sm_90a; here or on the GPU
# machine) into BUILD/lab/attn_argmax_lab, with the "before" decode kernel
# of commit OLD copied beside it (C linkage dropped: it lives in namespace
# old) and cuda_quant_mma.cu (the 4-bit o_proj GEMV of the step mock)
# linked in.
# Usage: dev/kernels/attn_argmax_lab.sh [BUILD (default build/h-attn)] [OLD (default 55c89aa)]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/h-attn} OLD=${2:-55c89aa}
mkdir -p $B/lab
git show $OLD:src/backend/cuda/cuda_attn_decode.cu | sed 's/^extern "C" //' \
  >$B/lab/old_attn_decode.cu
nvcc -arch=sm_90a -O3 -std=c++17 -Isrc -Iinclude -I$B/lab dev/kernels/attn_argmax_lab.cu \
  src/backend/cuda/cuda_quant_mma.cu -o $B/lab/attn_argmax_lab
