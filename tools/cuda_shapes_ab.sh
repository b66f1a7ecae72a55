#!/usr/bin/env bash
# tools/cuda_shapes_ab.sh: one short device call (issue 24; no llama.cpp) that checks session 37's opt-in GPU paths and
# times each against the default in the same call: test_cuda's full run, every fixture's model test with the switches
# on; gpt-oss's MXFP4 GGUF (tools/gguf_shapes.py, 2 layers) with its decode batches grouped (SLUICE_CUDA_OSSDEC=1
# SLUICE_CUDA_MXSEG=1) against the default, DeepSeek-V3's prefill with the MLA split in chunks (SLUICE_CUDA_MLA=2)
# against the default; greedy text of each pair compared (the same bits are the contract).
#   here:  MPI=0 tools/cuda_tl_call.sh prepare DIR; cp build/dev/L/llama.tar.xz (its py/: gguf) tools/cuda_shapes_ab.sh DIR/
#   there: END=300 bash DIR/cuda_shapes_ab.sh      (from the checkout's root; results in $OUT/D)
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd); T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }; END=${END:-330}
left() { local t=$(( END - $(el) )); [ $t -gt 3 ] && echo $t || echo 3; }
o=$OUT/D; mkdir -p $o; S=$o/summary.txt; b=/tmp/db; rm -rf $b; mkdir -p $b && tar -xJf $C/bundle.tar.xz -C $b; sl=$b/sluice
export LD_LIBRARY_PATH=$b/lib; w=/tmp/dw; rm -rf $w; mkdir -p $w/mt
tar -xJf $C/llama.tar.xz -C $w py 2>/dev/null || tar -xJf $C/llama.tar.xz -C $w ./py 2>/dev/null
{ echo "call 3 $(date -u +%FT%TZ) $(cat $b/VERSION)"; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; } >$S 2>&1
row() { python3 - "$1" <<'PY' 2>/dev/null || echo "failed: $(tail -c 240 "$2" | tr '\n' ' ')"
import json, sys
t = open(sys.argv[1]).read(); r = json.loads(t[t.index("["):])[0]
print("prefill %.1f decode %.2f" % (r["prefill_tok_s"], r["decode_tok_s"]))
PY
}
( PYTHONPATH=$w/py python3 tools/gguf_shapes.py gpt-oss-120b 2 $w/go.gguf --vocab 32000 >$w/gw.log 2>&1 && $sl pack $w/go.gguf -o $w/go.sluice >$w/gp.log 2>&1; echo "gguf+pack rc=$?" >$w/go.done; rm -f $w/go.gguf ) &
timeout 130 $b/test_cuda >$o/test_cuda.txt 2>&1; echo "test_cuda rc=$?: $(tail -1 $o/test_cuda.txt) [$(el) s]" >>$S
grep -m 20 -E "FAIL" $o/test_cuda.txt >>$S; grep -E "moex|mla split|segments|absorb" $o/test_cuda.txt | head -30 >>$S
names=$(tools/cuda_pack_fixtures.sh "$sl" $w/mt $w/pack.log)
SLUICE_CUDA_OSSDEC=1 SLUICE_CUDA_MXSEG=1 SLUICE_CUDA_MLA=2 timeout 60 $b/test_model $w/mt $names >$w/mt.log 2>&1; echo "model_test (switches on) rc=$?: $(tail -1 $w/mt.log) [$(el) s]" >>$S; grep -m 12 -i "fail" $w/mt.log >>$S
while [ ! -f $w/go.done ] && [ $(left) -gt 60 ]; do sleep 2; done; cat $w/go.done >>$S 2>/dev/null; tail -3 $w/gw.log >>$S
bn() { local tag=$1 m=$2 p=$3 g=$4; shift 4
  env "$@" timeout $(left) $sl bench -m $m --gpu --resident --kv f16 --prompt $p --gen $g --decode random --json >$w/b.json 2>$w/b.err
  echo "$tag p$p g$g [$*]: $(row $w/b.json $w/b.err) [$(el) s]" >>$S; }
gr() { env "${@:3}" timeout 60 $sl run -m $2 --gpu -p "The quick brown fox" -n 12 --temp 0 >$w/$1.txt 2>$w/$1.err; }
if [ -f $w/go.sluice ]; then
  for r in 1 2; do bn gpt-oss $w/go.sluice 1 32; bn gpt-oss $w/go.sluice 1 32 SLUICE_CUDA_OSSDEC=1 SLUICE_CUDA_MXSEG=1; bn gpt-oss $w/go.sluice 512 1; bn gpt-oss $w/go.sluice 512 1 SLUICE_CUDA_OSSDEC=1 SLUICE_CUDA_MXSEG=1; done
  gr go_new $w/go.sluice; gr go_old $w/go.sluice SLUICE_CUDA_OSSDEC=1 SLUICE_CUDA_MXSEG=1
  cmp -s $w/go_new.txt $w/go_old.txt && echo "gpt-oss greedy: default == switches on: $(head -c 120 $w/go_new.txt | tr '\n' ' ')" >>$S || \
    { echo "gpt-oss greedy DIFFERS: new [$(head -c 120 $w/go_new.txt | tr '\n' ' ')] old [$(head -c 120 $w/go_old.txt | tr '\n' ' ')]" >>$S; tail -c 200 $w/go_new.err >>$S; }
  rm -f $w/go.sluice
fi
$sl synth --shape deepseek-v3 --layers 4 --quant q4 -o $w/ds.sluice >$w/s.log 2>&1
for r in 1 2; do bn deepseek-v3 $w/ds.sluice 512 8; bn deepseek-v3 $w/ds.sluice 512 8 SLUICE_CUDA_MLA=2; done
gr ds_new $w/ds.sluice; gr ds_old $w/ds.sluice SLUICE_CUDA_MLA=2
cmp -s $w/ds_new.txt $w/ds_old.txt && echo "deepseek-v3 greedy: default == SLUICE_CUDA_MLA=2" >>$S || echo "deepseek-v3 greedy DIFFERS: [$(head -c 100 $w/ds_new.txt)] [$(head -c 100 $w/ds_old.txt)]" >>$S
echo "end [$(el) s]" >>$S; cat $S
