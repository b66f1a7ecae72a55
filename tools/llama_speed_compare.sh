#!/usr/bin/env bash
# Decode speed of sluice against llama.cpp on the same GGUF files (docs/QUANT.md "Against llama.cpp"): for each
# TYPE the files tools/llama_quant_compare.sh left in WORKDIR (demo-TYPE.gguf, demo-TYPE.sluice), runs of
#   llama-bench -p 0 -n N -r 1 -t T --repack 0      (tg N tokens/s; -nr as the compare script: AMX faults here)
#   sluice bench --resident --threads T --prompt 16 --gen N --decode random   (decode/s, random ids as llama-bench)
# for T in THREADS (default "1 2"), in ROUNDS rounds (default 1): each round runs every (type, threads) pair once
# per engine, the engines alternating which goes first, so that a shared machine's load falls on both alike.
# Prints one line per run pair (with the 1-minute load average before it) and, after the last round, per
# (type, threads) the best of the rounds for each engine and their ratio (sluice / llama.cpp).
# Local only (CI does not build llama.cpp). Usage: [ROUNDS=R] tools/llama_speed_compare.sh WORKDIR [TYPE ...]
set -euo pipefail
work=${1:?a work directory}
shift
types=${*:-Q4_K_M Q3_K_M Q2_K Q6_K IQ4_XS}
cd "$(dirname "$0")/.."
lb=${LLAMA_BIN:-/work/llama.cpp/build-cpu/bin}
sl=${SLUICE:-build/sluice}
n=${N_GEN:-64}
rounds=${ROUNDS:-1}
llama() {
    "$lb/llama-bench" -m "$work/demo-$1.gguf" -t "$2" -p 0 -n "$n" -r 1 --repack 0 -o csv 2>/dev/null |
        tail -1 | awk -F, '{gsub(/"/,""); print $(NF-1)}'
}
sluice() {
    "$sl" bench -m "$work/demo-$1.sluice" --resident --threads "$2" --prompt 16 --gen "$n" --decode random --json |
        ${PYTHON:-build/venv/bin/python} -c 'import json,sys; print(json.load(sys.stdin)[0]["decode_tok_s"])'
}
declare -A best_a best_b
printf '%-5s %-8s %7s %6s %12s %12s %7s\n' round type threads load llama.cpp sluice ratio
for r in $(seq 1 "$rounds"); do
    for t in $types; do
        for th in ${THREADS:-1 2}; do
            load=$(cut -d' ' -f1 /proc/loadavg)
            if (( r % 2 )); then a=$(llama "$t" "$th"); b=$(sluice "$t" "$th"); else b=$(sluice "$t" "$th"); a=$(llama "$t" "$th"); fi
            printf '%-5s %-8s %7s %6s %12.1f %12.1f %7.2f\n' "$r" "$t" "$th" "$load" "$a" "$b" "$(echo "$b / $a" | bc -l)"
            k="$t/$th"
            if [[ -z ${best_a[$k]:-} ]] || (( $(echo "$a > ${best_a[$k]}" | bc -l) )); then best_a[$k]=$a; fi
            if [[ -z ${best_b[$k]:-} ]] || (( $(echo "$b > ${best_b[$k]}" | bc -l) )); then best_b[$k]=$b; fi
        done
    done
done
if (( rounds > 1 )); then
    printf '\nbest of %s rounds\n%-8s %7s %12s %12s %7s\n' "$rounds" type threads llama.cpp sluice ratio
    for t in $types; do
        for th in ${THREADS:-1 2}; do
            k="$t/$th"
            printf '%-8s %7s %12.1f %12.1f %7.2f\n' "$t" "$th" "${best_a[$k]}" "${best_b[$k]}" \
                "$(echo "${best_b[$k]} / ${best_a[$k]}" | bc -l)"
        done
    done
fi
