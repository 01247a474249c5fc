#!/usr/bin/env bash
# Builds tern and runs the whole test suite with CTest.
#   scripts/test.sh            release build, warnings as errors
#   scripts/test.sh --asan     AddressSanitizer + UndefinedBehaviorSanitizer build
#   scripts/test.sh --cuda     also build the CUDA backend (GPU tests skip without a GPU)
# Extra arguments after -- go to ctest (e.g. -- -R tokenizer).
set -euo pipefail
cd "$(dirname "$0")/.."

preset=release
extra_cmake=()
while [ $# -gt 0 ]; do
  case "$1" in
    --asan) preset=asan ;;
    --cuda) preset=cuda ;;
    --) shift; break ;;
    *) echo "test.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

scripts/install-deps.sh
# Python packages for the end-to-end server tests (openai client, prometheus parser).
scripts/setup-pytest.sh || echo "test.sh: server test venv unavailable; those tests will skip"
jobs=$(nproc)
cmake --preset "$preset" -DTERN_WERROR=ON "${extra_cmake[@]}" >/dev/null
cmake --build "build/$preset" -j"$jobs"
[ "$preset" = asan ] && export TERN_TEST_SANITIZED=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "build/$preset" --output-on-failure -j"$jobs" "$@"
