#!/usr/bin/env bash
# tools/cuda_tl_call.sh: one device call (issue 24) that says where a resident decode step's time goes and checks what
# waits for a GPU: a kernel timeline of `sluice bench --gpu --resident` (tools/cuda_timeline.c, CUPTI activity records:
# per kernel start / end and its launch call, with no profiler serialising the kernels), the GGUF block types' checks
# (test_cuda --kq, test_model's kq fixtures with SLUICE_CUDA_KQ=1, test_cuda --bench-kq), the implied biases' check and
# A/B (SLUICE_CUDA_IBIAS=1) and the fixture model test on the defaults.
#   here:  MPI=0 tools/cuda_tl_call.sh prepare DIR    (a committed tree; DIR under build/, carried)
#   there: bash DIR/run.sh                             (from the checkout's root; results under $OUT/tl)
#   TL_SW="A=1 B=2+C=3": switch sets (items joined by +) whose timelines are taken beside the defaults'.
set -uo pipefail
if [ "${1:-run}" = prepare ]; then
    set -e
    cd "$(dirname "$0")/.."
    dir=${2:?a directory}
    MPI=0 tools/cuda_hybrid.sh prepare "$dir"
    mkdir -p "$dir/tl"
    cuda=${CUDA_HOME:-/usr/local/cuda}
    cupti=$(dirname "$(readlink -f "$cuda/lib64/libcupti.so" 2>/dev/null || ls "$cuda"/lib/libcupti.so.* | head -1)")
    gcc -shared -fPIC -O2 -Wall -Wextra -I"$cuda/include" tools/cuda_timeline.c -o "$dir/tl/libsltl.so" \
        -L"$cupti" -lcupti -Wl,-rpath,'$ORIGIN'
    cp -L "$cupti"/libcupti.so.[0-9]* "$dir/tl/" 2>/dev/null || cp -L "$cupti/libcupti.so" "$dir/tl/"
    src=${LLAMA_SRC:-/work/llsrc/llama_cpp_python-0.3.36/vendor/llama.cpp}
    [ -d "$src/gguf-py/gguf" ] && tar -cJf "$dir/gguf-py.tar.xz" -C "$src/gguf-py" gguf
    cp tools/cuda_tl_call.sh "$dir/run.sh"
    du -sh "$dir"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
o=${OUT:-/tmp/tlout}/tl; mkdir -p "$o"
S=$o/summary.txt; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "$1" ]; }
b=/tmp/tlb; rm -rf $b; mkdir -p $b && tar -xJf "$here/bundle.tar.xz" -C $b
sl=$b/sluice; export LD_LIBRARY_PATH=$b/lib
{ echo "TL: $(date -u +%FT%TZ) $(cat $b/VERSION)"; nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm --format=csv,noheader; } >"$S" 2>&1
w=/tmp/tlw; rm -rf $w; mkdir -p $w/mt
( "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 -o $w/q16.sluice >$o/synth.log 2>&1; echo "synth16 rc=$? [$(el) s]" >>"$S"
  "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 --group 32 -o $w/g32.sluice >>$o/synth.log 2>&1; echo "synth g32 rc=$? [$(el) s]" >>"$S"
  touch $w/synth.done ) &
# gguf-py for the block-type fixtures (no gguf there); a pytest stand-in for the helpers tools/cuda_kq_fixtures.py imports
if [ -f "$here/gguf-py.tar.xz" ]; then
  mkdir -p /tmp/tlpy && tar -xJf "$here/gguf-py.tar.xz" -C /tmp/tlpy
  cat >/tmp/tlpy/pytest.py <<'PY'
import importlib
class _Any:
    def __getattr__(self, name): return _Any()
    def __call__(self, *a, **k): return a[0] if len(a) == 1 and callable(a[0]) and not k else _Any()
mark = _Any(); fixture = _Any()
def importorskip(name, *a, **k): return importlib.import_module(name)
def skip(*a, **k): raise RuntimeError("skipped")
PY
  printf '#!/bin/sh\nPYTHONPATH=/tmp/tlpy exec python3 "$@"\n' >/tmp/tlpy/py; chmod +x /tmp/tlpy/py
  export KQ_PY=/tmp/tlpy/py
fi
names=$(tools/cuda_pack_fixtures.sh "$sl" "$w/mt" "$o/pack.log"); echo "packed: $names [$(el) s]" >>"$S"
timeout 100 $b/test_cuda --kq >$o/test_cuda_kq.log 2>&1; echo "test_cuda --kq rc=$?: $(tail -1 $o/test_cuda_kq.log) [$(el) s]" >>"$S"
grep -m 12 "FAIL" $o/test_cuda_kq.log >>"$S"
kq=$(echo " $names " | grep -o ' kq_[a-z0-9]*' | tr -d '\n')
if [ -n "$kq" ]; then
  SLUICE_CUDA_KQ=1 timeout 90 $b/test_model $w/mt $kq >$o/tm_kq.log 2>&1; echo "test_model KQ=1 [$kq] rc=$?: $(tail -1 $o/tm_kq.log) [$(el) s]" >>"$S"
  grep -m 12 -i "fail\|differ" $o/tm_kq.log >>"$S"
fi
timeout 60 $b/test_cuda --bench-kq >$o/bench_kq.log 2>&1; echo "bench-kq rc=$? [$(el) s]" >>"$S"; grep -iE "GB/s" $o/bench_kq.log | head -40 >>"$S"
while [ ! -e $w/synth.done ] && ! late 300; do sleep 1; done
TLD=$here/tl; m=$w/q16.sluice
B="--gpu --resident --kv f16 --decode random --json"
row() { python3 -c '
import json,sys
t=open(sys.argv[1]).read()
try:
  r=json.loads(t[t.index("["):])[0]; print("prefill %.1f decode %.2f" % (r["prefill_tok_s"], r["decode_tok_s"]))
except Exception as e: print("failed", open(sys.argv[2]).read()[-300:].replace("\n"," "))' "$1" "$2"; }
tl() { # TAG MODEL PROMPT SETS...: tools/cuda_tl_set.sh's timelines, its summary into ours
  local tag=$1 mm=$2 p=$3; shift 3
  TL_SETS="$*" TL_PROMPT=$p TL_GEN=24 TL_NCU=0 TL_END=100 bash tools/cuda_tl_set.sh "$sl" "$TLD" "$o/tl_$tag" "$mm"
  echo "== timelines $tag (depth $p): $*" >>"$S"; cat "$o/tl_$tag/tl_summary.txt" >>"$S"
}
for p in 1 512; do # the bench rate without the injection, for the tracing's own cost
  timeout 30 "$sl" bench -m $m $B --prompt $p --gen 64 >$o/b.json 2>$o/b.err; echo "plain p$p: $(row $o/b.json $o/b.err) [$(el) s]" >>"$S"
done
TL_API=1 tl d1 $m 1 X=1
tl d1noapi $m 1 X=1 SLUICE_CUDA_GRAPH=1 ${TL_SW:-}
tl d512 $m 512 X=1
tl g32 $w/g32.sluice 1 X=1
# implied biases: checked on the kq_q40 fixture (test_model run_ib) and timed on the group-32 synth, alternated
if ! late 430; then
  SLUICE_CUDA_IBIAS=1 timeout 40 $b/test_model $w/mt kq_q40 >$o/tm_ib.log 2>&1; echo "test_model kq_q40 IBIAS rc=$?: $(tail -1 $o/tm_ib.log) [$(el) s]" >>"$S"
  grep -m 6 -i "fail\|differ\|ib " $o/tm_ib.log >>"$S"
  for r in 1 2 3; do for e in X=1 SLUICE_CUDA_IBIAS=1; do late 500 && break 2
    env $e timeout 30 "$sl" bench -m $w/g32.sluice $B --prompt 1 --gen 64 >$o/b.json 2>$o/b.err; echo "r$r g32 [$e] p1: $(row $o/b.json $o/b.err) [$(el) s]" >>"$S"
  done; done
fi
if ! late 520; then # the defaults on every family (a regression check of main)
  timeout 60 $b/test_model $w/mt $(echo $names | sed 's/ kq_[a-z0-9]*//g') >$o/tm.log 2>&1; echo "test_model defaults rc=$?: $(tail -1 $o/tm.log) [$(el) s]" >>"$S"
  grep -m 8 -i "fail" $o/tm.log >>"$S"
fi
tar -czf $o/logs.tar.gz -C $o $(cd $o && ls *.log *.err 2>/dev/null) 2>/dev/null; rm -f $o/*.log $o/*.err $o/b.json
echo "end [$(el) s]" >>"$S"
cat "$S"
