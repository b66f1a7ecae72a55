#!/usr/bin/env bash
# make bench: tokens/s of `sluice run` (prefill and greedy decode) on every fixture, 1 and all threads.
# Usage: tools/bench.sh [path/to/sluice]
set -euo pipefail
bin=${1:-build/sluice}
out=${TMPDIR:-/tmp}/sluice-bench.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
toks=$(python3 -c 'import json;print(",".join(map(str,json.load(open("tests/data/qwen3_next/ref.json"))["tokens"])))' 2>/dev/null ||
       seq -s, 1 90)
printf "%-16s %7s %14s %14s\n" fixture threads "prefill tok/s" "decode tok/s"
for f in qwen3_moe qwen3_next qwen3_5_moe qwen3_5_fused qwen3_next_fp8; do
    "$bin" pack "tests/data/$f" -o "$out/$f.sluice" 2>/dev/null
    for t in 1 $(nproc); do
        line=$("$bin" run -m "$out/$f.sluice" --tokens "$toks" -n 64 --ids --stats --threads "$t" 2>&1 >/dev/null | tail -1)
        pre=$(echo "$line" | sed -n 's/.*prefill \([0-9.]*\) tok\/s.*/\1/p')
        dec=$(echo "$line" | sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p')
        printf "%-16s %7s %14s %14s\n" "$f" "$t" "$pre" "$dec"
    done
done
