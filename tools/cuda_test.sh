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
# the oracle's sources only (the dequantisers), each function in its own section so that the linker drops
# what the test does not reach (the SIMD dispatch, the thread pool) instead of needing the whole library
cc -std=c11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -Iinclude -D_GNU_SOURCE -ffunction-sections -fdata-sections \
    tests/cuda/test_cuda.c src/quant/quant.c src/util/dtype.c src/kernels/mxfp4.c "$b/cuda_mat.o" \
    -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart -lstdc++ -lm -Wl,--gc-sections -o "$b/test_cuda"
"$b/test_cuda" "$@"
