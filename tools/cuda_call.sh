#!/usr/bin/env bash
# tools/cuda_call.sh: the lead's one-call comparison of a main build against llama.cpp on the GPU machine (issue 24).
# Made here (the bundle DIR, carried as an ignored path): DIR/bundle.tar.xz = stage/ (sluice, lib/) as tools/cuda_bench.sh
# prepare makes it (MPI=0 MODEL_TEST=0 SYNC_BIN=0), DIR/t.tar.xz = t/ (test_cuda, test_model from tests/cuda/ linked against
# build/cuda/libsluice.a, lib/, VERSION; or, without t.tar.xz, the same files in the bundle: tools/cuda_hybrid.sh prepare's
# bundle holds sluice, lib/, test_cuda, test_model and VERSION), DIR/llama.tar.xz + cuda_llama.sh + bench_scale.py from tools/cuda_llama.sh prepare,
# DIR/switches (env assignments for sluice's runs, may be empty). There: MT_KV=f16 bash DIR/cuda_call.sh.
# Lead's final call C (issues 24, 28, 25): main's CUDA build (t/VERSION) — kernel tests and the fixture model test
# of every family on main's defaults — while llama.cpp (llama-cpp-python 0.3.36's, ggml 0.25.3) builds for sm_90a
# and tools/bench_scale.py writes the 48-layer Qwen3-30B-A3B-shaped Q4_0 GGUF and sluice packs it
# (tools/cuda_llama.sh with ROUNDS=0: build, GGUF, pack, greedy text of both); then two rounds alternated:
# llama-bench -ngl 99 -fa 1 -p 512 -n 64 -d 0,512,8192 -r 2 against sluice bench --gpu --resident --prompt D
# --gen 64 --decode random (D = 1, 512, 8192) with SX (DIR/switches) and
# (BENCH_I8=1: test_cuda --bench-i8's matvec rows during the build; stage/sluice-old, when the bundle has one: its
# decode rows in round 1 beside the defaults') and
# --kv KV (f16, llama.cpp's default); round 1 also sluice's default KV at D = 1, 512; then bench_serve 1 / 8 streams.
# TL=1 (DIR/tl/libsltl.so from tools/cuda_tl_call.sh prepare's gcc line): tools/cuda_tl_set.sh's timelines during the build.
# HYB=1: after serving, issue 25's rows (llama.cpp -ncmoe 48 / 24 against sluice --vram 2G / 8G --cache 24G) until HYB_END;
# HYB_NS (llama.cpp's -ncmoe values, "48 24"), HYB_VR (sluice's VRAM:routing rows); SERVE_SETS (bench_serve's env sets);
# CHECK_T (each CHECKS run's limit, 30 s); HYB_MODES="cold warm gemm": each sluice row from a cold RAM cache, with --warm-cache, and through the grouped GEMM;
# HYB_HY="off on": each hybrid row with --hybrid off / on. AB_SETS="A=1 B=2+C=1" (AB_SERVE=1, AB_END): each set against the defaults
# on a 16-layer synth (decode at depths 1 / 512, serving 1 / 8 streams), before the rounds. SX_GATE=1: the rounds run the defaults
# when test_cuda, a CHECKS run or a model test failed. DEPTH=1 (DEPTH_END, DEPTH_CASES, DEPTH_ROUNDS): tools/depth_call.sh's GPU rows (its GGUF written during the rounds, its rows after serving).
# SHAPES="qwen3-next-80b-a3b:4 qwen3.5-35b-a3b:4 gpt-oss-120b:2 deepseek-v3:4" (SHAPE:LAYERS; SHAPES_END, s, 560): last, issue 24's other families, per shape
# tools/gguf_shapes.py's GGUF (SHAPES_VOCAB rows, 32000), its pack, one greedy text of both (8 tokens), then SHAPES_ROUNDS (1) alternated
# llama-bench -ngl 99 -fa 1 -p P -n 32 -d 0,P -r 1 (-fa at its default where refused) against sluice bench --gpu --resident --kv KV --prompt 1|P
# --gen 32 --decode random (P = SHAPES_P, 512), a line each with the ratios (sluice / llama.cpp); both files deleted after. A shape starts only when
# its estimate (SHAPES_EST, 120 s, then the last shape's time scaled by the file sizes) ends before SHAPES_END; SHAPES_AHEAD=1 (default): the next GGUF + pack written during the rows; the q30 GGUF and pack are deleted
# when the disk is short (SHAPES_KEEP30=1: the shape skipped instead). SHAPES_CPU=1: a rehearsal on the CPU machine (SHAPES_LB's llama.cpp, -ngl 0, no --gpu; PYTHON: the writer's, with numpy).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
o="${OUT:-/tmp/c_out}/C"; mkdir -p "$o"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$o/summary.txt
SX=$(cat "$here/switches" 2>/dev/null); KV=${KV:-f16}
SX2=$(cat "$here/switches2" 2>/dev/null) # a second set (DIR/switches2, optional): checked and timed in round 1 beside the first
mkdir -p "$here/stage" && tar -xJf "$here/bundle.tar.xz" -C "$here/stage"
if [ -f "$here/t.tar.xz" ]; then tar -xJf "$here/t.tar.xz" -C "$here"
else mkdir -p "$here/t" && for x in test_cuda test_model bench_serve VERSION; do [ -e "$here/stage/$x" ] && cp "$here/stage/$x" "$here/t/"; done; fi
rm -f "$here/tests.done"
( OUT=$o WAIT_FOR=$here/tests.done ROUNDS=0 bash "$here/cuda_llama.sh" run "$here" >"$o/llama_run.log" 2>&1 ) &
lp=$!
w=/tmp/lc; rm -rf "$w"; mkdir -p "$w/mt" "$w/logs"; log=$w/logs
fin() { tar czf "$o/logs.tar.gz" -C "$w" logs; echo "=== summary"; cat "$S"; }
trap fin EXIT
sl=$here/stage/sluice
row() { python3 - "$1" <<'PY' 2>/dev/null || echo "failed: $(tail -c 200 "$2" | tr '\n' ' ')"
import json, sys
t = open(sys.argv[1]).read(); r = json.loads(t[t.index("["):])[0]
print("prefill %.1f decode %.2f" % (r["prefill_tok_s"], r["decode_tok_s"]))
PY
}
lrow() { python3 - "$1" <<'PY' 2>/dev/null || echo "failed"
import json, sys
t = open(sys.argv[1]).read(); r = json.loads(t[t.index("["):])
print(" ".join("p%d/n%d/d%d %.1f" % (x["n_prompt"], x["n_gen"], x.get("n_depth", 0), x["avg_ts"]) for x in r))
PY
}
{ echo "call C: $(date -u +%FT%TZ) $(cat "$here/t/VERSION") switches: [$SX] switches2: [$SX2] kv $KV"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm --format=csv,noheader; } >"$S" 2>&1
export LD_LIBRARY_PATH=$here/stage/lib:$here/t/lib
timeout ${TC_T:-60} "$here/t/test_cuda" >"$log/test_cuda.log" 2>&1; rc=$?; gate_bad=""; [ $rc = 0 ] || gate_bad=test_cuda
echo "test_cuda rc=$rc: $(tail -1 "$log/test_cuda.log") [$(el) s]" >>"$S"; grep -m 20 FAIL "$log/test_cuda.log" >>"$S"
for x in ${CHECKS:-}; do # CHECKS="pdl mvprof": test_cuda's runs outside its full run (the overlapped chain check, the matvec's phases)
  timeout ${CHECK_T:-30} "$here/t/test_cuda" --$x >"$log/test_cuda.$x.log" 2>&1; rc=$?
  echo "test_cuda --$x rc=$rc: $(tail -1 "$log/test_cuda.$x.log") [$(el) s]" >>"$S"; grep -m 30 -E "FAIL|mismatch|phase|CTA|cycles" "$log/test_cuda.$x.log" >>"$S"
  [ $rc = 0 ] || gate_bad="$gate_bad --$x"
done
names=$(tools/cuda_pack_fixtures.sh "$sl" "$w/mt" "$log/pack.log")
mt() { local tag=$1; shift # (call H: four runs killed at 100 s each left no time for the rounds: a deadline, MT_END)
  [ "$(el)" -lt ${MT_END:-200} ] || { echo "model_test $tag skipped: past MT_END" >>"$S"; return; }
  env "$@" timeout 100 "$here/t/test_model" "$w/mt" $names >"$log/model_test.$tag.log" 2>&1; local rc=$?
  echo "model_test $tag ($*) rc=$rc: $(tail -1 "$log/model_test.$tag.log") [$(el) s]" >>"$S"
  [ $rc = 0 ] || gate_bad="$gate_bad model_test.$tag"
  grep -m 12 -i "fail" "$log/model_test.$tag.log" >>"$S"; }
mt default
[ -n "$SX" ] && mt switches $SX
[ -n "$SX2" ] && mt switches2 $SX2
[ -n "${MT_KV:-}" ] && mt kv $SX SLUICE_TEST_KV=$MT_KV
if [ -n "${BENCH_I8:-}" ] && [ "$(el)" -lt ${MT_END:-200} ]; then # the matvec kernels' GB/s against the device copy (test_cuda --bench-i8)
  timeout 90 "$here/t/test_cuda" --bench-i8 >"$log/bench_i8.log" 2>&1
  echo "bench-i8 rc=$? [$(el) s]" >>"$S"; grep -iE "GB/s|mv1[cd]|copy|2-8 tok|kernel [34] rows" "$log/bench_i8.log" | head -40 >>"$S"
fi
if [ -n "${TL:-}" ] && [ -f "$here/tl/libsltl.so" ]; then # TL=1: kernel timelines of each switch set and ncu's stall sections (tools/cuda_tl_set.sh) on a 16-layer synth of the GGUF's groups
  "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 --group 32 -o "$w/q16.sluice" >"$log/synth.log" 2>&1
  TL_END=${TL_END:-200} bash tools/cuda_tl_set.sh "$sl" "$here/tl" "$o/tl" "$w/q16.sluice"; cat "$o/tl/tl_summary.txt" >>"$S"
  for mo in ${TL_SERVE:-}; do # TL_SERVE="0 8": a serving timeline of 8 streams (kernels and API calls) per SLUICE_CUDA_MOEN
    env SLUICE_CUDA_MOEN=$mo CUDA_INJECTION64_PATH="$here/tl/libsltl.so" SLTL_OUT="$o/tl/serve.$mo.txt" LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$here/tl" \
      timeout 60 "$here/t/bench_serve" "$w/q16.sluice" --gpu 1 --streams 8 --tokens 24 --prompt 64 >"$o/tl/serve.$mo.log" 2>&1
    echo "== serving timeline, 8 streams, SLUICE_CUDA_MOEN=$mo rc=$?: $(grep -E '^\| 8 \|' "$o/tl/serve.$mo.log")" >>"$S"
    python3 tools/cuda_timeline.py "$o/tl/serve.$mo.txt" --steps 64 --top 24 >"$o/tl/serve.$mo.sum" 2>&1; head -80 "$o/tl/serve.$mo.sum" >>"$S"
    xz -9 -f "$o/tl/serve.$mo.txt"
  done
  rm -f "$w/q16.sluice"
fi
if [ -n "${AB_SETS:-}" ] && [ "$(el)" -lt ${AB_END:-200} ]; then # AB_SETS="A=1 A=1+B=2": each set against the defaults on a 16-layer synth, alternated
  "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 --group 32 -o "$w/ab16.sluice" >"$log/ab_synth.log" 2>&1
  for r in 1 2; do for ss in DEF $AB_SETS; do
    [ "$(el)" -lt ${AB_END:-200} ] || break 2
    sv=${ss//+/ }; [ "$ss" = DEF ] && sv=""; line=""
    for p in 1 512; do
      env $sv timeout 40 "$sl" bench -m "$w/ab16.sluice" --gpu --resident --kv f16 --prompt $p --gen 64 --decode random --json \
        >"$log/ab.$r.$p.json" 2>"$log/ab.$r.$p.err"; line="$line p$p $(row "$log/ab.$r.$p.json" "$log/ab.$r.$p.err" | sed 's/prefill [0-9.]* //')"
    done
    if [ -n "${AB_SERVE:-}" ]; then
      env $sv timeout 40 "$here/t/bench_serve" "$w/ab16.sluice" --gpu 1 --streams 1,8 --tokens 32 --prompt 64 --followup 0 >"$log/ab.serve.$r.txt" 2>&1
      line="$line serve $(grep -E '^\| (1|8) \|' "$log/ab.serve.$r.txt" | awk -F'|' '{printf "%s:%s ", $2, $3}')"
    fi
    echo "ab16 r$r [${sv:-defaults}]:$line [$(el) s]" >>"$S"
  done; done
  rm -f "$w/ab16.sluice"
fi
if [ -n "${SX_GATE:-}" ] && [ -n "$gate_bad" ]; then echo "SX_GATE: failed ($gate_bad): the rounds run the defaults, not [$SX]" >>"$S"; SX=""; fi
echo "tests done [$(el) s]" >>"$S"
touch "$here/tests.done"
wait $lp; echo "llama part (build, GGUF, pack, greedy) rc=$? [$(el) s]" >>"$S"
grep -A3 "^prompt" "$o/llama.txt" 2>/dev/null | head -12 >>"$S"; grep -E "write_gguf|pack|build done" "$here/raw/steps.txt" >>"$S" 2>/dev/null
lb=$here/llama/build/bin; gg=$here/work/q30-L48.gguf; sp=$here/work/q30-L48.sluice
if [ -n "${DEPTH:-}" ] && [ -x "$lb/llama-bench" ]; then # DEPTH=1: issue 28's GPU rows (tools/depth_call.sh) start now, writing their GGUF while the rounds run, their rows after serving, until DEPTH_END
  ( OUT=$w/dout WAIT_FOR=$w/depth.go BUILD_CUDA=0 CPU_CASES="" CPU_LONG="" ROUNDS_GPU=${DEPTH_ROUNDS:-1} \
      GPU_CASES="${DEPTH_CASES:-pp:8192:f16 tg:8192:f16 pp:32768:f16 tg:32768:f16}" END=$(( ${DEPTH_END:-470} - $(el) )) \
      bash tools/depth_call.sh "$here" >"$log/depth_call.log" 2>&1; echo "depth rows rc=$? [$(el) s]" >"$w/depth.rc" ) &
  dp=$!
fi
if [ -f "$sp" ] && [ -x "$lb/llama-bench" ]; then
  for r in 1 2; do
    [ "$(el)" -lt ${R2:-360} ] || break
    timeout 120 "$lb/llama-bench" -m "$gg" -ngl 99 -fa 1 -p 512 -n 64 -d 0,512,8192 -r 2 -o json >"$log/llama.$r.json" 2>"$log/llama.$r.err"
    echo "llama.cpp r$r: $(lrow "$log/llama.$r.json") [$(el) s]" >>"$S"
    for p in 1 512 8192; do
      env $SX timeout 60 "$sl" bench -m "$sp" --gpu --resident --kv $KV --prompt $p --gen 64 --decode random --json \
        >"$log/s.$p.$r.json" 2>"$log/s.$p.$r.err"
      echo "sluice kv $KV r$r p$p: $(row "$log/s.$p.$r.json" "$log/s.$p.$r.err") [$(el) s]" >>"$S"
    done
    if [ $r = 1 ]; then for p in 1 512; do
      timeout 60 "$sl" bench -m "$sp" --gpu --resident --prompt $p --gen 64 --decode random --json \
        >"$log/d.$p.json" 2>"$log/d.$p.err"
      echo "sluice defaults (no switches, default kv) p$p: $(row "$log/d.$p.json" "$log/d.$p.err") [$(el) s]" >>"$S"
      if [ -n "$SX2" ]; then
        env $SX2 timeout 60 "$sl" bench -m "$sp" --gpu --resident --kv $KV --prompt $p --gen 64 --decode random --json \
          >"$log/x.$p.json" 2>"$log/x.$p.err"
        echo "sluice kv $KV switches2 [$SX2] p$p: $(row "$log/x.$p.json" "$log/x.$p.err") [$(el) s]" >>"$S"
      fi
      [ -x "$here/stage/sluice-old" ] || continue # the build before (tools/cuda_hybrid.sh prepare's OLD_BUNDLE)
      timeout 60 "$here/stage/sluice-old" bench -m "$sp" --gpu --resident --prompt $p --gen 64 --decode random --json \
        >"$log/o.$p.json" 2>"$log/o.$p.err"
      echo "sluice-old (the build before) p$p: $(row "$log/o.$p.json" "$log/o.$p.err") [$(el) s]" >>"$S"
    done; fi
  done
  for ss in ${SERVE_SETS:-SX}; do # SERVE_SETS="X=1 A=1+B=2": bench_serve's runs, each set's env (SX: DIR/switches)
    [ "$(el)" -lt ${SERVE_BY:-530} ] || break
    sv=${ss//+/ }; [ "$ss" = SX ] && sv=$SX
    env $sv timeout $(( ${END_BY:-565} - $(el) )) "$here/t/bench_serve" "$sp" --gpu 1 --streams 1,8 --tokens 32 --prompt 64 >"$log/serve.$ss.txt" 2>&1
    echo "serve (48 layers, [$sv]): $(grep -E '^\| (1|8) \|' "$log/serve.$ss.txt" | tr '\n' ' ') [$(el) s]" >>"$S"
  done
  if [ -n "${dp:-}" ]; then # the depth rows now (their GGUF written meanwhile), then their summary
    touch "$w/depth.go"; wait $dp; cat "$w/depth.rc" >>"$S" 2>/dev/null; sed -n '/^|/p' "$w/dout/depth/summary.md" >>"$S" 2>/dev/null
    tar czf "$o/depth.tar.gz" -C "$w/dout" depth 2>/dev/null; rm -rf "$here/depth"
  fi
  if [ -n "${HYB:-}" ]; then # HYB=1: issue 25's rows on the same GGUF and pack, while time is left (HYB_END, s)
    # llama.cpp's experts on the CPU (-ncmoe N of the 48 layers, 16 threads) against sluice's VRAM tier + RAM cache
    # (--vram V --cache 24G: the hybrid step), decode at depth 512 in both (sluice after its 512-token prompt)
    for n in ${HYB_NS:-48 24}; do
      [ "$(el)" -lt ${HYB_END:-560} ] || break
      timeout 90 "$lb/llama-bench" -m "$gg" -ngl 99 -ncmoe $n -t 16 -fa 1 -p 512 -n 64 -d 0,512 -r 1 -o json \
        >"$log/llama.ncmoe$n.json" 2>"$log/llama.ncmoe$n.err"
      echo "llama.cpp -ncmoe $n -t 16: $(lrow "$log/llama.ncmoe$n.json") [$(el) s]" >>"$S"
    done
    # HYB_MODES (default "cold"): cold = as before (a cold RAM cache); warm = --warm-cache (every expert in RAM first, as
    # llama.cpp's page cache) with SLUICE_CUDA_TIER_GEMM=0 (an expert at a time); gemm = --warm-cache, the default's grouped GEMM
    # HYB_HY (default "auto"): each row with --hybrid off / on / auto (on: the misses the cost model gives the host run there)
    for vr in ${HYB_VR:-2G:model 2G:uniform 8G:model}; do for md in ${HYB_MODES:-cold}; do for hy in ${HYB_HY:-auto}; do
      [ "$(el)" -lt ${HYB_END:-560} ] || break
      f=$log/h.${vr/:/.}.$md.$hy; ex=""; [ "$md" = cold ] || ex=--warm-cache; gx=""; [ "$md" = warm ] && gx=SLUICE_CUDA_TIER_GEMM=0
      env $SX $gx timeout 120 "$sl" bench -m "$sp" --gpu --vram ${vr%%:*} --cache 24G --threads 16 --kv $KV --prompt 512 --gen 64 \
        --routing ${vr#*:} --hybrid $hy $ex --json >"$f.json" 2>"$f.err"
      echo "sluice --vram ${vr%%:*} --cache 24G --routing ${vr#*:} --hybrid $hy ($md): $(row "$f.json" "$f.err") $(grep -oE '"(vram_hit_rate|hybrid_host_fraction|warm_cache_experts)":[^,]*' "$f.json" | tr '\n' ' ') [$(el) s]" >>"$S"
    done; done; done
  fi
else
  echo "no GGUF/pack or no llama-bench: $(tail -5 "$o/llama_run.log" | tr '\n' ' ')" >>"$S"
fi
if [ -n "${SHAPES:-}" ]; then # SHAPES (the header): the other families' GGUFs written one at a time, each compared, then deleted
  if [ -n "${SHAPES_CPU:-}" ]; then slb=${SHAPES_LB:-/work/llama.cpp/build-cpu/bin}; sngl=0; sgf=""; else slb=$lb; sngl=99; sgf=--gpu; fi
  gsh=tools/gguf_shapes.py; [ -f "$gsh" ] || gsh=$here/gguf_shapes.py
  sw=$here/swork; mkdir -p "$sw"; sP=${SHAPES_P:-512}; sV=${SHAPES_VOCAB:-32000}; sE=${SHAPES_END:-560}
  left() { local t=$(( sE - $(el) )); [ $t -gt 5 ] && echo $t || echo 5; } # each step's limit: SHAPES_END
  srow() { python3 - "$@" <<'PY' 2>/dev/null || echo "failed to read the rows"
import json, sys
P = int(sys.argv[4])
def load(p):
    try:
        t = open(p).read(); return json.loads(t[t.index("["):])
    except Exception:
        return []
ll = load(sys.argv[1]); s1 = (load(sys.argv[2]) or [{}])[0]; sp = (load(sys.argv[3]) or [{}])[0]
g = lambda n_p, n_g, d: next((x["avg_ts"] for x in ll if x["n_prompt"] == n_p and x["n_gen"] == n_g and x.get("n_depth", 0) == d), None)
f = lambda x: "-" if x is None else "%.1f" % x
out = []
for name, a, b in (("prefill%d" % P, g(P, 0, 0), sp.get("prefill_tok_s")), ("decode d0", g(0, 32, 0), s1.get("decode_tok_s")),
                   ("decode d%d" % P, g(0, 32, P), sp.get("decode_tok_s"))):
    out.append("%s %s vs %s = %s" % (name, f(a), f(b), "%.2fx" % (b / a) if a and b else "-"))
print("; ".join(out))
PY
  }
  ssz() { PYTHONPATH=$here/py ${PYTHON:-python3} "$gsh" "$1" "$2" x --vocab "$sV" --sizes 2>"$log/shape.$1-L$2.sizes.err" | grep -oE 'total [0-9.]+' | cut -d' ' -f2; }
  sest() { awk -v t="$1" -v z="$2" -v pz="$pz" -v e="${SHAPES_EST:-120}" 'BEGIN { print (t == "" ? e : int(t * (0.5 + 0.5 * z / pz) + 1)) }'; } # the last shape's T s scaled to Z GB
  sfree() { df -BG --output=avail "$sw" | tail -1 | tr -dc 0-9; }
  sroom() { # Z GB: room on the disk for its GGUF and pack (the q30 pair deleted first unless SHAPES_KEEP30)
    local need; need=$(awk -v z="$1" 'BEGIN { print int(2.2 * z + 2) }')
    if [ "$(sfree)" -lt "$need" ] && [ -z "${SHAPES_KEEP30:-}" ] && { [ -e "$gg" ] || [ -e "$sp" ]; }; then
      rm -f "$gg" "$sp"; echo "shapes: disk short ($need G needed): the q30 GGUF and pack deleted [$(el) s]" >>"$S"; fi
    [ "$(sfree)" -ge "$need" ] || { echo "disk $(sfree) G < $need G"; return 1; }; }
  sprep() { # SHAPE LAYERS: its GGUF and pack in $sw, then "rc write_s pack_s" in $sw/SHAPE-LLAYERS.prep
    local b=$sw/$1-L$2 g=$log/shape.$1-L$2 t=$(el) rc tw
    PYTHONPATH=$here/py timeout "$(left)" ${PYTHON:-python3} "$gsh" "$1" "$2" "$b.gguf" --vocab "$sV" >"$g.write.log" 2>&1; rc=$?; tw=$(( $(el) - t ))
    [ $rc = 0 ] && { timeout "$(left)" "$sl" pack "$b.gguf" -o "$b.sluice" >"$g.pack.log" 2>&1; rc=$?; }
    echo "$rc $tw $(( $(el) - t - tw ))" >"$b.prep"; }
  pt=""; pz=""; tb=""; ahead=""; sap=""
  if [ ! -x "$slb/llama-bench" ] || [ ! -x "$slb/llama-completion" ]; then echo "SHAPES: no llama-bench / llama-completion in $slb: skipped" >>"$S"; SHAPES=""; fi
  read -ra shl <<<"$SHAPES"
  for i in "${!shl[@]}"; do
    nm=${shl[$i]%%:*}; L=${shl[$i]#*:}; sb=$sw/$nm-L$L; slog=$log/shape.$nm-L$L; t0=$(el)
    sz=$(ssz "$nm" "$L"); [ -n "$sz" ] || { echo "shape $nm L$L: --sizes failed: $(tail -c 300 "$slog.sizes.err" | tr '\n' ' ')" >>"$S"; continue; }
    if [ "$ahead" = "$i" ]; then # prepared during the last shape's rows: its rows only if they fit
      wait "$sap"; ahead=""; est=$(sest "$tb" "$sz")
      if [ $(( $(el) + est )) -gt "$sE" ]; then echo "shape $nm L$L ($sz GB): prepared, but skipped at $(el) s: its rows' estimate $est s passes SHAPES_END $sE" >>"$S"
        rm -f "$sb.gguf" "$sb.sluice" "$sb.prep"; continue; fi
    else
      est=$(sest "$pt" "$sz")
      if [ $(( t0 + est )) -gt "$sE" ]; then echo "shape $nm L$L ($sz GB): skipped at $t0 s, estimate $est s passes SHAPES_END $sE" >>"$S"; continue; fi
      why=$(sroom "$sz") || { echo "shape $nm L$L ($sz GB): skipped, $why" >>"$S"; continue; }
      sprep "$nm" "$L"
    fi
    rc=none; tw=0; tp=0; [ -f "$sb.prep" ] && read -r rc tw tp <"$sb.prep"
    if [ "$rc" != 0 ]; then echo "shape $nm L$L: write/pack failed (rc $rc): $(tail -c 300 "$slog.write.log" "$slog.pack.log" 2>/dev/null | tr '\n' ' ')" >>"$S"
      rm -f "$sb.gguf" "$sb.sluice" "$sb.prep"; continue; fi
    tr0=$(el)
    j=$(( i + 1 )) # SHAPES_AHEAD (1): the next shape's GGUF and pack written meanwhile (one CPU core, the disk), when it fits
    if [ "${SHAPES_AHEAD:-1}" = 1 ] && [ -n "${shl[$j]:-}" ]; then
      nm2=${shl[$j]%%:*}; L2=${shl[$j]#*:}; sz2=$(ssz "$nm2" "$L2")
      if [ -n "$sz2" ] && [ $(( $(el) + $(sest "$pt" "$sz2") )) -le "$sE" ] && sroom "$sz2" >/dev/null; then
        sprep "$nm2" "$L2" & sap=$!; ahead=$j; fi
    fi
    pr="The quick brown fox jumps over the lazy dog. 1234"
    ga=$(timeout "$(left)" "$slb/llama-completion" -m "$sb.gguf" -ngl $sngl -p "$pr" -n 8 --temp 0 -no-cnv --no-warmup -c 512 --no-display-prompt \
      --simple-io 2>"$slog.greedy.err" | python3 -c 'import sys; sys.stdout.write(sys.stdin.buffer.read().decode("utf-8", "replace"))')
    gb=$(env $SX timeout "$(left)" "$sl" run -m "$sb.sluice" $sgf --resident --kv $KV -p "$pr" -n 8 --temp 0 2>>"$slog.greedy.err")
    if [ -n "$ga" ] && [ "$ga" = "$gb" ]; then gt="greedy identical"; else gt="greedy DIFFERENT (the first $(python3 -c 'import os, sys; print(len(os.path.commonprefix(sys.argv[1:])))' "$ga" "$gb") characters agree): llama.cpp \"${ga:0:80}\" sluice \"${gb:0:80}\""; fi
    for r in $(seq 1 ${SHAPES_ROUNDS:-1}); do
      fa="-fa 1"; timeout "$(left)" "$slb/llama-bench" -m "$sb.gguf" -ngl $sngl -fa 1 -p $sP -n 32 -d 0,$sP -r 1 -o json >"$slog.llama.$r.json" 2>"$slog.llama.$r.err"
      if ! grep -q avg_ts "$slog.llama.$r.json"; then # -fa 1 refused: the default
        fa="-fa default ($(grep -m1 -iE "error|fail" "$slog.llama.$r.err" | cut -c1-80))"
        timeout "$(left)" "$slb/llama-bench" -m "$sb.gguf" -ngl $sngl -p $sP -n 32 -d 0,$sP -r 1 -o json >"$slog.llama.$r.json" 2>"$slog.llama.$r.err"
      fi
      for p in 1 $sP; do
        env $SX timeout "$(left)" "$sl" bench -m "$sb.sluice" $sgf --resident --kv $KV --prompt $p --gen 32 --decode random --json \
          >"$slog.s$p.$r.json" 2>"$slog.s$p.$r.err" || echo "shape $nm sluice --prompt $p failed (rc $?, 124: SHAPES_END): $(tail -c 200 "$slog.s$p.$r.err" | tr '\n' ' ')" >>"$S"
      done
      echo "shape $nm L$L r$r: $(srow "$slog.llama.$r.json" "$slog.s1.$r.json" "$slog.s$sP.$r.json" $sP) (llama.cpp vs sluice tok/s, ratio sluice/llama.cpp; llama.cpp $fa)" >>"$S"
    done
    rm -f "$sb.gguf" "$sb.sluice" "$sb.prep"; tb=$(( $(el) - tr0 )); pt=$(( tw + tp + tb )); pz=$sz
    echo "shape $nm L$L: $gt; $sz GB, write $tw s, pack $tp s, rows $tb s$([ -n "$ahead" ] && echo " (${shl[$ahead]} prepared meanwhile)") [$(el) s]" >>"$S"
  done
  [ -z "$ahead" ] || { wait "$sap"; rm -f "$sw"/*.gguf "$sw"/*.sluice "$sw"/*.prep; }
fi
echo "end [$(el) s]" >>"$S"
