#!/usr/bin/env bash
# sluice against llama.cpp on llama-quantize's own files of the demo model (docs/QUANT.md "Against llama.cpp"):
# the demo model as an F32 GGUF (tools/demo_gguf.py), quantized by llama-quantize to each TYPE, packed by
# `sluice pack` (types kept), then for each: the files' sizes, the container's part types, and the greedy text of
# both engines on two prompts (llama-completion --temp 0 against sluice run --temp 0, default int8 kernels),
# equal or not. Local only (CI does not build llama.cpp): LLAMA_BIN names a CPU build's bin directory
# (cmake -DGGML_NATIVE=ON -DLLAMA_CURL=OFF; targets llama-quantize llama-completion).
# Usage: tools/llama_quant_compare.sh WORKDIR [TYPE ...]   (default types: Q4_K_M Q3_K_M Q2_K Q6_K IQ4_XS)
set -euo pipefail
work=${1:?a work directory}
shift
types=${*:-Q4_K_M Q3_K_M Q2_K Q6_K IQ4_XS}
cd "$(dirname "$0")/.."
lb=${LLAMA_BIN:-/work/llama.cpp/build-cpu/bin}
sl=${SLUICE:-build/sluice}
py=${PYTHON:-build/venv/bin/python}
n=${N_GEN:-32}
mkdir -p "$work"
[ -f "$work/demo-f32.gguf" ] || "$py" tools/demo_gguf.py "$work/demo-f32.gguf" >/dev/null
prompts=("In the beginning God created" "And the LORD spake unto Moses, saying")
for t in $types; do
    g="$work/demo-$t.gguf" s="$work/demo-$t.sluice"
    [ -f "$g" ] || "$lb/llama-quantize" "$work/demo-f32.gguf" "$g" "$t" >"$work/quantize-$t.log" 2>&1
    "$sl" pack "$g" -o "$s" >/dev/null
    parts=$("$sl" info "$s" --json | "$py" -c 'import json,sys; j=json.load(sys.stdin); print(" ".join(sorted(set(j["backbone_dtypes"]))), "| experts", json.dumps(j["experts"].get("part_dtypes")))')
    echo "$t: gguf $(stat -c %s "$g") B, sluice $(stat -c %s "$s") B; backbone $parts"
    for p in "${prompts[@]}"; do
        a=$("$lb/llama-completion" -m "$g" -p "$p" -n "$n" --temp 0 -no-cnv --no-warmup -c 512 -t 2 \
            --no-display-prompt --simple-io 2>>"$work/greedy.err" || echo "(failed)")
        b=$("$sl" run -m "$s" --resident -p "$p" -n "$n" --temp 0 2>>"$work/greedy.err" || echo "(failed)")
        printf '  %-40s %s\n    llama.cpp: %q\n    sluice:    %q\n' "\"$p\"" "$([ "$a" = "$b" ] && echo identical || echo DIFFERENT)" "$a" "$b"
    done
done
