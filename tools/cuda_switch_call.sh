#!/usr/bin/env bash
# tools/cuda_switch_call.sh: one device call that checks an opt-in CUDA switch (environment variables SW) and times
# it against the defaults (issue 24): test_cuda without and with SW, test_model of the fixture families with SW,
# `sluice bench --gpu --resident --prompt 512 --gen 16` of a 16-layer 30B-shape q4 (sluice
# synth) with SW off / on alternated, three rounds, then test_cuda --bench-i8's GEMM / MoE rows and, if time is left,
# ncu durations of the int8 GEMM kernels (gemm_i8, gemm_seg) of one 512-token prefill off / on. Deadline guards:
# each part starts only before its second (test_model 150, bench 200, --bench-i8 200, ncu 250; about 300 s in all,
# or set STOP_AT=S to start nothing after S). Results: $OUT/$NAME/summary.txt and logs.tar.gz (a few files: keep $OUT small).
#   here:  MPI=0 tools/cuda_hybrid.sh prepare DIR; cp tools/cuda_switch_call.sh DIR/run.sh   (a committed tree)
#   there: SW="SLUICE_CUDA_GEMM=5" NAME=gpup28 bash DIR/run.sh   (from a checkout's root: it packs tests/data's fixtures)
#          SW2="..." adds a second switch to test_model and the bench rounds.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sw=${SW:?SW: the switch, e.g. SLUICE_CUDA_GEMM=5}; sw2=${SW2:-}
o="${OUT:-/tmp/sw_out}/${NAME:-switch}"; mkdir -p "$o"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "$1" ] || [ "$(el)" -gt "${STOP_AT:-9999}" ]; }
S=$o/summary.txt
w=/tmp/swc; rm -rf "$w"; mkdir -p "$w/b" "$w/mt" "$w/logs"; log=$w/logs
trap 'tar czf "$o/logs.tar.gz" -C "$w" logs 2>/dev/null; rm -f "$w/q16.sluice"; echo "=== summary"; cat "$S"' EXIT
tar -xJf "$here/bundle.tar.xz" -C "$w/b"
b=$w/b; sl=$b/sluice; export LD_LIBRARY_PATH=$b/lib
{ echo "switch call [$sw] [$sw2]: $(date -u +%FT%TZ) build $(cat "$b/VERSION")"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm --format=csv,noheader; } >"$S" 2>&1
( "$sl" synth --shape qwen3-30b-a3b --layers 16 --quant q4 -o "$w/q16.sluice" >"$log/synth.log" 2>&1; echo "synth16 rc=$? [$(el) s]" >>"$S" ) &
sp=$!
SB=; command -v stdbuf >/dev/null && SB="stdbuf -oL"
for e in "X=0" "$sw"; do
  tag=$(echo "$e" | tr -c 'A-Za-z0-9=\n' _)
  env $e timeout 90 $SB "$b/test_cuda" >"$log/test_cuda.$tag.log" 2>&1; rc=$?
  echo "test_cuda [$e] rc=$rc: $(tail -1 "$log/test_cuda.$tag.log") [$(el) s]" >>"$S"; grep -m 12 "FAIL" "$log/test_cuda.$tag.log" >>"$S"
done
grep -E "^ok .*(int8 group|MoE experts)" "$log/test_cuda.$tag.log" | head -16 >>"$S"
names=$(tools/cuda_pack_fixtures.sh "$sl" "$w/mt" "$log/pack.log")
echo "packed: $names [$(el) s]" >>"$S"
for e in "$sw" ${sw2:+"$sw2"}; do
  late 150 && break
  tag=$(echo "$e" | tr -c 'A-Za-z0-9=\n' _)
  env $e timeout 80 "$b/test_model" "$w/mt" $names >"$log/tm.$tag.log" 2>&1; rc=$?
  echo "test_model [$e] rc=$rc: $(tail -1 "$log/tm.$tag.log") [$(el) s]" >>"$S"; grep -m 8 -i "fail" "$log/tm.$tag.log" >>"$S"
done
rm -rf "$w/mt"
wait $sp
m=$w/q16.sluice
row() { python3 - "$1" <<'PY' 2>/dev/null || echo "failed: $(tail -c 200 "$2" | tr '\n' ' ')"
import json, sys
t = open(sys.argv[1]).read(); r = json.loads(t[t.index("["):])[0]
print("prefill %.1f decode %.2f" % (r["prefill_tok_s"], r["decode_tok_s"]))
PY
}
for r in 1 2 3; do
  for e in "X=0" "$sw" ${sw2:+"$sw2"}; do
    late 200 && break 2
    env $e timeout 30 "$sl" bench -m "$m" --gpu --resident --prompt 512 --gen 16 --decode random --json >"$log/b.json" 2>"$log/b.err"
    echo "16L r$r p512 [$e]: $(row "$log/b.json" "$log/b.err") [$(el) s]" >>"$S"
  done
done
if ! late 200; then
  timeout 60 $SB "$b/test_cuda" --bench-i8 >"$log/bench_i8.log" 2>&1
  grep -E "GEMM|MoE" "$log/bench_i8.log" | grep -v "^ok" | head -30 >>"$S"
fi
NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for e in "X=0" "$sw"; do
  { late 250 || [ -z "$NCUB" ]; } && break
  tag=$(echo "$e" | tr -c 'A-Za-z0-9=\n' _)
  env $e timeout 40 "$NCUB" --kernel-name regex:"gemm_(i8|seg)" --launch-count 80 --metrics gpu__time_duration.sum --csv \
    --print-units base "$sl" bench -m "$m" --gpu --resident --prompt 512 --gen 1 --decode random >"$log/ncu.$tag.csv" 2>"$log/ncu.$tag.err"
  python3 - "$log/ncu.$tag.csv" "$e" >>"$S" <<'PY' 2>/dev/null || echo "ncu [$e]: no table" >>"$S"
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; k, v = h.index("Kernel Name"), h.index("Metric Value")
tot, cnt = collections.defaultdict(float), collections.Counter()
for r in rows[1:]:
    n = r[k].split("(")[0].split("<")[0]; tot[n] += float(r[v].replace(",", "")) / 1e3; cnt[n] += 1
print("ncu [%s], us per 16 layers (launches): %s" % (sys.argv[2], ", ".join("%s %.0f (%d)" % (n, tot[n], cnt[n]) for n in sorted(tot))))
PY
done
echo "end [$(el) s]" >>"$S"
