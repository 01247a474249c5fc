#!/usr/bin/env bash
# The decode step kernel's measurements in one device call (docs/perf/quant.md):
# test_step_cuda (+ GPU_STEP_TESTS), then the 8B-shaped 4-bit model through
# `tern bench` (batch 1, prompt 512 + 64 new) with the kernel as it is (its
# per-block stamps summarised by scripts/step-stamps.py), op by op, and the
# timing-only variants (no phases, no arithmetic), or GPU_STEP_VARIANTS.
# GPU_STEP_B=DIR: a second carry (another build, e.g. the base of a change)
# benched on the same model, interleaved with this one (A B A B: calls
# move a few percent, builds compared in one call do not; GPU_STEP_REPS pairs, 2); GPU_STEP_AB_ENVS="A=1
# B=2+C=3": both builds once more under each of those settings.
# GPU_STEP_MULTI="F M ...": TERN_GPU_CARRY is a carry packed by
# scripts/gpu-step-pack.sh; each NAME's test_step_cuda runs too, and every
# build (the base at the top as "base", then each NAME) is benched in turn,
# GPU_STEP_REPS rounds, on the one model (GPU_STEP_MULTI_ENVS="A=1+B=2 C=3":
# each once more under each setting; GPU_STEP_PL="16:128": each once more at
# that prompt length and number of new tokens; GPU_STEP_STAMPS_PL="2048:64": every
# build stamped at those lengths; GPU_STEP_MULTI_STAMPS=1: one more
# stamped run of each, summarised; GPU_STEP_CONC="1 8": each build through the
# serving loop too, `tern bench --concurrency` at each level, 64 new tokens).
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
[ -n "${GPU_STEP_B:-}${GPU_STEP_MULTI:-}" ] && export GPU_CHECK_KEEP=1
# the SM / memory clocks and power every 100 ms meanwhile (is the SM at its boost clock?)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv \
  -lms 100 >"$OUT/smi.csv" 2>/dev/null &
SMI=$!
OUT=$OUT bash scripts/gpu-check.sh >"$OUT/check.txt" 2>&1
. scripts/gpu-carry.sh # cr; $C: the carry gpu-check.sh unpacked
# One `tern bench` of the generated 4-bit model: binary $1, output $OUT/$2.json
# (labelled by $2 past its first "_"), its line appended to file $3, settings
# $4 (NAME=value[+...]; STEP_PL=N / STEP_GEN=N there: the prompt and new tokens,
# 512 and 64 by default).
step_bench() {
  local STEP_PL=512 STEP_GEN=64 kv
  for kv in $(echo "${4:-}" | tr '+' ' '); do
    case $kv in STEP_PL=* | STEP_GEN=*) local "$kv" ;; esac
  done
  cr timeout 60 env $(echo "${4:-}" | tr '+' ' ') "$1" bench --model /tmp/tern-llama8b-q4 --device cuda \
    --prompt-len $STEP_PL --gen $STEP_GEN --reps 3 --json >"$OUT/$2.json" 2>"$OUT/$2.err"
  python3 scripts/step-floor.py "$OUT/$2.json" "$OUT/copy_rate.txt" "${2#*_}" /tmp/tern-llama8b-q4 \
    >>"$3" 2>&1
}
if [ -n "${GPU_STEP_B:-}" ]; then
  ab_bench() { # carry dir $1 unpacked into $2, label $3, settings $4 (NAME=value[+...])
    (C=$2 && carry_unpack "$1" && step_bench $C/tern "ab_$3" "$OUT/ab.txt" "${4:-}")
  }
  for r in $(seq 1 ${GPU_STEP_REPS:-2}); do
    ab_bench "$TERN_GPU_CARRY" /tmp/tern-carry "A$r"
    ab_bench "$GPU_STEP_B" /tmp/tern-carry-b "B$r"
  done
  for e in ${GPU_STEP_AB_ENVS:-}; do # both builds once more under each setting
    ab_bench "$TERN_GPU_CARRY" /tmp/tern-carry "A:$e" "$e"
    ab_bench "$GPU_STEP_B" /tmp/tern-carry-b "B:$e" "$e"
  done
  rm -rf /tmp/tern-llama8b /tmp/tern-llama8b-q4
fi
if [ -n "${GPU_STEP_MULTI:-}" ]; then
  export TERN_TEST_FIXTURES=$PWD/tests/fixtures
  multi_bench() { # binary dir $1, label $2, settings $3 (NAME=value[+...])
    step_bench "$1/tern" "multi_$2" "$OUT/multi.txt" "${3:-}"
  }
  build_dir() { # the unpacked build of name $1 (base: the carry's top)
    if [ "$1" = base ]; then echo $C; else echo $C/$1; fi
  }
  for v in $GPU_STEP_MULTI; do
    echo "== $v: commit $(cat $C/$v/commit)" >>"$OUT/multi_tests.txt"
    cr timeout 90 $C/$v/test_step_cuda >"$OUT/test_step_cuda_$v.log" 2>&1
    echo "test_step_cuda rc=$?" >>"$OUT/multi_tests.txt"
    grep -h "PASSED\|FAILED\|step vs\|wide model" "$OUT/test_step_cuda_$v.log" | tail -4 >>"$OUT/multi_tests.txt"
  done
  for r in $(seq 1 ${GPU_STEP_REPS:-2}); do
    multi_bench $C "base$r"
    for v in $GPU_STEP_MULTI; do multi_bench $C/$v "$v$r"; done
  done
  for e in ${GPU_STEP_MULTI_ENVS:-}; do # every build once more under each setting
    multi_bench $C "base:$e" "$e"
    for v in $GPU_STEP_MULTI; do multi_bench $C/$v "$v:$e" "$e"; done
  done
  for pg in ${GPU_STEP_PL:-}; do # every build once more at PROMPT:NEW lengths (GPU_STEP_PL="16:128")
    for v in base $GPU_STEP_MULTI; do
      multi_bench "$(build_dir $v)" "$v@$pg" "STEP_PL=${pg%%:*}+STEP_GEN=${pg#*:}"
    done
  done
  for v in base $GPU_STEP_MULTI; do # the serving loop, one request at a time (GPU_STEP_CONC="1")
    d=$(build_dir $v)
    for cc in ${GPU_STEP_CONC:-}; do
      cr timeout 120 $d/tern bench --model /tmp/tern-llama8b-q4 --device cuda --concurrency $cc \
        --max-seqs $cc --prompt-len 512 --gen 64 >"$OUT/conc_${v}_$cc.txt" 2>&1
      echo "== $v concurrency $cc: $(tail -1 "$OUT/conc_${v}_$cc.txt")" >>"$OUT/conc.txt"
    done
  done
  if [ "${GPU_STEP_MULTI_STAMPS:-0}" = 1 ]; then
    for v in base $GPU_STEP_MULTI; do
      d=$(build_dir $v)
      multi_bench $d "stamped_$v" "TERN_CUDA_STEP_STAMPS=$OUT/stamps_$v.csv"
      echo "== $v" >>"$OUT/multi_stamps.txt"
      python3 scripts/step-stamps.py "$OUT/stamps_$v.csv" >>"$OUT/multi_stamps.txt" 2>&1
    done
  fi
  for pg in ${GPU_STEP_STAMPS_PL:-}; do # every build stamped at other lengths (GPU_STEP_STAMPS_PL="2048:64")
    for v in base $GPU_STEP_MULTI; do
      d=$(build_dir $v)
      multi_bench $d "stamped_$v@$pg" \
        "TERN_CUDA_STEP_STAMPS=$OUT/stamps_$v@$pg.csv+STEP_PL=${pg%%:*}+STEP_GEN=${pg#*:}"
      echo "== $v at $pg" >>"$OUT/multi_stamps.txt"
      python3 scripts/step-stamps.py "$OUT/stamps_$v@$pg.csv" >>"$OUT/multi_stamps.txt" 2>&1
    done
  done
  rm -rf /tmp/tern-llama8b /tmp/tern-llama8b-q4
fi
kill $SMI 2>/dev/null
grep -E "binaries|rc=[^0]|FAILED|copy rate|^single" "$OUT/check.txt"
python3 - "$OUT/smi.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1]))][1:]
busy = [(float(r[1].split()[0]), float(r[3].split()[0])) for r in rows
        if len(r) > 3 and float(r[3].split()[0]) > 250.0]  # samples under load (> 250 W)
if busy:
    sm = sorted(b[0] for b in busy); pw = sorted(b[1] for b in busy)
    print("under load (%d samples > 250 W): SM clock median %.0f MHz (min %.0f), power median %.0f W (max %.0f)"
          % (len(busy), sm[len(sm) // 2], sm[0], pw[len(pw) // 2], pw[-1]))
PY
grep -h "step vs\|wide model\|differ" "$OUT/test_step_cuda.log" 2>/dev/null
[ -f "$OUT/ab.txt" ] && echo "A = $TERN_GPU_CARRY, B = ${GPU_STEP_B:-}:" && cat "$OUT/ab.txt"
echo "(TUNE=8: no phases, TUNE=16: no arithmetic; both give wrong logits, timing only)"
[ -f "$OUT/stamps.csv" ] && python3 scripts/step-stamps.py "$OUT/stamps.csv" | tee "$OUT/stamps.txt"
if [ -f "$OUT/multi.txt" ]; then
  cat "$OUT/multi_tests.txt"
  grep -hE "^(== |qkv |o  |gate_up  |down  |attention|GEMV done|launch prologue|between launches)" "$OUT/multi_stamps.txt" 2>/dev/null
  echo "base = the top of $TERN_GPU_CARRY, then $GPU_STEP_MULTI:" && cat "$OUT/multi.txt"
fi
[ -f "$OUT/conc.txt" ] && head -3 "$OUT/conc_base_${GPU_STEP_CONC%% *}.txt" | tail -2 && cat "$OUT/conc.txt"
tar cJf /tmp/step.tar.xz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/step.tar.xz "$OUT/"
