#!/usr/bin/env bash
# The restructuring guard (issue 23): `sluice logits` of every fixture in five modes, hashed, so a change
# that means to move code without changing behaviour can prove that the bytes are the same before and after.
#   tools/logits_check.sh snapshot FILE   writes one line per (fixture, mode): "fixture mode sha256"
#   tools/logits_check.sh compare FILE    recomputes and diffs against FILE; exit 1 on any difference
# Modes: f32-resident, f32-streamed (a cache of two blocks' worth), q4-int8 (resident, int8 activations),
# q4-exact-streamed (f32 activations through a small cache), f32-tier (a 96 KiB device tier over a 160 KiB
# RAM cache, the CPU backend standing in for the device). Packs are made under build/logits_check/ from
# tests/data/<fixture> (HF directories with ref.json: the fixture's own 100 reference tokens are evaluated).
# SLUICE (default build/sluice) names the binary, so an old build can make the snapshot.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?snapshot or compare}
file=${2:?a file}
bin=${SLUICE:-build/sluice}
work=build/logits_check
mkdir -p "$work"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for d in tests/data/*/; do
    f=$(basename "$d")
    [ -f "$d/ref.json" ] && [ -f "$d/config.json" ] || continue
    toks=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$d/ref.json")
    [ -f "$work/$f.f32.sluice" ] || "$bin" pack "$d" -o "$work/$f.f32.sluice" --quant f32 >/dev/null
    [ -f "$work/$f.q4.sluice" ] || "$bin" pack "$d" -o "$work/$f.q4.sluice" --quant q4 --group 32 >/dev/null
    run() { # name, model, options...
        local name=$1 model=$2
        shift 2
        "$bin" logits -m "$model" --tokens "$toks" --out "$work/out.f32" --threads 2 --kv f32 "$@" >/dev/null
        echo "$f $name $(sha256sum <"$work/out.f32" | cut -c1-64)" >>"$out"
    }
    run f32-resident "$work/$f.f32.sluice" --resident
    run f32-streamed "$work/$f.f32.sluice" --cache 160K
    run q4-int8 "$work/$f.q4.sluice" --resident
    run q4-exact-streamed "$work/$f.q4.sluice" --exact --cache 160K
    run f32-tier "$work/$f.f32.sluice" --cache 160K --vram 96K
done
case $mode in
snapshot) cp "$out" "$file" && echo "logits_check: $(wc -l <"$file") hashes written to $file" ;;
compare)
    if diff "$file" "$out"; then
        echo "logits_check: $(wc -l <"$file") hashes identical"
    else
        echo "logits_check: logits differ from $file" >&2
        exit 1
    fi
    ;;
*) echo "usage: $0 snapshot|compare FILE" >&2 && exit 2 ;;
esac
