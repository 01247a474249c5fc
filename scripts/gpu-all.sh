#!/usr/bin/env bash
# Runs on the GPU machine, with a carry built here by
#   TERN_GPU_BUILD=build/gpu-quant TERN_GPU_CARRY=.gpu-carry/quant \
#   TERN_GPU_EXTRA="test_sample_cuda test_sample_engine_cuda" scripts/gpu-decode-prebuild.sh
# plus dev/kernels/bench_quant (scripts/gpu-quant-prebuild.sh's gcc line,
# stripped and xz'd to $CARRY/bench_quant.xz; optional): the quantized GEMV
# kernel bench, then scripts/gpu-check.sh (every CUDA test carried, the
# 8B-shape bf16 and q4 benches: batch 1, 2048-token prefill, 64 concurrent,
# q4 batch 1 with other GEMV versions), then compute-sanitizer racecheck on
# the op tests. Logs under $OUT; gpu-check's table prints before racecheck.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/gpu-all-out} TERN_GPU_CARRY=${TERN_GPU_CARRY:-.gpu-carry/quant}
mkdir -p "$OUT"
. scripts/gpu-carry.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
if [ -f "$TERN_GPU_CARRY/bench_quant.xz" ]; then
  carry_unpack "$TERN_GPU_CARRY"
  cr timeout 150 $C/bench_quant \
    ${BENCH_SAMPLES:-9} >"$OUT/bench_quant.log" 2>&1
  echo "bench_quant rc=$?"
  grep -E "T1 |T8 " "$OUT/bench_quant.log" | head -70
  sed -n '/==== summary ====/,$p' "$OUT/bench_quant.log"
fi
GPU_CHECK_LONG=${GPU_CHECK_LONG:-1} GPU_CHECK_Q4_KERNELS=${GPU_CHECK_Q4_KERNELS:-"v4 v5 v3"} \
  bash scripts/gpu-check.sh
if [ "${GPU_ALL_RACECHECK:-1}" = 1 ]; then
  TERN_TEST_FIXTURES=$PWD/tests/fixtures cr \
    timeout ${RACECHECK_S:-150} compute-sanitizer --tool racecheck --print-limit 20 $C/test_ops_cuda \
    >"$OUT/racecheck.log" 2>&1
  echo "racecheck test_ops_cuda rc=$?"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|Error" "$OUT/racecheck.log" | tail -5
fi
