#!/usr/bin/env bash
# Runs on the GPU machine (device tool) with the binaries carried in
# .gpu-carry/decode/bins.tar.xz (built here by scripts/gpu-decode-prebuild.sh):
# the batch-1 decode A/B of load-time q/k/v + gate/up fusion (TERN_FUSE) and
# the quantized kernel version (TERN_QUANT_KERNEL=v1|v2).
#   1. correctness: CUDA op tests; quantized op tests (every bits x group)
#      with v1 and with v2; CUDA golden and graph-replay tests with fusion
#      on; quantized fixtures on CUDA with v2 and fusion on;
#   2. speed: a random-weight Llama-3.1-8B-shaped model (tools/make_model.py)
#      and its 4-bit group-64 quantization (carried `tern quantize`), through
#      `tern bench --device cuda --prompt-len 512 --gen 64 --reps 3` for bf16
#      with fusion on/off and for q4 with fusion on/off x v1/v2.
# Models are deleted; logs go to $OUT; a short table prints last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-decode-out}
MODEL=/tmp/tern-llama8b
Q=/tmp/tern-llama8b-q4
mkdir -p "$OUT"
T0=$(date +%s)
. scripts/gpu-carry.sh
carry_unpack .gpu-carry/decode
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== carried binaries of commit $(cat $C/commit)"
FX=$PWD/tests/fixtures
declare -A RC

t() { # name, then the command; log in $OUT/name.log
  local n=$1; shift
  "$@" >"$OUT/$n.log" 2>&1; RC[$n]=$?
  echo "$n rc=${RC[$n]}"
}
t ops_cuda cr timeout 60 $C/test_ops_cuda
TERN_QUANT_KERNEL=v1 t quant_cuda_v1 cr timeout 60 $C/test_quant_cuda
TERN_QUANT_KERNEL=v2 t quant_cuda_v2 cr timeout 60 $C/test_quant_cuda
grep -E "gemv rel err" "$OUT/quant_cuda_v1.log" | head -3
grep -E "gemv rel err" "$OUT/quant_cuda_v2.log" | head -30
TERN_TEST_FIXTURES=$FX t golden_cuda_fused cr timeout 90 $C/test_golden_cuda
TERN_TEST_FIXTURES=$FX t graph_cuda_fused cr timeout 90 $C/test_graph_cuda
TERN_QUANT_DEVICE=cuda TERN_QUANT_KERNEL=v2 TERN_TEST_FIXTURES=$FX \
  t golden_quant_cuda_v2_fused cr timeout 60 $C/test_golden_quant
for n in ops_cuda quant_cuda_v1 quant_cuda_v2 golden_cuda_fused graph_cuda_fused golden_quant_cuda_v2_fused; do
  grep -E "PASSED|FAILED|rel err [0-9]" "$OUT/$n.log" | grep -v "gemv rel" | tail -4
done
echo "tests took $(( $(date +%s) - T0 )) s"

echo "== make_model llama-3.1-8b + tern quantize"
t1=$(date +%s)
timeout 100 python3 tools/make_model.py --preset llama-3.1-8b --out "$MODEL" \
  --tokenizer-dir $C/tok-llama3_1 >"$OUT/make_model.log" 2>&1
echo "make_model rc=$? took $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
cr timeout 70 $C/tern quantize --model "$MODEL" --out "$Q" --bits 4 --group-size 64 \
  >"$OUT/quantize.log" 2>&1
echo "quantize rc=$? took $(( $(date +%s) - t1 )) s"

b() { # name model, env: one bench
  local n=$1 m=$2; shift 2
  env "$@" LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64 timeout 60 $C/tern bench --model "$m" \
    --device cuda --prompt-len 512 --gen 64 --reps 3 --json >"$OUT/bench_$n.json" 2>"$OUT/bench_$n.err"
  RC[bench_$n]=$?
  echo "bench_$n rc=${RC[bench_$n]} $(date +%s)"
}
b bf16_fused "$MODEL" TERN_FUSE=1
b bf16_unfused "$MODEL" TERN_FUSE=0
rm -rf "$MODEL"
b q4_fused_v2 "$Q" TERN_FUSE=1 TERN_QUANT_KERNEL=v2
b q4_fused_v1 "$Q" TERN_FUSE=1 TERN_QUANT_KERNEL=v1
b q4_unfused_v2 "$Q" TERN_FUSE=0 TERN_QUANT_KERNEL=v2
b q4_unfused_v1 "$Q" TERN_FUSE=0 TERN_QUANT_KERNEL=v1
rm -rf "$Q" $C/tern
echo "total $(( $(date +%s) - T0 )) s"

echo "== table"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
floor = {"bf16": 266.0, "q4": 941.0}  # docs/perf/cuda-model.md, quant.md (copy floor / weight bytes)
print(f"{'run':16s} {'decode tok/s':>12s} {'% floor':>8s} {'prefill tok/s':>13s} {'TTFT ms':>8s} {'weight GB':>9s}")
for n in ["bf16_fused", "bf16_unfused", "q4_fused_v2", "q4_fused_v1", "q4_unfused_v2", "q4_unfused_v1"]:
    try: j = json.load(open(f"{out}/bench_{n}.json"))
    except Exception: print(f"{n:16s} (no result)"); continue
    d = j.get("decode_tok_s", 0)
    print(f"{n:16s} {d:12.1f} {100*d/floor[n.split('_')[0]]:7.0f}% {j.get('prefill_tok_s',0):13.0f} "
          f"{j.get('ttft_ms',0):8.2f} {j.get('weight_bytes',0)/1e9:9.2f}")
PY
for k in "${!RC[@]}"; do printf '%s=%s ' "$k" "${RC[$k]}"; done; echo
