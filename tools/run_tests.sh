#!/usr/bin/env bash
# make test: the C suite (build/test_sluice) and the Python end-to-end suite (tests/py, pytest), with
# one closing line "N passed, N failed" summing both. Exits non-zero if anything failed.
#
# A suite that ran nothing is a failure, never a pass: pytest collecting no tests (exit 5), pytest
# missing, and every test file of tests/MANIFEST that is missing or ran no test (the C runner prints
# the cases run per file, pytest's JUnit report gives the tests run per file; skipped ones do not
# count), and a test file on disk that the manifest does not list. Each counts as one failure; a C
# runner that dies before its summary (a crash, a sanitizer abort) is one, and its files are then not
# checked one by one.
# With a FILTER only the matching C cases run, and the Python suite and the manifest are not checked.
# Python is ${PYTHON:-python3} (the Makefile passes the project's venv).
# Usage: tools/run_tests.sh BUILD_DIR [FILTER]
set -uo pipefail
build=${1:-build}
filter=${2:-}
py=${PYTHON:-python3}
export SLUICE_BIN=${SLUICE_BIN:-$build/sluice}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/test_sluice" $filter 2>&1 | tee "$tmp/c.log"
c_rc=${PIPESTATUS[0]}
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/c.log" | tail -1)
cp=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); cf=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
if [ -z "$cp" ]; then # the runner died (a crash, a sanitizer abort): its cases per file are unknown
    echo "FAIL $build/test_sluice did not finish (exit $c_rc)"
    cp=0; cf=1
fi
pp=0; pf=0; py_rc=0; mf=0
if [ -z "$filter" ]; then
    # "FILE N" per line: tests run per file, C (the runner's "files:" line) and Python (JUnit XML)
    grep -E '^files:' "$tmp/c.log" | tail -1 | sed -E 's/^files://' | xargs -n 2 echo > "$tmp/ran"
    if "$py" -c 'import pytest' 2>/dev/null; then
        "$py" -m pytest -q tests/py --junitxml="$tmp/py.xml" 2>&1 | tee "$tmp/py.log"
        py_rc=${PIPESTATUS[0]}
        summary=$(grep -E '[0-9]+ (passed|failed|errors?)' "$tmp/py.log" | tail -1)
        pp=$(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
        pf=$(echo "$summary" | grep -oE '[0-9]+ (failed|errors?)' | awk '{s+=$1} END {print s+0}')
        pp=${pp:-0}; pf=${pf:-0}
        [ "$py_rc" -eq 5 ] && echo "FAIL pytest collected no tests in tests/py"
        [ "$py_rc" -ne 0 ] && [ "$pf" -eq 0 ] && pf=1
        [ -f "$tmp/py.xml" ] && "$py" - "$tmp/py.xml" >> "$tmp/ran" <<'PY'
import collections, sys, xml.etree.ElementTree as ET
n = collections.Counter()
for case in ET.parse(sys.argv[1]).iter("testcase"):
    if case.find("skipped") is None:  # classname: the module's dotted path, relative to pytest's rootdir
        n["tests/py/" + case.get("classname", "").split(".")[-1] + ".py"] += 1
for f, k in sorted(n.items()):
    print(f, k)
PY
    else
        echo "FAIL pytest is not installed for $py: tests/py not run (pip install pytest tokenizers jinja2)"
        pf=1; py_rc=1
    fi
    if [ ! -f tests/MANIFEST ]; then
        echo "FAIL tests/MANIFEST is missing"
        mf=1
    else
        while read -r f; do
            case "$f" in ''|'#'*) continue ;; esac
            n=$(awk -v f="$f" '$1 == f {s += $2} END {print s+0}' "$tmp/ran")
            if [ ! -f "$f" ]; then echo "FAIL $f (tests/MANIFEST) is missing"; mf=$((mf + 1))
            elif [ "$n" -eq 0 ] && { [ -n "$line" ] || [ "${f%.c}" = "$f" ]; }; then
                echo "FAIL $f (tests/MANIFEST) ran no test"; mf=$((mf + 1))
            fi
        done < tests/MANIFEST
        for f in tests/test_*.c tests/py/test_*.py; do
            [ -f "$f" ] && [ "$f" != tests/test_main.c ] || continue
            grep -qxF "$f" tests/MANIFEST || { echo "FAIL $f is not listed in tests/MANIFEST"; mf=$((mf + 1)); }
        done
    fi
fi
echo "$((cp + pp)) passed, $((cf + pf + mf)) failed"
[ "$c_rc" -eq 0 ] && [ "$py_rc" -eq 0 ] && [ "$((cf + pf + mf))" -eq 0 ]
