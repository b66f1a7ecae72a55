#!/usr/bin/env bash
# tools/mutants.sh — a small mutation harness: does `make test` catch the faults it was written to catch?
#
# Each mutant below is one planted fault (a disabled sampler option, a stop string never found, a cache
# that keeps a bad block, ...), applied as a regular-expression edit to one file of a scratch copy of the
# tree. For each: build, run `make test`, restore the file. A mutant is killed when `make test` fails,
# survived when it passes; one whose pattern no longer matches (the code moved on: update the mutant) or
# that does not build is an error. Prints a table; exits 1 if any mutant survived or is in error, 2 when
# the unmutated copy does not pass `make test` (then nothing can be concluded).
#
# Run by hand, not by CI (.ci/run): one build and suite run per mutant, about half a minute each on a
# 2-core machine.
#
#   tools/mutants.sh                 every mutant, on a copy of the working tree (tracked and untracked
#                                    files that git does not ignore)
#   tools/mutants.sh NAME...         only those (tools/mutants.sh --list names them)
#   tools/mutants.sh --rev REV ...   on a copy of commit REV instead (git archive)
#   tools/mutants.sh --dry-run ...   only apply and undo each mutant (no build): do the patterns still match?
#
# Environment: VENV (the Python test venv; default build/venv of this tree, passed to make as VENV= and
# PYTHON=$VENV/bin/python; nothing is installed: SLUICE_NO_SETUP=1), JOBS (make -j, default 2), TIMEOUT
# (seconds per suite run, default 900; a run that times out counts as killed), KEEP=1 (keep the copy).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# ---- the mutants: NAME|FILE|what the fault is; the edit is the function mut_NAME (dashes as _)
mutants=(
    "sampler-top-p-off|src/text/sampler.c|top-p is never applied (a disabled sampler option)"
    "stop-string-never-found|src/text/generate.c|stop strings are never found in the text"
    "cache-stale-block|src/stream/cache.c|a block that fails its checksum stays cached and is served on the next use"
    "deltanet-not-restored|src/model/forward.c|a failed micro-batch keeps the DeltaNet state it advanced"
    "chat-reevaluates-history|src/cli/cmd_chat.c|each chat turn starts over and evaluates every earlier prompt again"
    "checksum-never-checked|src/stream/cache.c|expert blocks are never checked against their checksum"
    "kv-position-off-by-one|src/model/attention.c|attention reads one key less (its own position is left out)"
    "logits-last-row-only|src/cli/cmd_run.c|sluice logits writes only the last token's row"
    "info-error-exits-0|src/cli/cmd_pack.c|sluice info on a non-container prints the error but exits 0"
    "simd-table-missing|src/kernels/kernels_avx2.c|the AVX2 table is missing on a CPU that has AVX2"
    "ctrl-c-ignored|src/cli/cmd_chat.c|Ctrl-C in chat never stops the answer"
)

# subst FILE PATTERN: replaces the one match of the Python regular expression PATTERN (multi-line mode)
# in FILE by stdin (a re.sub template: \g<1> for groups); fails unless there is exactly one match.
subst() {
    python3 -c '
import re, sys
path, pat = sys.argv[1], sys.argv[2]
rep = sys.stdin.read()[:-1]
s = open(path).read()
t, n = re.subn(pat, lambda m: m.expand(rep), s, flags=re.M)
if n != 1:
    sys.exit(f"{path}: the pattern matches {n} times (expected once)")
open(path, "w").write(t)' "$1" "$2"
}

mut_sampler_top_p_off() {
    subst src/text/sampler.c 'if \(s->p\.top_p > 0 && s->p\.top_p < 1\) \{' <<'EOF'
if (0) {
EOF
}
mut_stop_string_never_found() {
    subst src/text/generate.c 'if \(p && \(first < 0 \|\| p - s < first\)\) first = p - s;' <<'EOF'
(void)p;
EOF
}
mut_cache_stale_block() {
    subst src/stream/cache.c '(int key = s->key;\n\s*)drop\(c, i\);(\n\s*return fail\(c, SL_ECHECKSUM)' <<'EOF'
\g<1>s->state = S_READY;\g<2>
EOF
}
mut_deltanet_not_restored() { # eval_batch: a failure after layer l's mixer keeps layers 0..l's new state
    subst src/model/forward.c '(rc = fwd_dense_mlp\([^;]*\);\n\s*if \(rc\) )return rc;((?:.|\n)*?if \(cfg->layer_linear\[l\]\) (\w+)->lin_cur\[l\] \^= 1;)' <<'EOF'
\g<1>{
            for (int j = 0; j <= l; j++)
                if (cfg->layer_linear[j]) \g<3>->lin_cur[j] ^= 1;
            return rc;
        }\g<2>
EOF
}
mut_chat_reevaluates_history() {
    subst src/cli/cmd_chat.c '^(\s*sl_gen_params gp = sl_gen_params_default\(\);\n\s*gp\.max_tokens = c->o\.n_gen;)' <<'EOF'
    {
        static int32_t hist[1 << 16];
        static int n_hist;
        int32_t *all = n_hist + n <= (int)(sizeof hist / sizeof *hist) ? malloc((size_t)(n_hist + n) * sizeof *all) : NULL;
        if (all) {
            memcpy(hist + n_hist, ids, (size_t)n * sizeof *ids);
            n_hist += n;
            memcpy(all, hist, (size_t)n_hist * sizeof *all);
            free(ids);
            ids = all;
            n = n_hist;
            sl_session_reset(c->s);
        }
    }
\g<1>
EOF
}
mut_checksum_never_checked() {
    subst src/stream/cache.c 'if \(c->verify\) \{' <<'EOF'
if (0) {
EOF
}
mut_kv_position_off_by_one() {
    subst src/model/attention.c 'int n_keys = (\w+)->pos0 \+ t \+ 1;' <<'EOF'
int n_keys = \g<1>->pos0 + t;
EOF
}
mut_logits_last_row_only() {
    subst src/cli/cmd_run.c 'sl_session_eval\(s, toks, n, logits, 1\)' <<'EOF'
sl_session_eval(s, toks, n, logits, 0)
EOF
}
mut_info_error_exits_0() {
    subst src/cli/cmd_pack.c 'if \(sl_info_json\(path, &txt, &err\)\) return cli_fail\("info", "%s", err\.msg\);' <<'EOF'
if (sl_info_json(path, &txt, &err)) { cli_fail("info", "%s", err.msg); return 0; }
EOF
}
mut_simd_table_missing() {
    subst src/kernels/kernels_avx2.c 'return __builtin_cpu_supports\("avx2"\) && __builtin_cpu_supports\("fma"\) \? &avx2_ops : NULL;' <<'EOF'
return 0 ? &avx2_ops : NULL;
EOF
}
mut_ctrl_c_ignored() {
    subst src/cli/cmd_chat.c '^(static int print_piece\((?:.|\n)*?)return g_stop;' <<'EOF'
\g<1>return 0;
EOF
}

# A mutant that needs something of this machine: prints why it does not apply here, or nothing.
not_here() {
    case "$1" in
        simd-table-missing) grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo || echo "this CPU has no AVX2" ;;
    esac
}

# ---- arguments
rev=""
dry=""
want=()
while [ $# -gt 0 ]; do
    case "$1" in
        --list) for m in "${mutants[@]}"; do IFS='|' read -r n f d <<<"$m"; printf '%-26s %-28s %s\n' "$n" "$f" "$d"; done; exit 0 ;;
        --rev) rev=${2:?--rev needs a commit}; shift 2 ;;
        --dry-run) dry=1; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
        -*) echo "mutants.sh: unknown option $1" >&2; exit 2 ;;
        *) want+=("$1"); shift ;;
    esac
done
sel=()
for m in "${mutants[@]}"; do
    IFS='|' read -r n _ _ <<<"$m"
    if [ ${#want[@]} -eq 0 ]; then sel+=("$m"); continue; fi
    for w in "${want[@]}"; do [ "$w" = "$n" ] && sel+=("$m"); done
done
for w in "${want[@]}"; do
    printf '%s\n' "${mutants[@]}" | grep -q "^$w|" || { echo "mutants.sh: no mutant '$w' (--list)" >&2; exit 2; }
done

venv=${VENV:-$root/build/venv}
case "$venv" in /*) ;; *) venv=$root/$venv ;; esac
[ -x "$venv/bin/python" ] || { echo "mutants.sh: no Python test venv at $venv (run make test once, or set VENV)" >&2; exit 2; }
jobs=${JOBS:-2}
limit=${TIMEOUT:-900}
export SLUICE_NO_SETUP=1
make_args=(-j"$jobs" VENV="$venv" PYTHON="$venv/bin/python")

bad=0

# ---- the scratch copy
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-mutants-XXXXXX")
if [ -n "${KEEP:-}" ]; then echo "scratch copy: $work (kept)"; else trap 'rm -rf "$work"' EXIT; fi
if [ -n "$rev" ]; then
    git archive "$rev" | tar -x -C "$work" || { echo "mutants.sh: cannot export $rev" >&2; exit 2; }
else
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf - | tar -xf - -C "$work"
fi
cd "$work" || exit 2
what=${rev:-the working tree}
t_start=$(date +%s)
if [ -n "$dry" ]; then
    for m in "${sel[@]}"; do
        IFS='|' read -r name file _ <<<"$m"
        cp -p "$file" "$work/orig"
        if ! err=$("mut_${name//-/_}" 2>&1); then echo "$name: ERROR, not applied: $err"; bad=$((bad + 1))
        elif cmp -s "$file" "$work/orig"; then echo "$name: ERROR, the edit changed nothing"; bad=$((bad + 1))
        else echo "$name: applies"
        fi
        cp -p "$work/orig" "$file"
    done
    exit $((bad > 0))
fi
echo "mutants.sh: ${#sel[@]} mutants on a copy of $what ($work); baseline first"
if ! timeout "$limit" make "${make_args[@]}" test >"$work/baseline.log" 2>&1; then
    tail -20 "$work/baseline.log"
    echo "mutants.sh: the unmutated copy of $what fails make test (log above): fix that first" >&2
    exit 2
fi
echo "baseline: $(tail -1 "$work/baseline.log") ($(($(date +%s) - t_start)) s)"

# ---- one run per mutant
results=()
for m in "${sel[@]}"; do
    IFS='|' read -r name file desc <<<"$m"
    t0=$(date +%s)
    why=$(not_here "$name")
    if [ -n "$why" ]; then
        results+=("$name|skipped|$why|0")
        continue
    fi
    cp -p "$file" "$work/orig"
    log="$work/$name.log"
    if ! err=$("mut_${name//-/_}" 2>&1); then
        result="ERROR"; detail="not applied: $err"
    elif cmp -s "$file" "$work/orig"; then
        result="ERROR"; detail="not applied: the edit changed nothing"
    elif ! make "${make_args[@]}" build/sluice build/test_sluice >"$log" 2>&1; then
        result="ERROR"; detail="does not build: $(grep -m1 'error' "$log")"
    else
        timeout "$limit" make "${make_args[@]}" test >>"$log" 2>&1
        rc=$?
        caught=$(grep -oE '^(FAIL|FAILED) [^ ]+' "$log" | awk '{print $2}' | sort -u | head -4 | paste -sd ' ')
        if [ "$rc" -eq 124 ]; then result="killed"; detail="timed out after $limit s"
        elif [ "$rc" -ne 0 ]; then result="killed"; detail="${caught:-make test failed (see the log)}"
        else result="SURVIVED"; detail="make test passed: $(tail -1 "$log")"
        fi
    fi
    cp "$work/orig" "$file" && touch "$file" # newer than the mutant's objects: rebuilt next time
    detail=${detail//|//}
    [ "$result" = killed ] || bad=$((bad + 1))
    results+=("$name|$result|$detail|$(($(date +%s) - t0))")
    printf '%-26s %-9s %4ss  %s\n' "$name" "$result" "$(($(date +%s) - t0))" "$detail"
done

echo
printf '%-26s %-9s %6s  %s\n' mutant result time "caught by / why"
for r in "${results[@]}"; do
    IFS='|' read -r n res d s <<<"$r"
    printf '%-26s %-9s %5ss  %s\n' "$n" "$res" "$s" "$d"
done
killed=$(printf '%s\n' "${results[@]}" | awk -F'|' '$2 == "killed"' | wc -l)
skipped=$(printf '%s\n' "${results[@]}" | awk -F'|' '$2 == "skipped"' | wc -l)
echo "${#results[@]} mutants: $killed killed, $bad survived or in error, $skipped skipped; $(($(date +%s) - t_start)) s in all"
[ "$bad" -eq 0 ]
