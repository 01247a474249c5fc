#!/usr/bin/env bash
# Runs on the GPU machine (device tool): builds the CUDA backend (Release,
# -DTERN_CUDA=ON, build/gpu) when the machine has tern's build dependencies,
# else uses the binaries carried in .gpu-carry/ (scripts/gpu-prebuild.sh);
# runs the GPU op tests, compute-sanitizer memcheck on them (bounded), and
# the kernel bench (floors, GEMV at Llama-3.1-8B decode shapes, prefill GEMM
# and attention at 2048 tokens). Logs go to $OUT; the table prints last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BIN=.gpu-carry
if [ "${GPU_BUILD:-1}" = 1 ] && command -v pkg-config >/dev/null &&
   pkg-config --exists jansson libpcre2-8 libutf8proc && ls /usr/include/cmocka.h >/dev/null 2>&1; then
  echo "== building build/gpu on the device"
  if cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES=90a >"$OUT/build.log" 2>&1 &&
     cmake --build build/gpu --target test_ops_cuda -j16 >>"$OUT/build.log" 2>&1; then
    BIN=build/gpu/tests/ops
    (cd build/gpu && ctest -L ops --output-on-failure) 2>&1 | tail -5
  else
    echo "device build failed (see build.log); using carried binaries"
  fi
else
  echo "== not building here (GPU_BUILD=${GPU_BUILD:-1}); pkg-config: $(command -v pkg-config || echo none);" \
    "jansson/pcre2/utf8proc: $(pkg-config --exists jansson libpcre2-8 libutf8proc 2>/dev/null && echo yes || echo no)"
  echo "== no build deps here (pkg-config/jansson/pcre2/utf8proc/cmocka); using carried binaries"
fi
export LD_LIBRARY_PATH=$PWD/.gpu-carry:$LD_LIBRARY_PATH
echo "== op tests ($BIN, commit $(cat .gpu-carry/commit 2>/dev/null))"
timeout 300 "$BIN/test_ops_cuda" 2>&1 | tee "$OUT/test_ops_cuda.log" | grep -E "rel err|RUN|OK|PASSED|FAILED|SKIPPED|error|equal|seed" | head -150
test_rc=${PIPESTATUS[0]}
echo "test rc=$test_rc"
echo "== compute-sanitizer memcheck"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_ops_cuda" \
  >"$OUT/memcheck.log" 2>&1
mc_rc=$?
grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.log" | head -20
echo "memcheck rc=$mc_rc"
echo "== bench"
timeout 300 .gpu-carry/bench_cuda 2>&1 | tee "$OUT/bench.log" | grep -v "^$" >/dev/null
bench_rc=${PIPESTATUS[0]}
echo "bench rc=$bench_rc"
sed -n '/==== summary ====/,$p' "$OUT/bench.log"
echo "tests rc=$test_rc memcheck rc=$mc_rc bench rc=$bench_rc"
