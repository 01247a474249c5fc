#!/usr/bin/env bash
# Runs on the GPU machine with the binaries of scripts/gpu-decode-prebuild.sh
# (.gpu-carry/decode/bins.tar.xz): the CUDA correctness tests with the
# library's defaults, then a Llama-3.1-8B-shaped model (bf16 and 4-bit g64)
# through `tern bench`: batch-1 (prompt 512, 64 new tokens) and batched
# (64 concurrent, prompt 128, 128 new tokens). Models are deleted; logs go to
# $OUT; a short table prints last.
# Env: TERN_GPU_CARRY (default .gpu-carry/decode), GPU_CHECK_BATCHED=0 skips
# the 64-sequence runs, GPU_CHECK_BENCH=0 skips the model and benches,
# GPU_CHECK_RACECHECK=1 runs test_ops_cuda under compute-sanitizer racecheck,
# GPU_CHECK_LONG=1 adds a 2048-token prompt bench (prefill) per model,
# GPU_CHECK_Q4_KERNELS="v4 v1 TERN_CUDA_FUSE_OPS=qkr,glu,arn" adds 4-bit batch-1 runs
# with those GEMVs (or environment settings), GPU_CHECK_BF16_ENVS="A=1+B=2 C=3" bf16 ones
# (one run per space-separated entry, its settings joined by "+", values may hold commas),
# GPU_CHECK_TESTS="t1 t2" runs only those tests ("" none), GPU_CHECK_KEEP=1 leaves the models in /tmp/tern-llama8b{,-q4}, GPU_CHECK_MODELS="q4:/tmp/tern-llama8b-q4"
# benches only the 4-bit model.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check-out}
MODEL=/tmp/tern-llama8b Q=/tmp/tern-llama8b-q4
mkdir -p "$OUT"
. scripts/gpu-carry.sh
carry_unpack "${TERN_GPU_CARRY:-.gpu-carry/decode}"
echo "== binaries of commit $(cat $C/commit)"
export TERN_TEST_FIXTURES=$PWD/tests/fixtures
TESTS="test_ops_cuda test_quant_cuda test_golden_cuda test_graph_cuda"
for f in $C/test_*cuda; do # extra CUDA tests carried (TERN_GPU_EXTRA)
  t=$(basename "$f"); case " $TESTS " in *" $t "*) ;; *) TESTS="$TESTS $t" ;; esac
done
TESTS=${GPU_CHECK_TESTS-$TESTS} # GPU_CHECK_TESTS="test_step_cuda": only those ("": none)
for t in $TESTS; do
  cr timeout 90 $C/$t >"$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "PASSED|FAILED" "$OUT/$t.log" | tail -2
done
if [ "${GPU_CHECK_RACECHECK:-0}" = 1 ]; then
  cr timeout 240 compute-sanitizer --tool racecheck --print-limit 20 $C/test_ops_cuda \
    >"$OUT/racecheck.log" 2>&1; echo "racecheck test_ops_cuda rc=$?"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -3
fi
if [ -z "${GPU_CHECK_TESTS+x}" ]; then
  TERN_QUANT_DEVICE=cuda cr timeout 60 $C/test_golden_quant >"$OUT/test_golden_quant.log" 2>&1
  echo "test_golden_quant (cuda) rc=$?"
fi
[ "${GPU_CHECK_BENCH:-1}" = 0 ] && exit 0
timeout 100 python3 tools/make_model.py --preset llama-3.1-8b --out "$MODEL" \
  --tokenizer-dir $C/tok-llama3_1 >"$OUT/make_model.log" 2>&1; echo "make_model rc=$?"
cr timeout 70 $C/tern quantize --model "$MODEL" --out "$Q" --bits 4 --group-size 64 \
  >"$OUT/quantize.log" 2>&1; echo "quantize rc=$?"
# the floor of issue 4: device-to-device copy rate (read + write) in this run
python3 - >"$OUT/copy_rate.txt" 2>&1 <<'PY'
import torch
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
ts = []
for i in range(12):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); torch.cuda.synchronize()
    if i >= 2: ts.append(s.elapsed_time(e))
ts.sort()
print("%.1f" % (2 * (1 << 30) / (ts[len(ts) // 2] / 1e3) / 1e9))
PY
echo "copy rate $(cat "$OUT/copy_rate.txt") GB/s"
for m in ${GPU_CHECK_MODELS:-bf16:$MODEL q4:$Q}; do
  n=${m%%:*} d=${m#*:}
  cr timeout 60 $C/tern bench --model "$d" --device cuda --prompt-len 512 --gen 64 --reps 3 \
    --json >"$OUT/single_$n.json" 2>"$OUT/single_$n.err"; echo "single $n rc=$?"
  # batch 1 again under other settings: GPU_CHECK_Q4_KERNELS="v6 NAME=value" (4-bit GEMV
  # versions or settings), GPU_CHECK_BF16_ENVS="NAME=value[+NAME=value]" (dense model)
  extra=${GPU_CHECK_BF16_ENVS:-}; [ $n = q4 ] && extra=${GPU_CHECK_Q4_KERNELS:-}
  for k in $extra; do
    case $k in *=*) e=$(echo "$k" | tr '+' ' ') ;; *) e=TERN_QUANT_KERNEL=$k ;; esac
    f=$(echo "$k" | tr -c 'A-Za-z0-9_\n' _)
    env $e LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} timeout 60 $C/tern bench \
      --model "$d" --device cuda --prompt-len 512 --gen 64 --reps 3 --json \
      >"$OUT/single_${n}_$f.json" 2>"$OUT/single_${n}_$f.err"
    echo "single $n $k rc=$? $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); f=float(open(sys.argv[2]).read())*1e9/j['decode_bytes']; print('%.1f tok/s (%.1f%% of %.1f)' % (j['decode_tok_s'], 100*j['decode_tok_s']/f, f))" "$OUT/single_${n}_$f.json" "$OUT/copy_rate.txt" 2>/dev/null)"
  done
  if [ "${GPU_CHECK_LONG:-0}" = 1 ]; then
    cr timeout 60 $C/tern bench --model "$d" --device cuda --prompt-len 2048 --gen 32 --reps 3 \
      --json >"$OUT/long_$n.json" 2>"$OUT/long_$n.err"; echo "long $n rc=$?"
  fi
  [ "${GPU_CHECK_BATCHED:-1}" = 0 ] && continue
  cr timeout 90 $C/tern bench --model "$d" --device cuda --concurrency 64 --prompt-len 128 \
    --gen 128 --json >"$OUT/batched_$n.json" 2>"$OUT/batched_$n.err"; echo "batched $n rc=$?"
done
[ "${GPU_CHECK_KEEP:-0}" = 1 ] || rm -rf "$MODEL" "$Q"
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
try: copy = float(open(os.path.join(out, "copy_rate.txt")).read()) * 1e9
except Exception: copy = 0
def js(n):
    try: return json.load(open(os.path.join(out, n)))
    except Exception as e: return {}
print("%-8s %10s %10s %7s %10s %12s %8s %12s" % ("model", "load s", "decode/s", "floor",
      "prefill/s", "64-seq out/s", "TTFT p50", "prefill2048/s"))
for n in ("bf16", "q4"):
    s, b, l = js(f"single_{n}.json"), js(f"batched_{n}.json"), js(f"long_{n}.json")
    r = (b.get("results") or [{}])[0]
    print("%-8s %10.2f %10.1f %7.1f %10.0f %12.0f %8.1f %12.0f" % (n, s.get("load_s", 0),
          s.get("decode_tok_s", 0), copy / s["decode_bytes"] if copy and "decode_bytes" in s else 0, s.get("prefill_tok_s", 0), r.get("output_tok_s", 0),
          r.get("ttft_p50_ms", 0), l.get("prefill_tok_s", 0)))
PY
