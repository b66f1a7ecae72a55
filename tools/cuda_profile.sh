#!/usr/bin/env bash
# Where a resident GPU step's time goes (issue 24): per-kernel device time from Nsight Compute (one metric,
# gpu__time_duration, so one replay pass a kernel) beside the wall time of the same steps, on the Qwen3-30B-A3B
# shape (q4, synthesised). Made here, run there:
#   here:  MODEL_TEST=0 SYNC_BIN=0 tools/cuda_bench.sh prepare DIR   (DIR/bundle.tar.xz: the CLI and its libraries)
#   there: tools/cuda_profile.sh DIR     results under $OUT (else DIR/out): profile.txt, the *.csv per-kernel tables
# Environment: LAYERS (4: the synthesised layers under ncu; the timed benches use all 48), BINS (sluice: the
# binaries in the bundle to time, e.g. "sluice sluice-base"), PROF_GEN (4), PROF_PROMPT (512).
set -euo pipefail
dir=${1:?a directory}
dir=$(cd "$dir" && pwd)
stage=$dir/stage
[ -x "$stage/sluice" ] || { mkdir -p "$stage" && tar -xJf "$dir/bundle.tar.xz" -C "$stage"; }
out=${OUT:-$dir/out}
mkdir -p "$out" "$dir/work"
export LD_LIBRARY_PATH="$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log=$out/profile.txt
exec > >(tee -a "$log") 2>&1
echo "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo; nproc
full=$dir/work/q30.sluice
small=$dir/work/q30-L${LAYERS:-4}.sluice
[ -n "${SKIP_TIMED:-}" ] || [ -f "$full" ] || "$stage/sluice" synth --shape qwen3-30b-a3b --quant q4 -o "$full" 2>&1 | tail -1
[ -f "$small" ] || "$stage/sluice" synth --shape qwen3-30b-a3b --quant q4 --layers "${LAYERS:-4}" -o "$small" 2>&1 | tail -1
summ() { # a per-kernel table from ncu's CSV: calls, total ms, share
    python3 - "$1" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
h = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
hdr = rows[h]; kn = hdr.index('Kernel Name'); mv = hdr.index('Metric Value'); un = hdr.index('Metric Unit')
t = collections.defaultdict(lambda: [0, 0.0])
for r in rows[h + 1:]:
    if len(r) <= mv: continue
    v = float(r[mv].replace(',', '')); u = r[un]
    v = v / 1e6 if u == 'nsecond' else v / 1e3 if u == 'usecond' else v if u == 'msecond' else v * 1e3
    name = r[kn].split('(')[0].split('<')[0]
    t[name][0] += 1; t[name][1] += v
tot = sum(x[1] for x in t.values())
print(f'{"kernel":48s} {"calls":>7s} {"ms":>9s} {"share":>6s} {"us/call":>8s}')
for k, (n, ms) in sorted(t.items(), key=lambda kv: -kv[1][1]):
    print(f'{k[:48]:48s} {n:7d} {ms:9.3f} {100*ms/tot:5.1f}% {1000*ms/n:8.1f}')
print(f'{"total":48s} {sum(x[0] for x in t.values()):7d} {tot:9.3f}')
PY
}
for b in $([ -n "${SKIP_TIMED:-}" ] || echo ${BINS:-sluice}); do
    echo "== $b: timed, all layers (--gpu --resident, model routing)"
    for p in 1 512; do
        "$stage/$b" bench -m "$full" --gpu --resident --prompt $p --gen 64 --decode random 2>&1 | tail -2
    done
done
b=${BINS%% *}; b=${b:-sluice}
g=${PROF_GEN:-4}; p=${PROF_PROMPT:-512}
echo "== $b: ncu decode, ${LAYERS:-4} layers, --prompt 1 --gen $g (warm-up off)"
ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$out/decode.csv" \
    "$stage/$b" bench -m "$small" --gpu --resident --prompt 1 --gen "$g" --no-warmup >"$out/decode.out" 2>"$out/decode.err" || tail -3 "$out/decode.err"
summ "$out/decode.csv" | tee "$out/decode_kernels.txt" | head -40
echo "== $b: ncu prefill, ${LAYERS:-4} layers, --prompt $p --gen 1 (warm-up off)"
ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$out/prefill.csv" \
    "$stage/$b" bench -m "$small" --gpu --resident --prompt "$p" --gen 1 --no-warmup >"$out/prefill.out" 2>"$out/prefill.err" || tail -3 "$out/prefill.err"
summ "$out/prefill.csv" | tee "$out/prefill_kernels.txt" | head -40
echo "== timed, ${LAYERS:-4} layers, without ncu (the wall time the kernels above sit in)"
"$stage/$b" bench -m "$small" --gpu --resident --prompt 1 --gen "$g" --no-warmup 2>&1 | tail -1
"$stage/$b" bench -m "$small" --gpu --resident --prompt "$p" --gen 1 --no-warmup 2>&1 | tail -1
gzip -f "$out/decode.csv" "$out/prefill.csv"
