#!/usr/bin/env bash
# Whole fixture models on the GPU (tests/cuda/test_model.c, docs/CUDA.md). The GPU machine's image lacks the
# Debian libraries sluice links and `sluice pack` needs, so the work is split:
#   here:  tools/cuda_model_test.sh prepare DIR   builds the driver and test_cuda (make CUDA=1; the CUDA runtime linked
#          statically), packs each fixture f32 and q4 into DIR with its references, copies the three shared
#          libraries the driver loads (cJSON, xxHash, liburing) into DIR/lib;
#   there: tools/cuda_model_test.sh run DIR       runs it (exit 77: no usable CUDA device).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?prepare or run}
dir=${2:?a directory}
names="qwen3_moe mixtral olmoe qwen2_moe glm4_moe qwen3_next qwen3_5_moe gpt_oss gpt_oss_mxfp4 deepseek_v3 dots1" # as packed
for k in kq_q4km kq_mix; do [ -e "$dir/$k.kq.sluice" ] && names="$names $k"; done # tools/cuda_kq_fixtures.py
if [ "$mode" = run ]; then
    LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$dir/test_model" "$dir" $names
fi
make -s -j2 build/sluice
make -s -j2 CUDA=1 build/cuda/libsluice.a
mkdir -p "$dir/lib"
for t in test_model test_cuda; do # test_cuda too, for tools/cuda_flash_check.sh
    cc -Iinclude -Isrc -D_GNU_SOURCE -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -O2 "tests/cuda/$t.c" \
        build/cuda/libsluice.a -Wl,--as-needed -lcjson -lxxhash -luring -lm -pthread \
        -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart_static -ldl -lrt -lstdc++ -o "$dir/$t"
done
for l in libcjson.so.1 libxxhash.so.0 liburing.so.2; do cp -L "/lib/x86_64-linux-gnu/$l" "$dir/lib/"; done
tools/cuda_pack_fixtures.sh build/sluice "$dir" >/dev/null
