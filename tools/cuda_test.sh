#!/usr/bin/env bash
# Builds and runs the CUDA tier's kernel tests (tests/cuda/test_cuda.c) with nothing but nvcc and gcc:
# for the GPU machine, whose image lacks the Debian libraries the rest of sluice links. `make CUDA=1
# test-cuda` runs the same program here. Usage: tools/cuda_test.sh [BUILD_DIR] [--bench]
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build/cuda-test}; shift || true
arch=${CUDA_ARCH:-sm_90}
mkdir -p "$b"
objs=()
for f in src/backend/cuda/*.cu; do
    o="$b/$(basename "$f" .cu).o"
    nvcc -std=c++17 -arch="$arch" -O3 -Isrc -Iinclude -c "$f" -o "$o" &
    objs+=("$o")
done
wait
# the oracle's sources only (the dequantisers, the kernel tables, RoPE's frequencies), each function in its own
# section so that the linker drops what the test does not reach (the thread pool, the CLI)
cf="-std=c11 -ffp-contract=off -O2 -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -Iinclude -D_GNU_SOURCE -ffunction-sections -fdata-sections"
cc $cf -mavx2 -mfma -mf16c -c src/kernels/kernels_avx2.c -o "$b/k_avx2.o"
cc $cf -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -c src/kernels/kernels_avx512.c -o "$b/k_avx512.o"
cc $cf -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -c src/kernels/kernels_avx512_i8p.c -o "$b/k_avx512_i8p.o"
cc $cf -mavx2 -c src/kernels/mxfp4_avx2.c -o "$b/m_avx2.o"
cc $cf -mavx512f -c src/kernels/mxfp4_avx512.c -o "$b/m_avx512.o"
cc $cf tests/cuda/test_cuda.c src/quant/quant.c src/util/dtype.c src/kernels/mxfp4.c src/kernels/kernels_scalar.c src/kernels/kernels_dev.c \
    src/kernels/kernels_neon.c src/kernels/mxfp4_neon.c src/family/rope.c src/util/threadpool.c "$b"/k_*.o "$b"/m_*.o "${objs[@]}" \
    -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart -lstdc++ -lm -Wl,--gc-sections -o "$b/test_cuda"
"$b/test_cuda" "$@"
