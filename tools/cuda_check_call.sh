#!/usr/bin/env bash
# tools/cuda_check_call.sh: one device call for issues 24 and 25 (priority order, a deadline guard at ~560 s):
# the flash kernels' check (tools/cuda_flash_check.sh, with recorded steps), the hybrid step's run
# (tools/cuda_hybrid.sh), test_model with SLUICE_CUDA_PDL=1 (and with f16 KV + recorded steps), ncu kernel
# durations of a decode step (--cache-control none: warm caches, as a real step) and of a 512-token prefill, and
# `sluice bench --gpu --resident --kv f16` with graphs / PDL off and on, on a 16-layer 30B shape.
#   here:  MPI=0 tools/cuda_hybrid.sh prepare DIR [OLD_BUNDLE]; mv DIR/run.sh DIR/hybrid.sh;
#          cp tools/cuda_check_call.sh DIR/run.sh    (from a clean worktree at a committed main; DIR under build/)
#   there: bash DIR/run.sh    (from the checkout's root; carry DIR) — results under $OUT; summary.txt first.
# The ncu files, summed per kernel: tools/ncu_sum.py FILE.csv.xz STEPS LAYERS.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
o=${OUT:-/tmp/allout}; mkdir -p "$o"
S=$o/summary.txt; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-560}" ]; }
b=/tmp/b; rm -rf $b; mkdir -p $b && tar -xJf "$here/bundle.tar.xz" -C $b
sl=$b/sluice; export LD_LIBRARY_PATH=$b/lib
{ echo "all: $(date -u +%FT%TZ) $(cat $b/VERSION)"; nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm --format=csv,noheader; } >"$S" 2>&1
w=/tmp/w; rm -rf $w; mkdir -p $w/mt/lib
( "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 -o $w/q16.sluice >$o/synth.log 2>&1; echo "synth16 rc=$? [$(el) s]" >>"$S" ) &
sp=$!
names=$(tools/cuda_pack_fixtures.sh "$sl" "$w/mt" "$o/pack.log")
cp $b/test_model $b/test_cuda $w/mt/; cp $b/lib/* $w/mt/lib/
echo "packed [$(el) s]" >>"$S"
OUT=$o/flash GRAPH=1 timeout 150 bash tools/cuda_flash_check.sh $w/mt >$o/flash.txt 2>&1; echo "flash rc=$? [$(el) s]" >>"$S"; tail -25 $o/flash.txt >>"$S"
STOP_AT=110 OUT=$o timeout 150 bash "$here/hybrid.sh" >$o/hybrid_stdout.txt 2>&1; echo "hybrid rc=$? [$(el) s]" >>"$S"
for e in "SLUICE_CUDA_PDL=1" "SLUICE_CUDA_PDL=1 SLUICE_TEST_KV=f16 SLUICE_CUDA_KV16=1 SLUICE_CUDA_GRAPH=1"; do
  late 270 && break
  env $e timeout 60 $w/mt/test_model $w/mt $names >$o/tm.log 2>&1; echo "test_model [$e] rc=$?: $(tail -1 $o/tm.log) [$(el) s]" >>"$S"; grep -m 8 -i fail $o/tm.log >>"$S"
done
wait $sp
m=$w/q16.sluice
row() { python3 -c '
import json,sys
t=open(sys.argv[1]).read()
try:
  r=json.loads(t[t.index("["):])[0]; print("prefill %.1f decode %.2f" % (r["prefill_tok_s"], r["decode_tok_s"]))
except Exception as e: print("failed", open(sys.argv[2]).read()[-300:].replace("\n"," "))' "$1" "$2"; }
B="--gpu --resident --kv f16 --decode random --json"
NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); NCU="$NCUB --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base"
late 320 || { SLUICE_CUDA_KV16=1 timeout 70 $NCU "$sl" bench -m $m $B --prompt 1 --gen 3 >$o/ncu.1.csv 2>$o/ncu.1.err; echo "ncu p1 rc=$? lines $(wc -l <$o/ncu.1.csv) [$(el) s]" >>"$S"; }
for r in 1 2; do for c in "0 0" "0 1" "1 1"; do set -- $c; for p in 1 512; do
  late 390 && break 3
  SLUICE_CUDA_KV16=1 SLUICE_CUDA_GRAPH=$1 SLUICE_CUDA_PDL=$2 timeout 25 "$sl" bench -m $m $B --prompt $p --gen 64 >$o/b.$r.$1$2.$p.json 2>$o/b.$r.$1$2.$p.err
  echo "r$r graph=$1 pdl=$2 p$p: $(row $o/b.$r.$1$2.$p.json $o/b.$r.$1$2.$p.err) [$(el) s]" >>"$S"
done; done; done
late 370 || { SLUICE_CUDA_KV16=1 timeout 50 $NCU "$sl" bench -m $m $B --prompt 512 --gen 1 >$o/ncu.512.csv 2>$o/ncu.512.err; echo "ncu p512 rc=$? [$(el) s]" >>"$S"; }
xz -9 $o/*.csv 2>/dev/null
echo "end [$(el) s]" >>"$S"
cat "$S"; echo ==== hybrid; cat $o/hybrid26/summary.txt 2>/dev/null | tail -40
