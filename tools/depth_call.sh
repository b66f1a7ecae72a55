#!/usr/bin/env bash
# tools/depth_call.sh DIR: issue 28's depth rows on the GPU machine in one budget (END seconds, 250 by default):
# prefill of 8192 / 32768 tokens and decode at depth 8192 / 32768 on the GPU against llama.cpp's CUDA build, and the
# same on the host's CPU at 16 threads against llama.cpp built for that CPU; every case a fresh process, the two
# engines alternating (tools/depth_bench.py run), the tables with their ratios in $OUT/depth/summary.md.
#
# DIR: the lead's bundle (tools/cuda_call.sh, tools/cuda_llama.sh prepare): DIR/stage/sluice (main's CUDA build; or
# DIR/bundle.tar.xz, unpacked here), DIR/llama (or DIR/llama.tar.xz: llama-cpp-python 0.3.36's llama.cpp, ggml 0.25.3,
# and DIR/py: PyPI gguf and Qwen3's tokenizer.json for the GGUF writer), DIR/llama/build/bin/llama-bench: the CUDA
# build tools/cuda_llama.sh run makes (sm_90a, GGML_NATIVE=OFF). Run from the checkout: bash tools/depth_call.sh DIR.
#
# Steps (el = seconds since the start; nothing runs past END):
#  1. in the background, nice'd: the CUDA llama-bench when DIR/llama/build/bin lacks it (cuda_llama.sh's cmake
#     line; minutes: BUILD_CUDA=0 skips it and the GPU rows), then llama.cpp for the CPU rows in DIR/llama/build-cpu
#     (GGML_CUDA=OFF, GGML_NATIVE=ON: the host's AVX-512 / AMX, as a user's own build; the CUDA build has
#     GGML_NATIVE=OFF, AVX2 only, so its CPU rows would not be llama.cpp at its best). LLAMA_CPU=cuda: no second
#     build, the CPU rows run the CUDA build with -ngl 0 -dev none (labelled so). A CPU build not done when the CPU
#     rows are due waits for the second GPU round; not done by then: the CUDA build's rows instead.
#  2. meanwhile the two GGUFs (depth_bench.py write, vocabulary 8192, random weights) and their packs, in DIR/depth
#     (kept for a warm machine's next call; not DIR/work, whose other GGUFs cuda_llama.sh deletes):
#     dL.gguf of GPU_LAYERS (8) layers for the GPU rows (one layer would leave the GPU's step launch- and
#     host-bound: a 48-layer decode step at depth 8192 spends ~110 us a layer, a step's fixed part ~0.1-0.2 ms, so
#     8 layers keep the per-layer work (attention, experts) ~85% of a step, at ~2.9 GB written in ~20 s) and
#     d1.gguf (one layer, the CPU rows' file, as the 2-thread rows of docs/PERFORMANCE.md).
#  3. WAIT_FOR=FILE: no row starts before FILE exists (the caller's GPU work first); then, each row a
#     depth_bench.py run with the deadline (a pair is not started when its last round took longer than is left;
#     a run still going at END is killed):
#       GPU round 0 (GPU_CASES: pp:8192 tg:8192 pp:32768 tg:32768, f16 KV), CPU round 0 (CPU_CASES: pp:8192
#       tg:8192), GPU round 1, CPU round 1, then CPU_LONG (pp:32768 tg:32768) once where the 8k pair times 16
#       fit what is left.
#     GPU: llama-bench -ngl 99 -fa 1 -ctk f16 -ctv f16 -r 1 -p N -n 0 / -p 0 -n 32 -d D against sluice bench --gpu
#     --resident --kv f16 --routing model --decode random --prompt N --gen 0 / --prompt D --gen 32, both with their
#     warm-ups (a first launch pays module loads; llama-bench's warm-up runs the prompt, sluice's the prompt and a
#     token), each engine's default threads. CPU (THREADS, 16): llama-bench -t 16 -ngl 0 -dev none ... --no-warmup
#     (pp) with OMP_WAIT_POLICY=active (a dedicated host: llama.cpp's best), sluice bench --cpu --resident
#     --threads 16 ... --no-warmup: the 2-thread rows' protocol.
#  4. $OUT/depth/summary.md (machine, versions, builds, steps, the commands, the tables), rows.jsonl (every run),
#     logs/ (builds, GGUF, pack, nvidia-smi every 0.5 s during the rows).
# Knobs: END, GPU_LAYERS, GPU_CASES, CPU_CASES, CPU_LONG, THREADS, ROUNDS_GPU / ROUNDS_CPU (2), WAIT_FOR, BUILD_CUDA,
# LLAMA_CPU (native | cuda), JOBS, CLEAN=1 (DIR/depth's ~7 GB removed at the end), OMP (llama.cpp's OMP_WAIT_POLICY in the CPU rows: active; passive; default = unset).
# sluice's switches (SLUICE_CUDA_...): the environment's, which every run inherits (llama.cpp reads none of them).
# The CPU rows want an otherwise idle host: run this after (or with WAIT_FOR) the call's other work.
# A rehearsal without a GPU: SLUICE, LLAMA_GPU_BIN, LLAMA_CPU_BIN (executables used as they are, no builds), PYTHON,
# and a DIR holding py/ or none (the writer's gguf from PYTHON's packages); /work/notes/depth34.md has one.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(cd "${1:?usage: tools/depth_call.sh DIR}" && pwd)
T0=$(date +%s); END=${END:-250}; DL=$((T0 + END))
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DL - $(date +%s) )); }
o=${OUT:-/tmp/d_out}/depth; mkdir -p "$o/logs"; log=$o/logs
S=$o/summary.md; J=$o/rows.jsonl; : >"$J"; st=$log/steps.txt; : >"$st"; rm -f "$log"/*.done
step() { echo "[$(el) s] $*" | tee -a "$st"; }
py=${PYTHON:-python3}
bench=$here/depth_bench.py; [ -f "$bench" ] || bench=$PWD/tools/depth_bench.py
w=$dir/depth; mkdir -p "$w"
GL=${GPU_LAYERS:-8}; TH=${THREADS:-16}; JOBS=${JOBS:-$(nproc)}
GPU_CASES=${GPU_CASES-pp:8192:f16 tg:8192:f16 pp:32768:f16 tg:32768:f16}
CPU_CASES=${CPU_CASES-pp:8192:f16 tg:8192:f16}
CPU_LONG=${CPU_LONG-pp:32768:f16 tg:32768:f16}
bg=() # background jobs started here (process groups), stopped at the end
fin() {
    for p in "${bg[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null; done
    [ -n "${bg_smi:-}" ] && kill "$bg_smi" 2>/dev/null
    {
        echo "# depth rows (tools/depth_call.sh), $(date -u +%FT%TZ), $(el) s of END=$END"
        cat "$log/machine.txt" 2>/dev/null; echo; echo '```'; cat "$st"; echo '```'; echo
        "$py" "$bench" summary "$J" 2>&1
        echo; echo "commands (one of each engine and set; every run's in rows.jsonl):"
        "$py" - "$J" <<'PY' 2>/dev/null
import json, sys
seen = set()
for line in open(sys.argv[1]):
    x = json.loads(line)
    k = (x.get("label"), x.get("engine"), x.get("case", "").split(":")[0])
    if "command" in x and k not in seen:
        seen.add(k)
        print(f"- {x['label']}, {x['engine']}, {k[2]}: `{x['command']}`")
PY
        grep -h '"skipped"' "$J" | sed 's/^/skipped: /'
        [ -s "$log/smi.csv" ] && "$py" - "$log/smi.csv" <<'PY' 2>/dev/null
import csv, sys
r = [x for x in list(csv.reader(open(sys.argv[1])))[1:] if len(x) >= 6 and x[1].strip()[:1].isdigit()]
sm = [float(x[1].split()[0]) for x in r]; pw = [float(x[3].split()[0]) for x in r if x[3].strip()[:1].isdigit()]
print(f"nvidia-smi during the rows, {len(r)} samples at 0.5 s: SM clock {min(sm):.0f}-{max(sm):.0f} MHz, "
      f"power {min(pw):.0f}-{max(pw):.0f} W, utilization max {max(float(x[5].split()[0]) for x in r):.0f}%")
PY
    } >"$S"
    cat "$S"
}
trap fin EXIT

# 0. the bundle, the machine
[ -x "$dir/stage/sluice" ] || [ ! -f "$dir/bundle.tar.xz" ] || { mkdir -p "$dir/stage" && tar -xJf "$dir/bundle.tar.xz" -C "$dir/stage"; }
[ -d "$dir/llama" ] || [ ! -f "$dir/llama.tar.xz" ] || tar -xJf "$dir/llama.tar.xz" -C "$dir"
export LD_LIBRARY_PATH="$dir/stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sl=${SLUICE:-$dir/stage/sluice}
lg=${LLAMA_GPU_BIN:-$dir/llama/build/bin/llama-bench}
lc=${LLAMA_CPU_BIN:-$dir/llama/build-cpu/bin/llama-bench}
{
    echo "sluice: $("$sl" --version 2>&1 | head -1) ($(cat "$dir/t/VERSION" 2>/dev/null || git -C "$here" log -1 --format='%h %cI' 2>/dev/null)); llama.cpp: $(cat "$dir/py/VERSION" 2>/dev/null) $(cat "$dir/py/COMMIT" 2>/dev/null)"
    echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|avx512_fp16|amx_tile|amx_int8|amx_bf16' | tr '\n' ' ')"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -2
} >"$log/machine.txt" 2>&1

# 1. the builds, in the background, one after the other (the GPU rows need the first), in a process group of their own
cuda_build=0; [ -z "${LLAMA_GPU_BIN:-}" ] && [ ! -x "$lg" ] && [ "${BUILD_CUDA:-1}" = 1 ] && [ -d "$dir/llama" ] && [ -n "$GPU_CASES" ] && cuda_build=1
cpu_build=0; [ -z "${LLAMA_CPU_BIN:-}" ] && [ ! -x "$lc" ] && [ "${LLAMA_CPU:-native}" = native ] && [ -d "$dir/llama" ] && [ -n "$CPU_CASES$CPU_LONG" ] && cpu_build=1
if [ $cuda_build = 1 ] || [ $cpu_build = 1 ]; then
    common=(-G Ninja -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release)
    $(command -v setsid) bash -c '
        cd "$1" || exit 1
        cu=$2 cpu=$3 jobs=$4 log=$5; shift 5
        if [ "$cu" = 1 ]; then # tools/cuda_llama.sh run'"'"'s cmake line (its build dir: a later cuda_llama.sh resumes it)
            t=$(date +%s)
            { [ -f build/build.ninja ] || cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF \
                -DGGML_CUDA_NCCL=OFF "$@"; } >"$log/llama_cuda_build.log" 2>&1 &&
                nice -n 10 ninja -C build -j "$jobs" llama-bench >>"$log/llama_cuda_build.log" 2>&1
            echo "CUDA llama-bench build rc=$? in $(( $(date +%s) - t )) s" >"$log/cuda_build.done"
        fi
        if [ "$cpu" = 1 ]; then
            t=$(date +%s)
            { [ -f build-cpu/build.ninja ] || cmake -S . -B build-cpu -DGGML_CUDA=OFF -DGGML_NATIVE=ON "$@"; } \
                >"$log/llama_cpu_build.log" 2>&1 && nice -n 10 ninja -C build-cpu -j "$jobs" llama-bench >>"$log/llama_cpu_build.log" 2>&1
            echo "native CPU llama-bench build rc=$? in $(( $(date +%s) - t )) s" >"$log/cpu_build.done"
        fi
    ' _ "$dir/llama" "$cuda_build" "$cpu_build" "$JOBS" "$log" "${common[@]}" >/dev/null 2>&1 &
    bg+=("$!")
    step "builds started (nice 10, -j $JOBS): CUDA llama-bench $([ $cuda_build = 1 ] && echo yes || echo "no ($lg)"), native CPU llama-bench $([ $cpu_build = 1 ] && echo yes || echo "no ($lc)")"
fi

# 2. the GGUFs and packs (written once per machine: a warm call reuses them)
gguf() { # name layers
    local g=$w/$1.gguf p=$w/$1.sluice t
    if [ ! -s "$g" ]; then
        t=$(date +%s)
        PYTHONPATH="$dir/py${PYTHONPATH:+:$PYTHONPATH}" "$py" "$bench" write "$g.part" --layers "$2" --vocab 8192 >"$log/write.$1.log" 2>&1 &&
            mv "$g.part" "$g" || { step "write $1 failed: $(tail -3 "$log/write.$1.log" | tr '\n' ' ')"; return 1; }
        step "write $1.gguf: $2 layers, $(stat -c %s "$g") B, $(( $(date +%s) - t )) s"
    fi
    if [ ! -s "$p" ]; then
        t=$(date +%s)
        "$sl" pack "$g" -o "$w/$1.part.sluice" >"$log/pack.$1.log" 2>&1 && mv "$w/$1.part.sluice" "$p" ||
            { step "pack $1 failed: $(tail -3 "$log/pack.$1.log" | tr '\n' ' ')"; return 1; }
        step "pack $1.sluice: $(stat -c %s "$p") B, $(( $(date +%s) - t )) s"
    fi
}
ok1=1 ok2=1 # (empty CPU_CASES and CPU_LONG: no d1; empty GPU_CASES: no dL)
[ -n "$CPU_CASES$CPU_LONG" ] && { gguf d1 1 & g1=$!; }
[ -n "$GPU_CASES" ] && { gguf "d$GL" "$GL" & g2=$!; }
[ -n "${g1:-}" ] && { wait "$g1"; ok1=$?; }
[ -n "${g2:-}" ] && { wait "$g2"; ok2=$?; }
step "GGUFs and packs: d1 $([ -n "${g1:-}" ] && echo "rc=$ok1" || echo "not needed"), d$GL $([ -n "${g2:-}" ] && echo "rc=$ok2" || echo "not needed")"

# 3. the rows
if [ -n "${WAIT_FOR:-}" ]; then
    while [ ! -e "$WAIT_FOR" ] && [ "$(left)" -gt 20 ]; do sleep 1; done
    step "WAIT_FOR $WAIT_FOR: $([ -e "$WAIT_FOR" ] && echo met || echo "not met, going on")"
fi
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,pstate \
    --format=csv -lms 500 >"$log/smi.csv" 2>/dev/null &
bg_smi=$!
cases() { local a=() c; for c in $1; do a+=(--case "$c"); done; echo "${a[@]}"; }
gpu_round() { # round index
    [ $ok2 = 0 ] && [ -n "$GPU_CASES" ] || return 0
    if [ $cuda_build = 1 ]; then
        while [ ! -f "$log/cuda_build.done" ] && [ "$(left)" -gt 30 ]; do sleep 1; done
        [ -f "$log/cuda_build.done" ] && step "$(cat "$log/cuda_build.done")"; cuda_build=2
    fi
    [ -x "$lg" ] || { step "GPU round $1 skipped: no $lg"; return; }
    step "GPU round $1 ($GL layers)"
    # shellcheck disable=SC2046 # (the cases: words)
    "$py" "$bench" run "$w/d$GL.gguf" "$w/d$GL.sluice" $(cases "$GPU_CASES") --device gpu --warmup --threads 0 \
        --omp default --round0 "$1" --rounds 1 --label "gpu L$GL" --deadline "$DL" --llama-bench "$lg" --sluice "$sl" \
        --out "$J" >>"$log/tables.txt" 2>&1
}
cpu_bin() { # the CPU rows' llama-bench into cb and its tag into ct (cb empty: not yet, after the next GPU round);
    # $1 = wait: wait for the native build until 60 s are left, then take the CUDA build's (-dev none)
    cb='' ct=''
    if [ $cpu_build = 1 ]; then
        [ "${1:-}" = wait ] && while [ ! -f "$log/cpu_build.done" ] && [ "$(left)" -gt 60 ]; do sleep 1; done
        [ -f "$log/cpu_build.done" ] && { step "$(cat "$log/cpu_build.done")"; cpu_build=2; }
    fi
    if [ $cpu_build != 1 ] && [ -x "$lc" ]; then cb=$lc ct=native
    elif [ $cpu_build = 1 ] && [ "${1:-}" != wait ]; then return
    elif [ -x "$lg" ]; then cb=$lg ct="CUDA build, -dev none"; fi
}
cpu_round() { # round index, cases, wait (or empty); 1: deferred or no llama-bench
    [ $ok1 = 0 ] && [ -n "$2" ] || return 0
    cpu_bin "$3"
    [ -n "$cb" ] || { step "CPU round $1 deferred: $([ $cpu_build = 1 ] && echo "the native llama.cpp build is not done" || echo "no llama-bench")"; return 1; }
    step "CPU round $1 ($TH threads, llama.cpp $ct): $2"
    # shellcheck disable=SC2046 # (the cases: words)
    "$py" "$bench" run "$w/d1.gguf" "$w/d1.sluice" $(cases "$2") --device cpu --threads "$TH" --omp "${OMP:-active}" \
        --round0 "$1" --rounds 1 --label "cpu $TH threads L1, llama.cpp $ct" --deadline "$DL" --quadratic \
        --llama-bench "$cb" --sluice "$sl" --out "$J" >>"$log/tables.txt" 2>&1
}
pending() { # the CPU rounds due, in order; $1 = wait
    while [ ${#pend[@]} -gt 0 ] && [ "$(left)" -gt 5 ]; do
        cpu_round "${pend[0]}" "$CPU_CASES" "$1" || return
        pend=("${pend[@]:1}")
    done
}
R_G=${ROUNDS_GPU:-2}; R_C=${ROUNDS_CPU:-2}; pend=()
for r in $(seq 0 $(( (R_G > R_C ? R_G : R_C) - 1 ))); do
    [ "$(left)" -gt 5 ] || break
    [ "$r" -lt "$R_G" ] && gpu_round "$r"
    [ "$r" -lt "$R_C" ] && pend+=("$r")
    pending "$([ $((r + 1)) -lt "$R_G" ] || echo wait)"
done
pending wait
[ -n "$CPU_LONG" ] && [ "$(left)" -gt 5 ] && cpu_round "$R_C" "$CPU_LONG" wait
step "rows done"
[ "${CLEAN:-0}" = 1 ] && rm -rf "$w" && step "CLEAN=1: $w removed"
