#!/usr/bin/env bash
# Runs on the GPU machine (device tool) with the binaries carried in
# .gpu-carry/quant/ (built here by scripts/gpu-quant-prebuild.sh): the CUDA
# quantized-op test (every bits x group size against the CPU), the quantized
# fixtures on CUDA (greedy vs mlx-lm), the quantized kernel bench
# (dev/kernels/bench_quant.c), then a random-weight Llama-3.1-8B-shaped model
# (tools/make_model.py) quantized to 4-bit group 64 by the carried
# `tern quantize`, through `tern bench --device cuda`. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-quant-out}
MODEL=/tmp/tern-llama8b
Q=/tmp/tern-llama8b-q4
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
C=.gpu-carry/quant
cr() { LD_LIBRARY_PATH=$PWD/$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} "$@"; }
echo "== carried binaries of commit $(cat $C/commit 2>/dev/null)"

echo "== quantized op test"
cr timeout 60 $C/test_quant_cuda >"$OUT/test_quant_cuda.log" 2>&1
echo "rc=$?"; grep -E "rel err|PASSED|FAILED|ERROR|SKIPPED" "$OUT/test_quant_cuda.log" | head -40

echo "== quantized fixtures on CUDA"
TERN_QUANT_DEVICE=cuda TERN_TEST_FIXTURES=$PWD/tests/fixtures cr timeout 60 $C/test_golden_quant \
  >"$OUT/golden_quant_cuda.log" 2>&1
echo "rc=$?"; grep -vE "^\[ (RUN|  OK)" "$OUT/golden_quant_cuda.log" | head -20

echo "== kernel bench"
cr timeout 70 $C/bench_quant 30 >"$OUT/bench_quant.log" 2>&1
echo "rc=$?"; sed -n '/==== summary ====/,$p' "$OUT/bench_quant.log"

echo "== make_model llama-3.1-8b + tern quantize"
t0=$(date +%s)
timeout 90 python3 tools/make_model.py --preset llama-3.1-8b --out "$MODEL" --tokenizer-dir $C/tok-llama3_1 2>&1 | tail -2
t1=$(date +%s); echo "make_model took $((t1 - t0)) s"
cr timeout 70 $C/tern quantize --model "$MODEL" --out "$Q" --bits 4 --group-size 64 2>&1 | tail -2
t2=$(date +%s); echo "tern quantize took $((t2 - t1)) s"; du -sh "$Q"
rm -rf "$MODEL"
echo "== tern bench (4-bit)"
cr timeout 90 $C/tern bench --model "$Q" --device cuda --prompt-len 2048 --gen 128 --reps 3 --json \
  >"$OUT/bench_q4_2048.json" 2>"$OUT/bench_q4_2048.err"
echo "rc=$?"; tail -n 3 "$OUT/bench_q4_2048.err"; cat "$OUT/bench_q4_2048.json"
rm -rf "$Q"
