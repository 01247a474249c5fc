#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what the device sampling check runs on
# the GPU machine: test_sample_cuda (CUDA sample op vs the CPU sampler) and
# the `tern` CLI, plus the shared libraries they need outside CUDA and glibc,
# as one xz tarball: .gpu-carry/sample/bins.tar.xz (git-ignored; pass
# .gpu-carry/sample as `carry`). On the device:
#   mkdir -p /tmp/c && python3 -c "import tarfile; tarfile.open('.gpu-carry/sample/bins.tar.xz').extractall('/tmp/c')"
#   LD_LIBRARY_PATH=/tmp/c /tmp/c/test_sample_cuda
# Usage: scripts/gpu-sample-prebuild.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/gsample
C=.gpu-carry/sample
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON -DTERN_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build $B --target test_sample_cuda tern_cli -j2
BINS="$B/tests/ops/test_sample_cuda $B/tern"
rm -rf $C && mkdir -p $C/stage
cp $BINS $C/stage/
strip $C/stage/* 2>/dev/null || true
ldd $BINS | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|cuda|libcublas' |
  while read -r lib; do cp -L "$lib" $C/stage/; done
git rev-parse --short HEAD > $C/stage/commit
tar -C $C/stage -cf - . | xz -T2 -6 > $C/bins.tar.xz
rm -rf $C/stage
du -sh $C
