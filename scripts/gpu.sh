#!/usr/bin/env bash
# Runs on the GPU machine (device tool) with the binaries carried in
# .gpu-carry/ (built here by scripts/gpu-prebuild.sh; the GPU machine has no
# jansson/pcre2/utf8proc/cmocka): the CUDA op tests, the CUDA golden test
# (every fixture model through the public API), the kernel bench (floors:
# device copy bandwidth and bf16 GEMM rate), then a random-weight
# Llama-3.1-8B-shaped model from tools/make_model.py (deleted afterwards)
# through `tern bench --device cuda`: load time, 2048-token prefill, TTFT at
# 512 tokens, batch-1 decode. Logs go to $OUT; a short table prints last.
# MEMCHECK=1 adds compute-sanitizer memcheck over the op tests.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
MODEL=${MODEL_DIR:-/tmp/tern-llama-3.1-8b}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
C=.gpu-carry
# The carried libraries only for the carried binaries (python/torch keep the system's).
cr() { LD_LIBRARY_PATH=$PWD/$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} "$@"; }
echo "== carried binaries of commit $(cat $C/commit 2>/dev/null)"

echo "== op tests"
cr timeout 240 $C/test_ops_cuda >"$OUT/test_ops_cuda.log" 2>&1
ops_rc=$?
grep -E "PASSED|FAILED|SKIPPED" "$OUT/test_ops_cuda.log" | head -20
if [ "${MEMCHECK:-0}" = 1 ]; then
  cr timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 $C/test_ops_cuda \
    >"$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$OUT/memcheck.log"
fi

echo "== golden test on CUDA"
TERN_TEST_FIXTURES=$PWD/tests/fixtures cr timeout 240 $C/test_golden_cuda 2>&1 | tee "$OUT/golden_cuda.log"
golden_rc=${PIPESTATUS[0]}

echo "== kernel bench"
cr timeout 200 $C/bench_cuda >"$OUT/bench.log" 2>&1
kbench_rc=$?
sed -n '/==== summary ====/,$p' "$OUT/bench.log"

echo "== make_model llama-3.1-8b"
t0=$(date +%s)
python3 tools/make_model.py --preset llama-3.1-8b --out "$MODEL" --tokenizer-dir $C/tok-llama3_1 \
  2>&1 | tail -3
echo "make_model took $(( $(date +%s) - t0 )) s"
echo "== tern bench"
cr timeout 200 $C/tern bench --model "$MODEL" --device cuda --prompt-len 2048 --gen 128 --reps 3 \
  --json >"$OUT/bench_2048.json" 2>"$OUT/bench_2048.err"
b1_rc=$?
cr timeout 120 $C/tern bench --model "$MODEL" --device cuda --prompt-len 512 --gen 32 --reps 5 \
  --json >"$OUT/bench_512.json" 2>"$OUT/bench_512.err"
b2_rc=$?
tail -n 3 "$OUT/bench_2048.err" "$OUT/bench_512.err"
cat "$OUT/bench_2048.json" "$OUT/bench_512.json"
rm -rf "$MODEL"

echo "== table"
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
def js(name):
    try: return json.load(open(f"{out}/{name}"))
    except Exception: return {}
kb = open(f"{out}/bench.log").read() if __import__("os").path.exists(f"{out}/bench.log") else ""
m = re.search(r"d2d copy.*?([\d.]+) GB/s", kb); copy = float(m.group(1)) if m else 0
m = re.search(r"GEMM 8192\^3\s+([\d.]+) TFLOP/s", kb); gemm = float(m.group(1)) if m else 0
a, b = js("bench_2048.json"), js("bench_512.json")
wb = a.get("weight_bytes") or b.get("weight_bytes") or 0
# FLOPs of a 2048-token prefill: 2 * params per token + causal attention (4 * L * T^2/2 * H*hd)
n_par = a.get("n_params", 0)
flops = 2 * n_par * 2048 + 4 * 32 * (2048 * 2048 / 2) * 4096
dec_floor = copy * 1e9 / wb if wb else 0
pre_floor = gemm * 1e12 / (flops / 2048) if flops else 0
rows = [
  ("copy bandwidth (GB/s)", copy, ""), ("bf16 GEMM (TFLOP/s)", gemm, ""),
  ("load (s)", a.get("load_s", 0), ""),
  ("decode b=1 (tok/s)", a.get("decode_tok_s", 0), f"floor {dec_floor:.0f}, {100*a.get('decode_tok_s',0)/dec_floor:.0f}%" if dec_floor else ""),
  ("prefill 2048 (tok/s)", a.get("prefill_tok_s", 0), f"floor {pre_floor:.0f}, {100*a.get('prefill_tok_s',0)/pre_floor:.0f}%" if pre_floor else ""),
  ("TTFT 2048 (ms)", a.get("ttft_ms", 0), ""),
  ("TTFT 512 (ms)", b.get("ttft_ms", 0), ""),
  ("decode after 512 (tok/s)", b.get("decode_tok_s", 0), ""),
]
print(f"{'metric':28s} {'value':>10s}  note")
for k, v, n in rows: print(f"{k:28s} {v:10.2f}  {n}")
PY
echo "rc: ops=$ops_rc golden=$golden_rc kbench=$kbench_rc bench2048=$b1_rc bench512=$b2_rc"
