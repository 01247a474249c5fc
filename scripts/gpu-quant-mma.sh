#!/usr/bin/env bash
# Runs on the GPU machine with .gpu-carry/quant (built here by
# `TERN_GPU_BUILD=build/gpu-quant TERN_GPU_CARRY=.gpu-carry/quant
# scripts/gpu-decode-prebuild.sh` plus dev/kernels/bench_quant.c linked
# against that build's libtern.a, stripped, xz'd into the carry as
# bench_quant.xz): the
# quantized GEMV bench (tensor-core kernel vs v1 / v2 per Llama-3.1-8B
# shape), the CUDA tests (scripts/gpu-check.sh, no benches), then a
# random-weight Llama-3.1-8B-shaped model at 4-bit g64 through `tern bench`
# batch 1 with the default GEMV and with TERN_QUANT_KERNEL=v1.
# Logs go to $OUT; the model is deleted.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-quant-mma-out}
CARRY=${TERN_GPU_CARRY:-.gpu-carry/quant}
MODEL=/tmp/tern-llama8b Q=/tmp/tern-llama8b-q4
mkdir -p "$OUT"
. scripts/gpu-carry.sh
carry_unpack "$CARRY"
export LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"
echo "== bench_quant (binaries of commit $(cat $C/commit))"
timeout 200 $C/bench_quant ${BENCH_SAMPLES:-15} >"$OUT/bench_quant.log" 2>&1; echo "bench_quant rc=$?"
grep -vE "^(decode weights|copy bandwidth)" "$OUT/bench_quant.log" | grep -E "T1 |T8 |bandwidth" | head -90
sed -n '/==== summary ====/,$p' "$OUT/bench_quant.log"
echo "== tests"
TERN_GPU_CARRY=$CARRY GPU_CHECK_BENCH=0 OUT=$OUT bash scripts/gpu-check.sh 2>&1 | tail -15
grep -E "rel err|FAIL|ERROR|differs" "$OUT/test_quant_cuda.log" | head -60
[ "${GPU_QMMA_MODEL:-1}" = 0 ] && exit 0
echo "== Llama-3.1-8B-shaped q4 g64, batch 1"
timeout 100 python3 tools/make_model.py --preset llama-3.1-8b --out "$MODEL" \
  --tokenizer-dir $C/tok-llama3_1 >"$OUT/make_model.log" 2>&1; echo "make_model rc=$?"
timeout 70 $C/tern quantize --model "$MODEL" --out "$Q" --bits 4 --group-size 64 \
  >"$OUT/quantize.log" 2>&1; echo "quantize rc=$?"
rm -rf "$MODEL"
for k in default v1; do
  if [ $k = v1 ]; then export TERN_QUANT_KERNEL=v1; else unset TERN_QUANT_KERNEL; fi
  timeout 60 $C/tern bench --model "$Q" --device cuda --prompt-len 512 --gen 64 --reps 3 --json \
    >"$OUT/single_q4_$k.json" 2>"$OUT/single_q4_$k.err"; echo "q4 $k rc=$?"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('q4 %s decode %.1f tok/s prefill %.0f tok/s' % (sys.argv[2], d.get('decode_tok_s',0), d.get('prefill_tok_s',0)))" \
    "$OUT/single_q4_$k.json" $k
done
rm -rf "$Q"
