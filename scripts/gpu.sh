#!/usr/bin/env bash
# gpu.sh SUITE — the one entry for work on a GPU machine.
#
# Here (a machine with nvcc, no GPU needed):
#   scripts/gpu.sh carry     builds the CUDA preset (sm_90a, build/cuda) and packs
#                            every CUDA test, `tern` and bench_batched, the shared
#                            libraries they need beyond CUDA and glibc, and the
#                            Llama-3 tokenizer into .gpu-carry/bins.tar.xz (git-ignored)
# There (the GPU machine has no jansson / pcre2 / cmocka, hence the carry), as
#   run(command="scripts/gpu.sh all", carry=[".gpu-carry"]):
#   scripts/gpu.sh test      every carried CUDA test (MEMCHECK=1: test_ops_cuda under
#                            compute-sanitizer memcheck too, RACECHECK=1 racecheck)
#   scripts/gpu.sh bench     floors (device copy rate, bf16 GEMM rate, by torch), then
#                            per model of GPU_MODELS (tools/make_model.py presets, each
#                            "preset:fmt[,fmt]", fmt bf16 or q4; default
#                            "llama-3.1-8b:bf16,q4"): batch-1 decode (prompt 512 + 64
#                            and 16 + 128), prefill 2048, and GPU_CONC streams (default
#                            64) of 128 + 128 (GPU_BENCHES="b1 b1s pre conc" picks);
#                            a table against the floors prints last
#   scripts/gpu.sh profile   the 4-bit 8B's decode step stamped (TERN_CUDA_STEP_STAMPS,
#                            summarised by scripts/step-stamps.py)
#   scripts/gpu.sh all       test, then bench
# Logs and JSON go to $OUT, packed at the end into $OUT/logs-SUITE.tar.xz beside
# the *.txt summaries (the device tool brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
SUITE=${1:-all}
CARRY=.gpu-carry
C=${C:-/tmp/tern-carry}
OUT=${OUT:-/tmp/tern-gpu-out}

carry() {
  local B=build/cuda
  export PATH=$PATH:/usr/local/cuda/bin
  cmake --preset cuda -DTERN_WERROR=ON >/dev/null || return 1
  cmake --build $B -j"$(nproc)" || return 1
  local bins
  bins=$(find $B/tests -type f -perm -u+x \( -name 'test_*cuda' -o -name test_golden_quant \))
  bins="$bins $B/tern $(find $B -type f -perm -u+x -name bench_batched | head -1)"
  rm -rf $CARRY && mkdir -p $CARRY/stage/tok-llama3_1
  cp $bins $CARRY/stage/ && strip $CARRY/stage/* 2>/dev/null
  ldd $bins | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|cuda|libcublas' |
    while read -r lib; do cp -L "$lib" $CARRY/stage/; done
  for f in tokenizer.json tokenizer_config.json; do
    xz -dc tests/fixtures/data/tokenizers/llama3_1/$f.xz >$CARRY/stage/tok-llama3_1/$f
  done
  git rev-parse --short HEAD >$CARRY/stage/commit
  # one solid stream: the binaries share most of their bytes (static CUDA runtime, libtern)
  tar -C $CARRY/stage -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB >$CARRY/bins.tar.xz
  rm -rf $CARRY/stage
  du -sh $CARRY
}

unpack() {
  mkdir -p "$C" "$OUT"
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    $CARRY/bins.tar.xz "$C" || { echo "gpu.sh: no carry (run scripts/gpu.sh carry here first)"; exit 1; }
  echo "== binaries of commit $(cat $C/commit); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
}
# the carried libraries first on the library path, for the carried binaries only
cr() { LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} "$@"; }

tests() {
  export TERN_TEST_FIXTURES=$PWD/tests/fixtures
  local t rc fails=0
  for f in "$C"/test_*; do
    t=$(basename "$f")
    cr env TERN_QUANT_DEVICE=cuda timeout 300 "$f" >"$OUT/$t.log" 2>&1
    rc=$?
    [ $rc = 0 ] || fails=$((fails + 1))
    printf '%-28s rc=%d  %s\n' "$t" $rc "$(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/$t.log" | tr '\n' ' ')" |
      tee -a "$OUT/tests.txt"
  done
  for tool in memcheck racecheck; do
    local var=${tool^^}
    [ "${!var:-0}" = 1 ] || continue
    cr timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$C"/test_ops_cuda \
      >"$OUT/$tool.log" 2>&1
    echo "$tool test_ops_cuda rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log")"
  done
  echo "== CUDA tests: $fails failed" | tee -a "$OUT/tests.txt"
}

floors() {
  python3 - >"$OUT/floors.json" <<'PY'
import json, torch
def med(f, n=12, warm=3):
    ts = []
    for i in range(n + warm):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); torch.cuda.synchronize()
        if i >= warm: ts.append(s.elapsed_time(e) / 1e3)
    return sorted(ts)[len(ts) // 2]
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
copy = 2 * (1 << 30) / med(lambda: b.copy_(a))
x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda"); y = torch.randn_like(x)
gemm = 2 * 8192 ** 3 / med(lambda: x @ y)
print(json.dumps({"copy_bytes_s": copy, "gemm_flop_s": gemm}))
PY
  cat "$OUT/floors.json"
}

# bench_model PRESET FMT: make (and quantize) the model, bench it, delete it
bench_model() {
  local preset=$1 fmt=$2 dir=/tmp/tern-$1 m tag=$1-$2
  if [ ! -d "$dir" ]; then
    timeout 300 python3 tools/make_model.py --preset "$preset" --out "$dir" \
      --tokenizer-dir $C/tok-llama3_1 >"$OUT/make-$preset.log" 2>&1 || { echo "make_model $preset failed"; return; }
  fi
  m=$dir
  if [ "$fmt" = q4 ]; then
    m=$dir-q4
    [ -d "$m" ] || cr timeout 300 $C/tern quantize --model "$dir" --out "$m" --bits 4 --group-size 64 \
      >"$OUT/quantize-$preset.log" 2>&1 || { echo "quantize $preset failed"; return; }
  fi
  cp "$m/config.json" "$OUT/config-$tag.json"
  local b="cr timeout 240 $C/tern bench --model $m --device cuda --json" k
  for k in ${GPU_BENCHES:-b1 b1s pre conc}; do
    case $k in
    b1) $b --prompt-len 512 --gen 64 --reps 3 ;;
    b1s) $b --prompt-len 16 --gen 128 --reps 3 ;;
    pre) $b --prompt-len 2048 --gen 16 --reps 3 ;;
    conc) $b --concurrency "${GPU_CONC:-64}" --prompt-len 128 --gen 128 ;;
    esac >"$OUT/$k-$tag.json" 2>"$OUT/$k-$tag.err"
  done
  echo "benched $tag"
}

bench() {
  floors
  local spec preset fmts fmt
  for spec in ${GPU_MODELS:-llama-3.1-8b:bf16,q4}; do
    preset=${spec%%:*}
    fmts=${spec#*:}
    for fmt in ${fmts//,/ }; do bench_model "$preset" "$fmt"; done
    rm -rf "/tmp/tern-$preset" "/tmp/tern-$preset-q4"
  done
  python3 scripts/gpu_table.py "$OUT" | tee "$OUT/table.txt"
}

profile() {
  local dir=/tmp/tern-llama-3.1-8b
  timeout 300 python3 tools/make_model.py --preset llama-3.1-8b --out $dir \
    --tokenizer-dir $C/tok-llama3_1 >"$OUT/make.log" 2>&1
  cr timeout 300 $C/tern quantize --model $dir --out $dir-q4 --bits 4 --group-size 64 >/dev/null 2>&1
  cr env TERN_CUDA_STEP_STAMPS="$OUT/stamps.csv" timeout 120 $C/tern bench --model $dir-q4 \
    --device cuda --prompt-len 512 --gen 64 --reps 3 --json >"$OUT/stamped.json" 2>&1
  python3 scripts/step-stamps.py "$OUT/stamps.csv" | tee "$OUT/stamps.txt"
}

# The device brings back at most 8 files: everything else under $OUT goes
# into one archive.
pack() { # one archive a suite (logs-test.tar.xz, ...), so suites run in turn keep theirs
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name 'logs-*.tar.xz' ! -name '*.txt' -print0 |
    tar --null -T - -cJf "logs-$SUITE.tar.xz" && find . -maxdepth 1 -type f \
    ! -name 'logs-*.tar.xz' ! -name '*.txt' -delete)
}

case $SUITE in
carry) carry ;;
test) unpack && tests ;;
bench) unpack && bench ;;
profile) unpack && profile ;;
all) unpack && tests && bench ;;
*) sed -n '2,24p' "$0"; exit 2 ;;
esac
[ "$SUITE" = carry ] || pack
