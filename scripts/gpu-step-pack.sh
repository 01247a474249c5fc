#!/usr/bin/env bash
# Packs several builds of the decode step kernel into ONE carry, so that one
# device call tests and benches them all on one generated model (the model
# takes ~50 s of a call; a build's bench ~3 s). A carry made by
# scripts/gpu-decode-prebuild.sh is ~22 MB, so only two fit the 64 MiB a call
# carries; the builds differ in little but the kernel, and in one solid xz
# stream (tar sorted by name, a 192 MiB dictionary) every further build's
# `tern` and `test_step_cuda` add ~1-2 MB.
# Usage: scripts/gpu-step-pack.sh OUTDIR BASE NAME=CARRY [NAME=CARRY...]
#   BASE: the carry whose files go at the top (what gpu-check.sh runs: the
#   build to compare against); NAME (letters, digits, _): a subdirectory
#   with that carry's tern, test_step_cuda and commit.
# Device: OUT=$OUT TERN_GPU_CARRY=OUTDIR GPU_STEP_MULTI="NAME..." bash scripts/gpu-step.sh
#   (carry=[OUTDIR]).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
out=$1 base=$2
shift 2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/stage"
python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
  "$base/bins.tar.xz" "$T/stage"
for nc in "$@"; do
  name=${nc%%=*} dir=${nc#*=}
  case $name in '' | *[!A-Za-z0-9_]*) echo "gpu-step-pack: bad name '$name'" >&2; exit 2 ;; esac
  [ -f "$dir/bins.tar.xz" ] || { echo "gpu-step-pack: no $dir/bins.tar.xz" >&2; exit 2; }
  mkdir -p "$T/x" "$T/stage/$name"
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    "$dir/bins.tar.xz" "$T/x"
  for f in tern test_step_cuda commit; do
    [ -f "$T/x/$f" ] || { echo "gpu-step-pack: $dir has no $f (build it with TERN_GPU_EXTRA=test_step_cuda)" >&2; exit 2; }
    cp "$T/x/$f" "$T/stage/$name/"
  done
  echo "$name: commit $(cat "$T/x/commit")"
  rm -rf "$T/x"
done
mkdir -p "$out"
tar -C "$T/stage" --sort=name -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB >"$out/bins.tar.xz"
du -sh "$out"
