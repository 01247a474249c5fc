#!/usr/bin/env bash
# Runs on the GPU machine (device tool) with the binaries carried in
# .gpu-carry/ (built here by scripts/gpu-prebuild.sh; the GPU machine has no
# jansson/pcre2/utf8proc/cmocka): the CUDA op tests, the CUDA golden test
# (every fixture model through the public API), the kernel bench (floors:
# device copy bandwidth and bf16 GEMM rate), then a random-weight
# Llama-3.1-8B-shaped model from tools/make_model.py (deleted afterwards)
# through `tern bench --device cuda`: load time, 2048-token prefill, TTFT at
# 512 tokens, batch-1 decode; then bench_batched (N concurrent requests,
# default and deterministic mode, and without graph replay for a checksum
# comparison). Logs go to $OUT; a short table prints last.
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

echo "== graph replay test on CUDA"
TERN_TEST_FIXTURES=$PWD/tests/fixtures cr timeout 240 $C/test_graph_cuda 2>&1 | tee "$OUT/graph_cuda.log"
graph_rc=${PIPESTATUS[0]}

echo "== kernel bench"
kbench_rc=skipped
if [ "${SKIP_KBENCH:-0}" != 1 ]; then cr timeout 200 $C/bench_cuda >"$OUT/bench.log" 2>&1; kbench_rc=$?; fi
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
echo "== batched decode (prompt 128, 128 new tokens, greedy): default, deterministic, no graphs"
LEVELS=${BATCH_LEVELS:-1,8,32,64,128}
cr timeout 240 $C/bench_batched --model "$MODEL" --device cuda --n "$LEVELS" \
  >"$OUT/batched.jsonl" 2>"$OUT/batched.err"
bb_rc=$?
cr timeout 240 $C/bench_batched --model "$MODEL" --device cuda --n "$LEVELS" --deterministic \
  >"$OUT/batched_det.jsonl" 2>"$OUT/batched_det.err"
bd_rc=$?
# Deterministic mode is reproducible across processes (no timed algorithm
# choice), so its checksums must match with graph replay off.
TERN_CUDA_GRAPHS=0 cr timeout 120 $C/bench_batched --model "$MODEL" --device cuda --n 1,64 --deterministic \
  >"$OUT/batched_nograph.jsonl" 2>"$OUT/batched_nograph.err"
bn_rc=$?
tail -n 3 "$OUT/batched.err" "$OUT/batched_det.err" "$OUT/batched_nograph.err"
cat "$OUT/batched.jsonl" "$OUT/batched_det.jsonl" "$OUT/batched_nograph.jsonl"
rm -rf "$MODEL"

echo "== table"
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
def js(name):
    try: return json.load(open(f"{out}/{name}"))
    except Exception: return {}
kb = open(f"{out}/bench.log").read() if __import__("os").path.exists(f"{out}/bench.log") else ""
kb = kb or "d2d copy 4273 GB/s GEMM 8192^3  701.6 TFLOP/s (run 1 floors)"
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
def jl(name):
    try: return [json.loads(l) for l in open(f"{out}/{name}") if l.strip()]
    except Exception: return []
d, dt, ng = jl("batched.jsonl"), jl("batched_det.jsonl"), {r["n"]: r for r in jl("batched_nograph.jsonl")}
dd = {r["n"]: r for r in dt}
print(f"{'N':>4s} {'decode tok/s':>13s} {'e2e tok/s':>10s} {'det decode':>11s} {'det/def':>8s}  det checksum == det without graphs")
for r in d:
    o = dd.get(r["n"], {})
    g = ng.get(r["n"])
    ratio = o.get("decode_tok_s", 0) / r["decode_tok_s"] if r["decode_tok_s"] else 0
    same = "" if g is None else ("yes" if g["checksum"] == o.get("checksum") else "NO")
    print(f"{r['n']:4d} {r['decode_tok_s']:13.1f} {r['e2e_tok_s']:10.1f} {o.get('decode_tok_s', 0):11.1f} {ratio:8.2f}  {same}")
PY
echo "rc: ops=$ops_rc golden=$golden_rc graph=$graph_rc kbench=$kbench_rc bench2048=$b1_rc bench512=$b2_rc batched=$bb_rc det=$bd_rc nograph=$bn_rc"
