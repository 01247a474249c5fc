#!/usr/bin/env bash
# Runs on the GPU machine (Firecracker runtime: ncu reads counters there):
# where does a decode step's time go? With the carry of
#   TERN_GPU_BUILD=build/gpu-quant TERN_GPU_CARRY=.gpu-carry/quant scripts/gpu-decode-prebuild.sh
# (+ quant_probe.xz, dev/kernels/quant_probe.cu built with nvcc, optional):
#   1. quant_probe (which part of a 4-bit GEMV's work costs bandwidth);
#   2. Llama-3.1-8B-shaped bf16 and 4-bit models, `tern bench` under ncu
#      (one metric: each kernel's duration, no cache flush, op by op): the
#      kernels of one decode step, grouped by name, with their sum;
#   3. ncu's memory / warp-state sections for the decode GEMVs of the first
#      decode step (qkv, o, gate_up, down) and the lm_head.
# Env: TRACE=1 (the real decode step, graphs on, as a time line: dev/trace/cupti_trace.c
# + scripts/step-timeline.py; TRACE_RUNS="q4 q4:NAME=value,NAME2=v bf16"), PROFILE_MODELS="q4 bf16" (models made), PROFILE_STEP_MODELS (step tables; default
# PROFILE_MODELS, "" for none), PROFILE_PROBE=1, PROFILE_SECTIONS=1, PROFILE_SPECS (which
# kernels get sections: model:kernel:skip:count[:NAME=value]), PROFILE_SEC (ncu sections),
# PROFILE_PROMPT (their prompt length, 64), PROFILE_EXPORT=1 (the report kept, its SASS page as CSV).
# Logs under $OUT; the tables print to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-profile-out}
MODEL=/tmp/tern-llama8b Q=/tmp/tern-llama8b-q4
mkdir -p "$OUT"
. scripts/gpu-carry.sh
carry_unpack "${TERN_GPU_CARRY:-.gpu-carry/quant}"
echo "== binaries of commit $(cat $C/commit)"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
if [ "${PROFILE_PROBE:-1}" = 1 ] && [ -f "${TERN_GPU_CARRY:-.gpu-carry/quant}/quant_probe.xz" ]; then
  python3 -c "import lzma,sys,shutil; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
    "${TERN_GPU_CARRY:-.gpu-carry/quant}/quant_probe.xz" "$C/quant_probe" && chmod +x "$C/quant_probe"
  timeout 120 "$C/quant_probe" | tee "$OUT/quant_probe.log"
fi
export TERN_TEST_FIXTURES=$PWD/tests/fixtures
for t in ${PROFILE_TESTS-test_ops_cuda}; do # PROFILE_TESTS="" runs none
  cr timeout 90 $C/$t >"$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "PASSED|FAILED|differ" "$OUT/$t.log" | tail -4
done
want() { case " ${PROFILE_MODELS:-q4 bf16} " in *" $1 "*) return 0 ;; esac; return 1; }
if [ ! -d "$MODEL" ]; then
  timeout 100 python3 tools/make_model.py --preset llama-3.1-8b --out "$MODEL" \
    --tokenizer-dir $C/tok-llama3_1 >"$OUT/make_model.log" 2>&1; echo "make_model rc=$?"
fi
if want q4 && [ ! -d "$Q" ]; then
  cr timeout 70 $C/tern quantize --model "$MODEL" --out "$Q" --bits 4 --group-size 64 \
    >"$OUT/quantize.log" 2>&1; echo "quantize rc=$?"
fi
if [ "${TRACE:-0}" = 1 ]; then
  # the real step (CUDA graph + PDL) on a time line: dev/trace/cupti_trace.c injected
  CUPI=$(dirname "$(find /usr/local/cuda*/ -name cupti.h 2>/dev/null | head -1)")
  CUPL=$(dirname "$(find /usr/local/cuda*/ -name 'libcupti.so' 2>/dev/null | head -1)")
  KREC=$(grep -ohE 'CUpti_ActivityKernel[0-9]+' $CUPI/cupti_activity.h | sort -V | tail -1)
  gcc -O2 -shared -fPIC -I$CUPI -DKREC=$KREC dev/trace/cupti_trace.c -L$CUPL -lcupti \
    -Wl,-rpath,$CUPL -o /tmp/libtrace.so; echo "cupti_trace ($KREC) rc=$?"
  for run in ${TRACE_RUNS:-q4}; do # model[:NAME=value,...]
    n=${run%%:*} ev=$(echo "${run#$n}" | sed 's/^://; s/,/ /g')
    d=$MODEL; [ $n = q4 ] && d=$Q
    f=/tmp/trace_$(echo "$run" | tr -c 'A-Za-z0-9_\n' _).csv
    env $ev CUDA_INJECTION64_PATH=/tmp/libtrace.so TRACE_OUT=$f LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} \
      timeout 200 $C/tern bench --model "$d" --device cuda --prompt-len 512 --gen 64 --reps 1 >"$OUT/trace.log" 2>&1
    echo "trace $run rc=$? $(wc -l <$f) kernels"
    python3 scripts/step-timeline.py $f | head -${TRACE_LINES:-40}
  done
fi
[ -z "$NCU" ] && exit 0
for n in ${PROFILE_STEP_MODELS-${PROFILE_MODELS:-q4 bf16}}; do
  d=$MODEL; [ $n = q4 ] && d=$Q
  # every kernel's duration: prompt 64 (prefill), then 4 decode steps, op by op
  TERN_CUDA_GRAPHS=0 cr timeout 240 "$NCU" --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw \
    $C/tern bench --model "$d" --device cuda --prompt-len 64 --gen 4 --reps 1 \
    >"$OUT/ncu_step_$n.csv" 2>"$OUT/ncu_step_$n.err"
  echo "ncu step $n rc=$?"
  python3 scripts/ncu-step-table.py "$OUT/ncu_step_$n.csv"
done
if [ "${PROFILE_SECTIONS:-1}" = 1 ]; then
  SEC=${PROFILE_SEC:-"--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"}
  # model:kernel:launches skipped:launches profiled[:NAME=value set for the run]
  for spec in ${PROFILE_SPECS:-q4:k_qgemv_mma:0:4 q4:k_qgemv_mma:128:1 bf16:k_gemv_bf16:0:4 bf16:k_gemv_bf16:128:1}; do
    IFS=: read -r n k skip cnt ev <<<"$spec"
    want $n || continue
    d=$MODEL; [ $n = q4 ] && d=$Q
    f="$OUT/ncu_${n}_${k}_${skip}.txt"
    env ${ev:-PROFILE_NOTHING=1} TERN_CUDA_GRAPHS=0 LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} \
      timeout 200 "$NCU" --clock-control none $SEC --kernel-name "$k" \
      --launch-skip "$skip" --launch-count "$cnt" ${PROFILE_EXPORT:+--export "${f%.txt}"} \
      $C/tern bench --model "$d" --device cuda --prompt-len "${PROFILE_PROMPT:-64}" --gen 2 --reps 1 >"$f" 2>&1
    echo "== ncu sections $n $k skip $skip rc=$?"
    if [ -n "${PROFILE_EXPORT:-}" ]; then # per-instruction samples (SASS), for ncu-sass-stalls.py
      "$NCU" --import "${f%.txt}.ncu-rep" --page source --csv --print-source sass >"${f%.txt}_sass.csv" 2>&1
      echo "source page rc=$? $(wc -l <"${f%.txt}_sass.csv") lines"
    fi
    if [ -n "${PROFILE_SUMMARY:-}" ]; then python3 scripts/ncu-stalls.py "$f"; continue; fi
    grep -E "^  [a-z_]+.*\(|Grid Size|Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued|Stall|Mem Busy|Max Bandwidth|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Est\. Speedup|Theoretical Occupancy|Block Limit" "$f" | head -${PROFILE_LINES:-60}
  done
fi
