#!/usr/bin/env bash
# Decode speed of sluice against llama.cpp on the same GGUF files (docs/QUANT.md "Against llama.cpp"): for each
# TYPE the files tools/llama_quant_compare.sh left in WORKDIR (demo-TYPE.gguf, demo-TYPE.sluice), one run each of
#   llama-bench -p 0 -n N -r 1 -t T --repack 0      (tg N tokens/s; -nr as the compare script: AMX faults here)
#   sluice bench --resident --threads T --prompt 16 --gen N --decode random   (decode/s, random ids as llama-bench)
# for T in THREADS (default "1 2"), llama.cpp first; prints one line per (type, threads) with the ratio.
# Local only (CI does not build llama.cpp). Usage: tools/llama_speed_compare.sh WORKDIR [TYPE ...]
set -euo pipefail
work=${1:?a work directory}
shift
types=${*:-Q4_K_M Q3_K_M Q2_K Q6_K IQ4_XS}
cd "$(dirname "$0")/.."
lb=${LLAMA_BIN:-/work/llama.cpp/build-cpu/bin}
sl=${SLUICE:-build/sluice}
n=${N_GEN:-64}
printf '%-8s %7s %12s %12s %7s\n' type threads llama.cpp sluice ratio
for t in $types; do
    for th in ${THREADS:-1 2}; do
        a=$("$lb/llama-bench" -m "$work/demo-$t.gguf" -t "$th" -p 0 -n "$n" -r 1 --repack 0 -o csv 2>/dev/null |
            tail -1 | awk -F, '{gsub(/"/,""); print $(NF-1)}')
        b=$("$sl" bench -m "$work/demo-$t.sluice" --resident --threads "$th" --prompt 16 --gen "$n" --decode random --json |
            ${PYTHON:-build/venv/bin/python} -c 'import json,sys; print(json.load(sys.stdin)[0]["decode_tok_s"])')
        printf '%-8s %7s %12.1f %12.1f %7.2f\n' "$t" "$th" "$a" "$b" "$(echo "$b / $a" | bc -l)"
    done
done
