#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu.sh runs on the GPU
# machine when that machine lacks tern's build dependencies: the CUDA op test
# and the kernel bench, plus the one non-CUDA shared library they need
# (libcmocka), into .gpu-carry/ (git-ignored locally; pass it as `carry`).
# Usage: scripts/gpu-prebuild.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/gpu-pre
# CMAKE_CUDA_ARCHITECTURES=90a: the `tern` target is created before
# enable_language(CUDA), so its CUDA_ARCHITECTURES property must come from the
# command line (see docs/perf/cuda-kernels.md).
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build $B --target test_ops_cuda -j2
gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -I/usr/local/cuda/include dev/kernels/bench_cuda.c \
  $B/libtern.a -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -ljansson -lpcre2-8 \
  -lutf8proc -lopenblas -lxxhash -fopenmp -lstdc++ -lm -o $B/bench_cuda
mkdir -p .gpu-carry
cp $B/tests/ops/test_ops_cuda $B/bench_cuda .gpu-carry/
cp -L /lib/x86_64-linux-gnu/libcmocka.so.0 /lib/x86_64-linux-gnu/libgomp.so.1 .gpu-carry/
git rev-parse --short HEAD > .gpu-carry/commit
ls -la .gpu-carry
