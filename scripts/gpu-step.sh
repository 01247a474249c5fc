#!/usr/bin/env bash
# The decode step kernel's measurements in one device call (docs/perf/quant.md):
# test_step_cuda (+ GPU_STEP_TESTS), then the 8B-shaped 4-bit model through
# `tern bench` (batch 1, prompt 512 + 64 new) with the kernel as it is (its
# per-block stamps summarised by scripts/step-stamps.py), op by op, and the
# timing-only variants (no phases, no arithmetic), or GPU_STEP_VARIANTS.
# Everything comes back as one archive, $OUT/step.tar.xz.
# Build first (here): TERN_GPU_BUILD=build/lead-gpu TERN_GPU_CARRY=.gpu-carry/step \
#   TERN_GPU_EXTRA="test_step_cuda" scripts/gpu-decode-prebuild.sh
# Device: run(command="OUT=$OUT bash scripts/gpu-step.sh", carry=[".gpu-carry/step"])
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-step-out}
mkdir -p "$OUT"
export TERN_GPU_CARRY=${TERN_GPU_CARRY:-.gpu-carry/step}
export GPU_CHECK_TESTS="test_step_cuda ${GPU_STEP_TESTS:-}"
export GPU_CHECK_BATCHED=0 GPU_CHECK_MODELS="q4:/tmp/tern-llama8b-q4"
export GPU_CHECK_Q4_KERNELS="TERN_CUDA_STEP_STAMPS=$OUT/stamps.csv ${GPU_STEP_VARIANTS-TERN_CUDA_STEP=0 TERN_CUDA_STEP_TUNE=8 TERN_CUDA_STEP_TUNE=16}"
OUT=$OUT bash scripts/gpu-check.sh >"$OUT/check.txt" 2>&1
grep -E "binaries|rc=[^0]|FAILED|copy rate|^single" "$OUT/check.txt"
grep -h "step vs\|wide model\|differ" "$OUT/test_step_cuda.log" 2>/dev/null
echo "(TUNE=8: no phases, TUNE=16: no arithmetic; both give wrong logits, timing only)"
[ -f "$OUT/stamps.csv" ] && python3 scripts/step-stamps.py "$OUT/stamps.csv" | tee "$OUT/stamps.txt"
(cd "$OUT" && tar cJf step.tar.xz --exclude=step.tar.xz . && find . -type f ! -name step.tar.xz -delete)
