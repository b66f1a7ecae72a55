#!/usr/bin/env bash
# Builds and runs the CUDA tier's kernel tests (tests/cuda/test_cuda.c) with nothing but nvcc and gcc:
# for the GPU machine, whose image lacks the Debian libraries the rest of sluice links. `make CUDA=1
# test-cuda` runs the same program here. Usage: tools/cuda_test.sh [BUILD_DIR] [--bench]
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build/cuda-test}; shift || true
arch=${CUDA_ARCH:-sm_90}
mkdir -p "$b"
nvcc -std=c++17 -arch="$arch" -O3 -Isrc -Iinclude -c src/backend/cuda/cuda_mat.cu -o "$b/cuda_mat.o"
cc -std=c11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -Iinclude -D_GNU_SOURCE \
    tests/cuda/test_cuda.c src/quant/quant.c src/util/dtype.c "$b/cuda_mat.o" \
    -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart -lstdc++ -lm -o "$b/test_cuda"
"$b/test_cuda" "$@"
