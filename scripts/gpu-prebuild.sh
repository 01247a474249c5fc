#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu.sh runs on the GPU
# machine, which lacks tern's build dependencies: the CUDA op test, the CUDA
# golden test, the graph replay test, the `tern` CLI, the kernel bench and
# the batched-decode bench (bench/bench_batched.c), plus every shared library
# they need outside CUDA and basic glibc (found with ldd), and the Llama-3
# tokenizer for tools/make_model.py, into .gpu-carry/ (git-ignored locally;
# pass it as `carry`).
# Usage: scripts/gpu-prebuild.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/gpu-pre
# CMAKE_CUDA_ARCHITECTURES=90a: the `tern` target is created before
# enable_language(CUDA), so its CUDA_ARCHITECTURES property must come from the
# command line (see docs/perf/cuda-kernels.md).
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build $B --target test_ops_cuda test_golden_cuda test_graph_cuda tern_cli -j2
gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -I/usr/local/cuda/include dev/kernels/bench_cuda.c \
  $B/libtern.a -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -ljansson -lpcre2-8 \
  -lutf8proc -lopenblas -lxxhash -fopenmp -lstdc++ -lm -o $B/bench_cuda
gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/bench_batched.c \
  $B/libtern.a -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -ljansson -lpcre2-8 \
  -lutf8proc -lopenblas -lxxhash -fopenmp -lstdc++ -lpthread -lm -o $B/bench_batched
mkdir -p .gpu-carry
BINS="$B/tests/ops/test_ops_cuda $B/tests/golden/test_golden_cuda $B/tests/golden/test_graph_cuda $B/tern $B/bench_cuda $B/bench_batched"
cp $BINS .gpu-carry/
# Every non-CUDA, non-glibc shared library the binaries load.
ldd $BINS | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|cuda|libcublas' |
  while read -r lib; do cp -L "$lib" .gpu-carry/; done
mkdir -p .gpu-carry/tok-llama3_1
for f in tokenizer.json tokenizer_config.json; do
  xz -dc ../shared/data/tokenizers/llama3_1/$f.xz > .gpu-carry/tok-llama3_1/$f
done
git rev-parse --short HEAD > .gpu-carry/commit
du -sh .gpu-carry && ls .gpu-carry
