#!/usr/bin/env bash
# make test: the C suite (build/test_sluice) and the Python end-to-end suite (tests/py, pytest), with
# one closing line "N passed, N failed" summing both. Exits non-zero if anything failed.
# Usage: tools/run_tests.sh BUILD_DIR [FILTER]
set -uo pipefail
build=${1:-build}
filter=${2:-}
export SLUICE_BIN=${SLUICE_BIN:-$build/sluice}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$build/test_sluice" $filter 2>&1 | tee "$log"
c_rc=${PIPESTATUS[0]}
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
cp=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); cf=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
[ -n "$cp" ] || { cp=0; cf=1; }
pp=0; pf=0; py_rc=0
if [ -d tests/py ] && ls tests/py/test_*.py >/dev/null 2>&1 && [ -z "$filter" ]; then
    if python3 -c 'import pytest' 2>/dev/null; then
        python3 -m pytest -q tests/py 2>&1 | tee "$log"
        py_rc=${PIPESTATUS[0]}
        summary=$(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1)
        pp=$(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
        pf=$(echo "$summary" | grep -oE '[0-9]+ (failed|errors?)' | awk '{s+=$1} END {print s+0}')
        pp=${pp:-0}; pf=${pf:-0}
        [ "$py_rc" -eq 5 ] && py_rc=0   # no tests collected
        [ "$py_rc" -ne 0 ] && [ "$pf" -eq 0 ] && pf=1
    else
        echo "pytest is not installed: tests/py skipped (pip install pytest tokenizers jinja2)"
        pf=1; py_rc=1
    fi
fi
echo "$((cp + pp)) passed, $((cf + pf)) failed"
[ "$c_rc" -eq 0 ] && [ "$py_rc" -eq 0 ] && [ "$((cf + pf))" -eq 0 ]
