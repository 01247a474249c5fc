#!/usr/bin/env bash
# Runs on the GPU machine the device-sampling checks (issue 5) with binaries
# built here by
#   TERN_GPU_BUILD=build/gsample TERN_GPU_CARRY=.gpu-carry/sample \
#     TERN_GPU_EXTRA="test_sample_cuda test_sample_engine_cuda" scripts/gpu-decode-prebuild.sh
# (carry .gpu-carry/sample): the sample op against the CPU sampler, the
# engine with TERN_GPU_SAMPLE on and off, test_ops_cuda as a sanity check;
# then a Llama-3.1-8B-shaped bf16 model through `tern bench --concurrency 64`
# greedy, and sampled with device sampling on and off (top_k 50 + top_p 0.95
# for 128 tokens; top_p 0.95 alone, which sorts the whole row on the CPU,
# for 32). Logs and JSON go to $OUT.
# Env: GPU_SAMPLE_TESTS lists the tests run first; GPU_SAMPLE_BENCH=0 skips the model and benches; GPU_SAMPLE_RUNS lists
# the bench runs (default "greedy topk_on topk_off topp_on topp_off").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-sample-out}
MODEL=/tmp/tern-llama8b
mkdir -p "$OUT"
. scripts/gpu-carry.sh
carry_unpack "${TERN_GPU_CARRY:-.gpu-carry/sample}"
echo "== binaries of commit $(cat $C/commit)"
export TERN_TEST_FIXTURES=$PWD/tests/fixtures
for t in ${GPU_SAMPLE_TESTS:-test_sample_cuda test_sample_engine_cuda test_ops_cuda}; do
  cr timeout 120 $C/$t >"$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "draws equal|mismatch|request|PASSED|FAILED" "$OUT/$t.log" | head -40
done
[ "${GPU_SAMPLE_BENCH:-1}" = 0 ] && exit 0
timeout 100 python3 tools/make_model.py --preset llama-3.1-8b --out "$MODEL" \
  --tokenizer-dir $C/tok-llama3_1 >"$OUT/make_model.log" 2>&1; echo "make_model rc=$?"
B="$C/tern bench --model $MODEL --device cuda --concurrency 64 --prompt-len 128 --json"
RUNS=" ${GPU_SAMPLE_RUNS:-greedy topk_on topk_off topp_on topp_off} "
run() { # name, env value of TERN_GPU_SAMPLE, bench flags...
  local n=$1 g=$2; shift 2
  [[ "$RUNS" == *" $n "* ]] || return 0
  TERN_GPU_SAMPLE=$g cr timeout 150 $B "$@" >"$OUT/$n.json" 2>"$OUT/$n.err"; echo "$n rc=$?"
}
run greedy 1 --gen 128
run topk_on 1 --gen 128 --temperature 0.8 --top-k 50 --top-p 0.95
run topk_off 0 --gen 128 --temperature 0.8 --top-k 50 --top-p 0.95
run topp_on 1 --gen 32 --temperature 0.8 --top-p 0.95
run topp_off 0 --gen 32 --temperature 0.8 --top-p 0.95
rm -rf "$MODEL"
find "$OUT" -type f -empty -delete
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
print("%-10s %12s %10s %10s %10s" % ("run", "output/s", "TTFT p50", "ITL p50", "wall s"))
for n in ("greedy", "topk_on", "topk_off", "topp_on", "topp_off"):
    try: r = json.load(open(os.path.join(out, n + ".json")))["results"][0]
    except Exception: r = {}
    print("%-10s %12.1f %10.1f %10.2f %10.2f" % (n, r.get("output_tok_s", 0),
          r.get("ttft_p50_ms", 0), r.get("itl_p50_ms", 0), r.get("wall_s", 0)))
PY
