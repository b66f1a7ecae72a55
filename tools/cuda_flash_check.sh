#!/usr/bin/env bash
# The flash attention kernels (src/backend/cuda/cuda_flash.cu; docs/CUDA.md "Attention in fixed chunks") on the
# GPU, in one command that builds nothing. DIR is what `tools/cuda_model_test.sh prepare DIR` makes here (the
# fixtures packed f32 and q4 with their references, test_model and test_cuda linked against the static CUDA
# runtime, lib/ with the three shared libraries they load); there, from anywhere:
#   tools/cuda_flash_check.sh DIR      (OUT=dir: where the logs go, default DIR/flash_check)
# runs test_cuda --fa16 (check_attn_f16: every kernel == the others bitwise, f16 within 3e-3 of double, f32 within
# 1e-5 of k_attention), then test_model over every fixture in DIR with an f16 cache (SLUICE_TEST_KV=f16
# SLUICE_CUDA_KV16=1) and with the f32 cache in the chunked order (SLUICE_CUDA_FA32=1); GRAPH=1 adds the f16 run
# with recorded decode steps (SLUICE_CUDA_GRAPH=1). The FAIL lines, then one line: "cuda_flash_check: PASS|FAIL
# (...)". Exit 0 all passed, 1 a failure, 77 no usable CUDA device.
set -uo pipefail
dir=$(cd "${1:?usage: tools/cuda_flash_check.sh DIR (made by tools/cuda_model_test.sh prepare DIR)}" && pwd)
out=${OUT:-$dir/flash_check}
mkdir -p "$out"
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
names=$(cd "$dir" && ls -- *.ref 2>/dev/null | sed 's/\.ref$//' | tr '\n' ' ')
for f in test_cuda test_model; do
    [ -x "$dir/$f" ] && continue
    echo "cuda_flash_check: FAIL ($dir/$f missing: tools/cuda_model_test.sh prepare DIR makes it)"
    exit 1
done
[ -n "$names" ] || { echo "cuda_flash_check: FAIL (no packed fixtures in $dir)"; exit 1; }
fail=0 parts=()
timeout 300 "$dir/test_cuda" --fa16 >"$out/test_cuda.log" 2>&1
rc=$?
if [ $rc = 77 ]; then
    echo "cuda_flash_check: SKIP (no usable CUDA device: $(tail -1 "$out/test_cuda.log"))"
    exit 77
fi
grep FAIL "$out/test_cuda.log" | grep -v '^FAIL: '
[ $rc = 0 ] || fail=1
parts+=("test_cuda --fa16: $(tail -1 "$out/test_cuda.log")")
model() { # tag, environment assignments...
    local tag=$1 rc
    shift
    env "$@" timeout 600 "$dir/test_model" "$dir" $names >"$out/model_$tag.log" 2>&1
    rc=$?
    grep -i "fail" "$out/model_$tag.log" | sed "s/^/[$tag] /"
    [ $rc = 0 ] || fail=1
    parts+=("$tag: $(tail -1 "$out/model_$tag.log"), rc $rc, token by token == prefill bitwise in $(grep -c \
        'token-by-token vs prefill 0 (bitwise)' "$out/model_$tag.log")")
}
model f16 SLUICE_TEST_KV=f16 SLUICE_CUDA_KV16=1
model fa32 SLUICE_CUDA_FA32=1
[ "${GRAPH:-0}" = 1 ] && model f16_graph SLUICE_TEST_KV=f16 SLUICE_CUDA_KV16=1 SLUICE_CUDA_GRAPH=1
summary=$(printf '%s; ' "${parts[@]}")
echo "cuda_flash_check: $([ $fail = 0 ] && echo PASS || echo FAIL) (${summary}logs in $out)"
exit $fail
