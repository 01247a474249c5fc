#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu-decode.sh runs on the
# GPU machine: the CUDA op tests (dense and quantized), the CUDA golden and
# graph tests, the quantized fixtures test and the `tern` CLI, plus every
# shared library they need outside CUDA and glibc, and the Llama-3 tokenizer
# for tools/make_model.py. Six static binaries exceed the 64 MiB carry, so
# they travel as one xz tarball: .gpu-carry/decode/bins.tar.xz (git-ignored;
# pass .gpu-carry/decode as `carry`).
# Usage: scripts/gpu-decode-prebuild.sh
# Env: TERN_GPU_BUILD (build dir, default build/gpu-decode), TERN_GPU_CARRY
# (carry dir, default .gpu-carry/decode; must be ignored by git), and
# TERN_GPU_EXTRA (more CMake targets whose binaries travel too, e.g. a new
# CUDA test; give the target names, they are found under the build dir).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${TERN_GPU_BUILD:-build/gpu-decode}
C=${TERN_GPU_CARRY:-.gpu-carry/decode}
EXTRA=${TERN_GPU_EXTRA:-}
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON -DTERN_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build $B --target test_ops_cuda test_quant_cuda test_golden_cuda test_graph_cuda \
  test_golden_quant tern_cli $EXTRA -j2
BINS="$B/tests/ops/test_ops_cuda $B/tests/quant/test_quant_cuda $B/tests/golden/test_golden_cuda
 $B/tests/golden/test_graph_cuda $B/tests/quant/test_golden_quant $B/tern"
for t in $EXTRA; do BINS="$BINS $(find $B -type f -name "$t" -perm -u+x | head -1)"; done
rm -rf $C && mkdir -p $C/stage
cp $BINS $C/stage/
strip $C/stage/* 2>/dev/null || true
ldd $BINS | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|cuda|libcublas' |
  while read -r lib; do cp -L "$lib" $C/stage/; done
mkdir -p $C/stage/tok-llama3_1
for f in tokenizer.json tokenizer_config.json; do
  xz -dc ../shared/data/tokenizers/llama3_1/$f.xz > $C/stage/tok-llama3_1/$f
done
git rev-parse --short HEAD > $C/stage/commit
# one solid stream with a dictionary larger than a binary: the binaries share most
# of their bytes (static CUDA runtime, libtern), 79 MB -> 14 MB
tar -C $C/stage -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB > $C/bins.tar.xz
rm -rf $C/stage
du -sh $C
