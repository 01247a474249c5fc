#!/usr/bin/env bash
# Builds the libFuzzer targets (clang) and runs each for a bounded time on its
# seed corpus. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]  (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
scripts/install-deps.sh
cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j"$(nproc)"
status=0
for bin in build/fuzz/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus=tests/fuzz/corpus/${name#fuzz_}
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  if ! "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=0 "$work" \
        >"build/fuzz/$name.log" 2>&1; then
    echo "fuzz: $name FAILED"; tail -40 "build/fuzz/$name.log"; status=1
  fi
  rm -rf "$work"
done
[ $status -eq 0 ] && echo "fuzz: all targets ran clean"
exit $status
