#!/usr/bin/env bash
# sluice against llama.cpp on llama-quantize's own files of the demo model (docs/QUANT.md "Against llama.cpp"):
# the demo model as an F32 GGUF (tools/demo_gguf.py), quantized by llama-quantize to each TYPE, packed by
# `sluice pack` (types kept), then for each: the files' sizes, the container's part types, and the greedy text on
# two prompts, equal or not, of
#   default:  llama-completion --temp 0 on the file against sluice run --temp 0 (default int8 kernels);
#   weights:  llama-completion on an F32 GGUF of gguf-py's dequantisation of the file (its weights exactly, f32
#             activations) against sluice run --exact on the file (the same weights, f32 activations).
# -nr (no weight repacking): this VM advertises AMX but faults on it. Local only (CI does not build llama.cpp): LLAMA_BIN names a CPU build's bin directory
# (cmake -DGGML_NATIVE=ON -DLLAMA_CURL=OFF; targets llama-quantize llama-completion).
# IMATRIX=FILE (llama-imatrix's output) is passed to llama-quantize, which needs one for IQ1_*, IQ2_XXS, IQ2_XS.
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
    [ -f "$g" ] || "$lb/llama-quantize" ${IMATRIX:+--imatrix "$IMATRIX"} "$work/demo-f32.gguf" "$g" "$t" \
        >"$work/quantize-$t.log" 2>&1
    "$sl" pack "$g" -o "$s" >/dev/null
    parts=$("$sl" info "$s" --json | "$py" -c 'import json,sys; j=json.load(sys.stdin); print(" ".join(sorted(set(j["backbone_dtypes"]))), "| experts", json.dumps(j["experts"].get("part_dtypes")))')
    echo "$t: gguf $(stat -c %s "$g") B, sluice $(stat -c %s "$s") B; backbone $parts"
    [ -f "$work/deq-$t.gguf" ] || "$py" - "$g" "$work/deq-$t.gguf" <<'PY'
import sys, numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1])
w = gguf.GGUFWriter(sys.argv[2], r.fields["general.architecture"].contents())
for k, f in r.fields.items():
    if k.startswith("GGUF.") or k in ("general.architecture", "general.alignment"):
        continue
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[-1])
    else:
        w.add_key_value(k, f.contents(), f.types[0])
for t in r.tensors:
    shape = [int(x) for x in reversed(t.shape)]
    a = np.array(t.data, np.float32) if t.tensor_type == gguf.GGMLQuantizationType.F32 else gguf.quants.dequantize(t.data, t.tensor_type)
    w.add_tensor(t.name, np.ascontiguousarray(a.astype(np.float32).reshape(shape)))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
    for p in "${prompts[@]}"; do
        for mode in default weights; do
            lg=$g so=""
            [ $mode = weights ] && lg=$work/deq-$t.gguf so=--exact
            a=$("$lb/llama-completion" -m "$lg" -p "$p" -n "$n" --temp 0 -no-cnv --no-warmup -c 512 -t 2 -nr \
                --no-display-prompt --simple-io 2>>"$work/greedy.err" || echo "(failed)")
            b=$("$sl" run -m "$s" --resident $so -p "$p" -n "$n" --temp 0 2>>"$work/greedy.err" || echo "(failed)")
            a=${a%" [end of text]"} # llama-completion marks the end of text; sluice run stops there
            a=${a%$'\n'} b=${b%$'\n'}
            # the same tokens up to where the shorter text ends (each engine's -n counts its own way)
            if [ "$a" = "$b" ]; then v=identical
            elif [ "${b#"$a"}" != "$b" ] || [ "${a#"$b"}" != "$a" ]; then v="identical up to the shorter"
            else v=DIFFERENT; fi
            printf '  %-8s %-40s %s\n    llama.cpp: %q\n    sluice:    %q\n' $mode "\"$p\"" "$v" "$a" "$b"
        done
    done
done
