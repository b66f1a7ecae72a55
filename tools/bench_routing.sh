#!/bin/sh
# bench_routing.sh — the RAM cache's hit rate and decode tok/s of one model under uniform, model and recorded
# (trace:FILE) routing, for each cache budget and policy (docs/PERFORMANCE.md "The tiers under recorded routing").
# The routings of a (budget, policy) run one after another, so the machine's load falls on them alike; each
# row is a fresh open (sluice bench), prefetch off so that the policy alone is measured.
#
# Usage: tools/bench_routing.sh MODEL.sluice "TRACE..." "BUDGET..." "POLICY..." [BENCH OPTION...]
#   e.g. tools/bench_routing.sh /tmp/30b8.sluice "models/demo/route128.rtrace models/demo/heldout.rtrace" \
#        "389M 778M 1296M" "lru lfu" --io direct --prompt 64 --gen 128 --threads 1
# Output: one Markdown row per run: budget, policy, routing, hit rate, MiB read per token, decode tok/s, I/O wait.
set -eu
model=$1 traces=$2 budgets=$3 policies=$4
shift 4
sluice=${SLUICE:-build/sluice}
echo "| cache | policy | routing | RAM hit | MiB read / token | decode tok/s | I/O wait |"
echo "|---|---|---|---|---|---|---|"
for b in $budgets; do
    for p in $policies; do
        routings="uniform model"
        for t in $traces; do routings="$routings trace:$t"; done
        for r in $routings; do
            "$sluice" bench -m "$model" --cache "$b" --policy "$p" --routing "$r" --prefetch off --json "$@" \
                2>/dev/null | python3 -c '
import json, sys
b, p, r = sys.argv[1:4]
x = json.load(sys.stdin)[0]
name = "trace " + r.rsplit("/", 1)[-1] if r.startswith("trace:") else r
hit, mib = 100 * x["hit_rate"], x["bytes_per_token"] / 2**20
tps, wait = x["decode_tok_s"], 100 * x["io_wait_fraction"]
print(f"| {b} | {p} | {name} | {hit:.1f}% | {mib:.1f} | {tps:.2f} | {wait:.0f}% |")' "$b" "$p" "$r"
        done
    done
done
