#!/usr/bin/env bash
# Cross-compiles the NEON kernels with Debian's aarch64 gcc and runs them against the scalar oracle under
# qemu-user (tools/neon_check.c). Needs gcc-aarch64-linux-gnu and qemu-user. Usage: tools/neon_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/aarch64
mkdir -p "$out"
aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -O2 -pthread -D_GNU_SOURCE -Iinclude -Isrc \
    tools/neon_check.c src/kernels/kernels_scalar.c src/kernels/kernels_neon.c src/kernels/kernels_avx2.c \
    src/kernels/kernels_avx512.c src/kernels/mxfp4.c src/kernels/mxfp4_avx2.c src/kernels/mxfp4_avx512.c \
    src/kernels/mxfp4_neon.c src/quant/quant.c src/util/dtype.c src/util/threadpool.c -lm -static -o "$out/neon_check"
qemu-aarch64 "$out/neon_check"
