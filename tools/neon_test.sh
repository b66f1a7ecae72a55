#!/usr/bin/env bash
# Cross-compiles the NEON kernels with Debian's aarch64 gcc and runs them against the scalar oracle under
# qemu-user (tools/neon_check.c), on a CPU with the Armv8.2 dot product and on one without. Needs
# gcc-aarch64-linux-gnu and qemu-user. Usage: tools/neon_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/aarch64
mkdir -p "$out"
flags=(-std=c11 -ffp-contract=off -Wall -Wextra -Werror -Wno-unused-parameter -O2 -pthread -D_GNU_SOURCE -Iinclude -Isrc)
# the SDOT kernels with their own flags, as the Makefile builds them on AArch64
aarch64-linux-gnu-gcc "${flags[@]}" -march=armv8.2-a+dotprod -c src/kernels/kernels_neon_dot.c -o "$out/neon_dot.o"
aarch64-linux-gnu-gcc "${flags[@]}" "$out/neon_dot.o" \
    tools/neon_check.c src/kernels/kernels_scalar.c src/kernels/kernels_neon.c src/kernels/kernels_avx2.c \
    src/kernels/kernels_avx512.c src/kernels/kernels_avx512_i8p.c src/kernels/kernels_amx.c src/kernels/mxfp4.c src/kernels/mxfp4_avx2.c src/kernels/mxfp4_avx512.c \
    src/kernels/mxfp4_neon.c src/kernels/kquant_i8.c src/kernels/kquant_neon.c src/kernels/kquant_avx2.c src/kernels/kquant_avx512.c src/quant/quant.c src/quant/q2.c src/quant/qimp.c src/quant/kquant.c src/quant/kquant_iq.c src/util/dtype.c src/util/err.c src/util/threadpool.c -lm -static -o "$out/neon_check"
# with the dot product (the SDOT kernels) and without it (an Armv8.0 core: the oracle's int8 kernels)
NEON_DOT=1 qemu-aarch64 -cpu max "$out/neon_check"
NEON_DOT=0 qemu-aarch64 -cpu cortex-a53 "$out/neon_check"
