#!/usr/bin/env bash
# tools/cuda_pack_fixtures.sh SLUICE DIR [LOG]: tests/cuda/test_model's fixtures (one list for every device script)
# packed into DIR as test_model reads them: NAME.sluice (f32; gpt_oss_mxfp4 keeps its MXFP4 experts as released),
# NAME.q4.sluice (q4, group 32), NAME.ref (the reference tokens, then the greedy ones), NAME.logits. Run from the
# checkout's root; pack errors go to LOG (default: stderr). Prints the names, for test_model's arguments. Where a python
# with gguf-py is (build/venv, or KQ_PY), also the GGUF block-type fixtures kq_q4km, kq_mix and kq_q40 (tools/cuda_kq_fixtures.py:
# NAME.kq.sluice or, kq_q40, NAME.ib.sluice, NAME.sluice and NAME.ref; ~30 MB), last; elsewhere (the device) those already in DIR are named.
set -uo pipefail
sl=${1:?the sluice binary}
dir=${2:?a directory}
log=${3:-/dev/stderr}
names="qwen3_moe mixtral olmoe qwen2_moe glm4_moe qwen3_next qwen3_5_moe gpt_oss gpt_oss_mxfp4 deepseek_v3 dots1"
mkdir -p "$dir"
for n in $names; do
    keep=; [ "$n" = gpt_oss_mxfp4 ] && keep="--quant-experts keep"
    "$sl" pack "tests/data/$n" -o "$dir/$n.sluice" --quant f32 $keep >/dev/null 2>>"$log"
    "$sl" pack "tests/data/$n" -o "$dir/$n.q4.sluice" --quant q4 --group 32 >/dev/null 2>>"$log"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(*r["tokens"]); print(*r["greedy"])' \
        "tests/data/$n/ref.json" >"$dir/$n.ref"
    cp "tests/data/$n/ref_logits.f32" "$dir/$n.logits"
done
py=${KQ_PY:-build/venv/bin/python}
if [ -x "$py" ] && "$py" -c 'import gguf' 2>/dev/null; then "$py" tools/cuda_kq_fixtures.py "$sl" "$dir" >/dev/null 2>>"$log"; fi
for k in kq_q4km kq_mix kq_q40; do { [ -e "$dir/$k.kq.sluice" ] || [ -e "$dir/$k.ib.sluice" ]; } && names="$names $k"; done
echo $names
