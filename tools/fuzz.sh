#!/usr/bin/env bash
# make fuzz: each libFuzzer harness of fuzz/ (built by `make fuzz-build` into BUILD) replays its committed
# findings (fuzz/regress/NAME/*: every one must pass), then fuzzes for SECONDS from the committed seeds
# (fuzz/corpus/NAME) plus what earlier runs found (BUILD/corpus/NAME), with fuzz/dict/NAME.dict when there
# is one. A crash, a leak, a sanitizer report or a timeout fails the run; the input is kept in
# BUILD/crash/NAME/ (commit it under fuzz/regress/NAME/ with the fix). Prints one line per harness:
# executions, coverage (edges, features), corpus size. FUZZ_SEED (environment) fixes libFuzzer's seed: a
# run with the same seed replays the same inputs, so a longer run covers every input a shorter one tried
# (CI runs seed 1 for 3 s; run it for longer before a change lands). Unset or 0: a new seed every run.
# Usage: tools/fuzz.sh BUILD SECONDS [name,name,...]
set -uo pipefail
build=${1:-build/fuzz}
secs=${2:-30}
only=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# inputs the harnesses read: a packed fixture as the container template, a saved state of the demo model
if [ ! -f "$build/template.sluice" ]; then
    "$build/sluice" pack tests/data/qwen3_moe -o "$build/template.sluice.tmp" >/dev/null &&
        mv "$build/template.sluice.tmp" "$build/template.sluice" || { echo "FAIL cannot pack the template"; exit 1; }
fi

# seeds made from those (too big to commit): the template's manifest and header fields, a whole state blob
gen="$build/seeds"
if [ ! -f "$gen/state/demo5.bin" ] || [ ! -f "$gen/container/manifest.bin" ]; then
    mkdir -p "$gen/state" "$gen/container"
    FUZZ_STATE_SEED="$gen/state/demo5.bin" "$build/fuzz_state" >/dev/null 2>&1 || { echo "FAIL cannot make the state seed"; exit 1; }
    python3 - "$build/template.sluice" "$gen/container" <<'PY' || { echo "FAIL cannot make the container seeds"; exit 1; }
import struct, sys
b = open(sys.argv[1], 'rb').read()
off, n = struct.unpack_from('<QQ', b, 24)
open(sys.argv[2] + '/manifest.bin', 'wb').write(b'\0' + b[off:off + n])
open(sys.argv[2] + '/header.bin', 'wb').write(b'\1' + b[16:128])
PY
fi

names=()
for f in fuzz/fuzz_*.c; do
    n=$(basename "$f" .c); n=${n#fuzz_}
    if [ -n "$only" ] && [[ ",$only," != *",$n,"* ]]; then continue; fi
    names+=("$n")
done
[ ${#names[@]} -gt 0 ] || { echo "FAIL no harness matches '$only'"; exit 1; }

fail=0
printf '%-12s %10s %8s %8s %7s  %s\n' harness execs cov ft corpus result
for n in "${names[@]}"; do
    bin="$build/fuzz_$n"
    corpus="$build/corpus/$n"; crash="$build/crash/$n"; log="$build/log/$n.log"
    mkdir -p "$corpus" "$crash" "$build/log"
    seeds=(); [ -d "fuzz/corpus/$n" ] && seeds+=("fuzz/corpus/$n"); [ -d "$gen/$n" ] && seeds+=("$gen/$n")
    dict=(); [ -f "fuzz/dict/$n.dict" ] && dict+=("-dict=fuzz/dict/$n.dict")
    res=ok
    if [ -d "fuzz/regress/$n" ] && compgen -G "fuzz/regress/$n/*" >/dev/null; then
        if ! "$bin" -runs=1 "fuzz/regress/$n"/* >"$log" 2>&1; then res="REGRESSION"; fi
    fi
    if [ "$res" = ok ]; then
        "$bin" -seed="${FUZZ_SEED:-0}" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2560 -max_len=$(case $n in state) echo 400000;; gguf) echo 131072;; *) echo 65536;; esac) -print_final_stats=1 \
            -artifact_prefix="$crash/" "${dict[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1 || res=CRASH
    fi
    st=$(grep -E '^#[0-9]+' "$log" | tail -1)
    execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(echo "$st" | sed -nE 's/.*cov: ([0-9]+).*/\1/p'); ft=$(echo "$st" | sed -nE 's/.*ft: ([0-9]+).*/\1/p')
    corp=$(echo "$st" | sed -nE 's/.*corp: ([0-9]+).*/\1/p')
    printf '%-12s %10s %8s %8s %7s  %s\n' "$n" "${execs:--}" "${cov:--}" "${ft:--}" "${corp:--}" "$res"
    if [ "$res" != ok ]; then
        fail=1
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -5 | sed 's/^/    /'
        echo "    log: $log"
    fi
done
exit $fail
