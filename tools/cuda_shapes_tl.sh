#!/usr/bin/env bash
# tools/cuda_shapes_tl.sh: one short device call (issue 24) that checks session 36's GPU changes and says where the other
# shapes' time goes (docs/CUDA.md "Call V": Qwen3-Next decode 0.30x, gpt-oss prefill 0.04x, DeepSeek-V3 prefill 0.02x
# and decode 0.24-0.34x of llama.cpp): kernel timelines (tools/cuda_timeline.c injected, summed by tools/cuda_timeline.py)
# of `sluice bench --gpu --resident` on synths of those shapes; gpt-oss under a context shorter than its window (the
# ring's check); bench_serve's follow-up turn with and without the prefix cache (state.c's copies); test_cuda
# --bench-mla (SLUICE_CUDA_MLA=2 against k_mla_attend) and the full test_cuda run, until END (s, 150).
#   here:  MPI=0 tools/cuda_tl_call.sh prepare DIR; cp tools/cuda_shapes_tl.sh DIR/   (a committed tree; DIR under build/)
#   there: END=... bash DIR/cuda_shapes_tl.sh        (from the checkout's root; results in $OUT: summary.txt, *.tl.xz,
#          bench_mla.txt, test_cuda.txt)
set -uo pipefail
Z=$(cd "$(dirname "$0")" && pwd); T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }; END=${END:-150}
left() { local t=$(( END - $(el) )); [ $t -gt 3 ] && echo $t || echo 3; }
o=$OUT; S=$o/summary.txt; b=/tmp/zb; rm -rf $b; mkdir -p $b && tar -xJf $Z/bundle.tar.xz -C $b; sl=$b/sluice
export LD_LIBRARY_PATH=$b/lib; w=/tmp/zw; rm -rf $w; mkdir -p $w
{ echo "call Z $(date -u +%FT%TZ) $(cat $b/VERSION)"; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; } >$S 2>&1
row() { python3 - "$1" <<'PY' 2>/dev/null || echo "failed: $(tail -c 240 "$2" | tr '\n' ' ')"
import json, sys
t = open(sys.argv[1]).read(); r = json.loads(t[t.index("["):])[0]
print("prefill %.1f decode %.2f" % (r["prefill_tok_s"], r["decode_tok_s"]))
PY
}
tl() { # NAME MODEL PROMPT GEN STEPS: a timeline of sluice bench, its summary into S, the raw file xz'd into OUT
  env CUDA_INJECTION64_PATH=$Z/tl/libsltl.so SLTL_NO_API=1 SLTL_OUT=$w/$1.tl LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$Z/tl timeout $(left) \
    $sl bench -m $2 --gpu --resident --kv f16 --prompt $3 --gen $4 --decode random --no-warmup --json >$w/$1.json 2>$w/$1.err
  echo "== timeline $1 (prompt $3 gen $4): $(row $w/$1.json $w/$1.err) [$(el) s]" >>$S
  python3 tools/cuda_timeline.py $w/$1.tl --steps $5 --top 14 2>&1 | head -40 >>$S; xz -6c $w/$1.tl >$o/$1.tl.xz 2>/dev/null; }
# 1. gpt-oss under a context shorter than its window (the ring's check), then its prefill's timeline
$sl synth --shape gpt-oss-120b --layers 2 --quant q4 -o $w/go.sluice >$w/s1.log 2>&1
timeout $(left) $sl bench -m $w/go.sluice --gpu --resident --kv f16 --prompt 1 --gen 16 --decode random --json >$w/go1.json 2>$w/go1.err
echo "gpt-oss L2 --prompt 1: $(row $w/go1.json $w/go1.err) [$(el) s]" >>$S
tl gptoss_pf $w/go.sluice 512 1 2; rm -f $w/go.sluice
# 2. the MLA split (SLUICE_CUDA_MLA=2): its check and bench, every fixture's model test with it on
if grep -q bench-mla $b/test_cuda 2>/dev/null; then timeout $(left) $b/test_cuda --bench-mla >$o/bench_mla.txt 2>&1; echo "bench-mla rc=$? [$(el) s]" >>$S; tail -12 $o/bench_mla.txt >>$S; fi
names=$(tools/cuda_pack_fixtures.sh "$sl" $w/mt $w/pack.log)
SLUICE_CUDA_MLA=2 timeout $(left) $b/test_model $w/mt $names >$w/mt.log 2>&1; echo "model_test SLUICE_CUDA_MLA=2 rc=$?: $(tail -1 $w/mt.log) [$(el) s]" >>$S
grep -m 12 -i fail $w/mt.log >>$S
# 3. DeepSeek-V3: decode steps and the prefill, and decode at depth 2048 with the MLA split off / on
$sl synth --shape deepseek-v3 --layers 4 --quant q4 -o $w/ds.sluice >$w/s2.log 2>&1; echo "ds synth rc=$? [$(el) s]" >>$S
tl ds_dec $w/ds.sluice 1 16 8
tl ds_pf $w/ds.sluice 512 1 2
for m in 1 2 1 2; do
  SLUICE_CUDA_MLA=$m timeout $(left) $sl bench -m $w/ds.sluice --gpu --resident --prompt 2048 --gen 32 --decode random --json >$w/dsm.json 2>$w/dsm.err
  echo "deepseek-v3 L4 depth 2048 SLUICE_CUDA_MLA=$m: $(row $w/dsm.json $w/dsm.err) [$(el) s]" >>$S
done; rm -f $w/ds.sluice
# 4. the prefix cache's follow-up turn (kv_rows_io in two copies a cache)
$sl synth --shape qwen3-30b-a3b --layers 4 --quant q4 --group 32 -o $w/q4.sluice >$w/s3.log 2>&1
timeout $(left) $b/bench_serve $w/q4.sluice --gpu 1 --streams 1 --tokens 16 --prompt 64 >$w/serve.txt 2>&1
echo "serve: $(grep -E '^\| (1|prefix)' $w/serve.txt | tr '\n' ' ') [$(el) s]" >>$S; rm -f $w/q4.sluice
# 5. qwen3-next decode
$sl synth --shape qwen3-next-80b-a3b --layers 4 --quant q4 -o $w/qn.sluice >$w/s4.log 2>&1
tl qn_dec $w/qn.sluice 1 16 8; rm -f $w/qn.sluice
# 6. the full test_cuda run
timeout $(left) $b/test_cuda >$o/test_cuda.txt 2>&1; echo "test_cuda rc=$? (124: cut at END): $(tail -1 $o/test_cuda.txt) [$(el) s]" >>$S
grep -m 20 -E "FAIL|mla|window" $o/test_cuda.txt >>$S
echo "end [$(el) s]" >>$S; cat $S
