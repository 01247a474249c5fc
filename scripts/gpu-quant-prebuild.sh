#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu-quant.sh runs on the GPU
# machine: the CUDA quantized-op test, the quantized golden test, the `tern`
# CLI (for `tern quantize` and `tern bench`) and dev/kernels/bench_quant.c,
# plus every shared library they need outside CUDA and glibc, and the
# Llama-3 tokenizer for tools/make_model.py, into .gpu-carry/quant/
# (git-ignored; pass .gpu-carry as `carry`).
# Usage: scripts/gpu-quant-prebuild.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/gpu-quant
C=.gpu-carry/quant
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build $B --target test_quant_cuda test_golden_quant tern_cli -j2
gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -I/usr/local/cuda/include dev/kernels/bench_quant.c \
  $B/libtern.a -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -ljansson -lpcre2-8 \
  -lutf8proc -lopenblas -lxxhash -fopenmp -lstdc++ -lm -o $B/bench_quant
rm -rf $C && mkdir -p $C
BINS="$B/tests/quant/test_quant_cuda $B/tests/quant/test_golden_quant $B/tern $B/bench_quant"
cp $BINS $C/
strip $C/* 2>/dev/null || true
ldd $BINS | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|cuda|libcublas' |
  while read -r lib; do cp -L "$lib" $C/; done
mkdir -p $C/tok-llama3_1
for f in tokenizer.json tokenizer_config.json; do
  xz -dc ../shared/data/tokenizers/llama3_1/$f.xz > $C/tok-llama3_1/$f
done
git rev-parse --short HEAD > $C/commit
du -sh $C && ls $C
