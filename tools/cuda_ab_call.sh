#!/usr/bin/env bash
# tools/cuda_ab_call.sh: one device call that checks a CUDA change and times it against the build before it (issue 24):
# test_cuda, test_model of the 11 fixture families (defaults, f16 KV, f16 + recorded steps), ncu kernel durations
# of a decode step at depth 1 and 512 (warm caches), and `sluice bench --gpu --resident --kv f16` of a 16-layer 30B
# shape, old and new alternated, three rounds; deadline guards. Results under $OUT (summary.txt; tools/ncu_sum.py
# FILE.csv.xz STEPS LAYERS sums the ncu logs per kernel).
#   here:  MPI=0 tools/cuda_hybrid.sh prepare DIR OLD_BUNDLE (OLD_BUNDLE's sluice becomes sluice-old);
#          cp tools/cuda_ab_call.sh DIR/run.sh    (DIR under build/, carried; a committed, clean tree)
#          [build/venv/bin/python tools/cuda_kq_fixtures.py build/sluice DIR/kq: test_model's GGUF fixtures, ~30 MB]
#   there: bash DIR/run.sh    (from the checkout's root: it packs tests/data's fixtures)
#   BENCH_I8=1: test_cuda --bench-i8's matvec rows after the tests; LOOP_END / NCU1_END / NCU2_END: the deadlines (s).
#   SWS="A=1 B=2": opt-in switches of the new build, each checked by test_model and timed in the rounds beside it
#   (an item of several: joined by +, e.g. SLUICE_CUDA_FUSE=all+SLUICE_CUDA_GRAPH=1);
#   G32=1: a 16-layer synth q4 with groups of 32 columns (as a Q4_0 GGUF packs, its biases -8 times the scales: implied)
#   too, one decode row a round, new build, then once with each SWS item;
#   L48=1: a 48-layer synth q4 too (written during the tests), one decode row a round on it, new build only, to set a
#   layer's cost on 48 layers beside 16 (call F: 145 against 105 us on tools/bench_scale.py's 48-layer pack).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
o=${OUT:-/tmp/eout}; mkdir -p "$o"
S=$o/summary.txt; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-540}" ]; }
b=/tmp/b2; rm -rf $b; mkdir -p $b && tar -xJf "$here/bundle.tar.xz" -C $b
sl=$b/sluice; old=$b/sluice-old; export LD_LIBRARY_PATH=$b/lib
{ echo "E: $(date -u +%FT%TZ) $(cat $b/VERSION)"; nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm --format=csv,noheader; } >"$S" 2>&1
w=/tmp/w2; rm -rf $w; mkdir -p $w/mt/lib
( "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 -o $w/q16.sluice >$o/synth.log 2>&1; echo "synth16 rc=$? [$(el) s]" >>"$S"
  [ -n "${G32:-}" ] && { "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 --group 32 -o $w/g32.sluice >$o/synth32.log 2>&1; echo "synth g32 rc=$? [$(el) s]" >>"$S"; }
  [ -n "${L48:-}" ] && { "$sl" synth --shape qwen3-30b-a3b --layers 48 --quant q4 -o $w/q48.sluice >$o/synth48.log 2>&1; echo "synth48 rc=$? [$(el) s]" >>"$S"; }; touch $w/synth.done ) &
[ -d "$here/kq" ] && cp "$here"/kq/*.sluice "$here"/kq/*.ref $w/mt/ 2>/dev/null # the GGUF fixtures, made here (no gguf-py there)
names=$(tools/cuda_pack_fixtures.sh "$sl" "$w/mt" "$o/pack.log")
echo "packed [$(el) s]" >>"$S"
timeout 120 $b/test_cuda >$o/test_cuda.log 2>&1; echo "test_cuda rc=$?: $(tail -1 $o/test_cuda.log) [$(el) s]" >>"$S"; grep -m 12 "FAIL" $o/test_cuda.log >>"$S"
for e in "X=1" "SLUICE_TEST_KV=f16" "SLUICE_TEST_KV=f16 SLUICE_CUDA_GRAPH=1" ${SWS:-}; do
  late 240 && break
  env ${e//+/ } timeout 60 $b/test_model $w/mt $names >$o/tm.log 2>&1; echo "test_model [$e] rc=$?: $(tail -1 $o/tm.log) [$(el) s]" >>"$S"; grep -m 8 -i "fail" $o/tm.log >>"$S"
done
if [ -n "${BENCH_I8:-}" ] && ! late 250; then # the matvec kernels' GB/s against the device copy
  timeout 60 $b/test_cuda --bench-i8 >$o/bench_i8.log 2>&1; echo "bench-i8 rc=$? [$(el) s]" >>"$S"
  grep -iE "GB/s|mv1[cd]|copy|2-8 tok|kernel [34] rows" $o/bench_i8.log | head -40 >>"$S"; xz -9 $o/bench_i8.log
fi
while [ ! -e $w/synth.done ] && ! late 400; do sleep 1; done # the timings with the machine otherwise idle
m=$w/q16.sluice
row() { python3 -c '
import json,sys
t=open(sys.argv[1]).read()
try:
  r=json.loads(t[t.index("["):])[0]; print("prefill %.1f decode %.2f" % (r["prefill_tok_s"], r["decode_tok_s"]))
except Exception as e: print("failed", open(sys.argv[2]).read()[-300:].replace("\n"," "))' "$1" "$2"; }
B="--gpu --resident --kv f16 --decode random --json"
NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); NCU="$NCUB --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base"
late ${NCU1_END:-300} || { timeout 60 $NCU "$sl" bench -m $m $B --prompt 1 --gen 3 >$o/ncu.1.csv 2>$o/ncu.1.err; echo "ncu p1 rc=$? [$(el) s]" >>"$S"; }
for r in 1 2 3; do for bin in old new ${SWS:-}; do for p in 1 512; do
  late ${LOOP_END:-480} && break 3
  x=$sl; e=X=1; [ $bin = old ] && x=$old; case $bin in *=*) e=$bin;; esac
  env ${e//+/ } SLUICE_CUDA_KV16=1 timeout 25 "$x" bench -m $m $B --prompt $p --gen 64 >$o/b.$r.$bin.$p.json 2>$o/b.$r.$bin.$p.err
  echo "r$r $bin p$p: $(row $o/b.$r.$bin.$p.json $o/b.$r.$bin.$p.err) [$(el) s]" >>"$S"
done; done
  if [ -n "${G32:-}" ] && [ -s $w/g32.sluice ]; then for e in X=1 ${SWS:-}; do # the new build, then with each switch
    late 470 && break
    env ${e//+/ } timeout 30 "$sl" bench -m $w/g32.sluice $B --prompt 1 --gen 64 >$o/b48.json 2>$o/b48.err
    echo "r$r new g32 [$e] p1: $(row $o/b48.json $o/b48.err) [$(el) s]" >>"$S"
  done; fi
  if [ -n "${L48:-}" ] && [ -s $w/q48.sluice ] && ! late 470; then
    timeout 40 "$sl" bench -m $w/q48.sluice $B --prompt 1 --gen 64 >$o/b48.json 2>$o/b48.err
    echo "r$r new 48L p1: $(row $o/b48.json $o/b48.err) [$(el) s]" >>"$S"
  fi
done
late ${NCU2_END:-500} || { timeout 50 $NCU "$sl" bench -m $m $B --prompt 512 --gen 3 >$o/ncu.512.csv 2>$o/ncu.512.err; echo "ncu p512 rc=$? [$(el) s]" >>"$S"; }
rm -f $o/b.*.json $o/b.*.err $o/b48.* $w/q48.sluice $w/q16.sluice $w/g32.sluice
xz -9 $o/*.csv 2>/dev/null
tar -czf $o/logs.tar.gz -C $o test_cuda.log tm.log pack.log synth.log synth32.log synth48.log 2>/dev/null; rm -f $o/test_cuda.log $o/tm.log $o/pack.log $o/synth*.log
echo "end [$(el) s]" >>"$S"
cat "$S"
