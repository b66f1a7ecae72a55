#!/usr/bin/env bash
# The whole `make CUDA=1` sluice on the GPU machine, and issue 13 §3's tier tables (docs/CUDA.md). That
# machine's image lacks the Debian libraries sluice links and fio, so the work is split:
#   here:  tools/cuda_bench.sh prepare DIR   makes DIR/bundle.tar.xz (stripped, xz; ~24 MB: the carried
#          tree's 64 MiB includes the repo's ~40 MB) of: sluice, the CLI with the CUDA runtime linked
#          statically; lib/, every shared library it loads but glibc's (so `LD_LIBRARY_PATH=lib sluice`
#          starts on any glibc >= this one); sluice-sync, the same with tier.c built -DSL_TIER_SYNC (every
#          H2D copy waited for: the baseline of the copy stream); cuda_h2d (tools/cuda_h2d.c); fio, built
#          from Debian's source without its optional engines (the packaged one loads 80 MB of libraries);
#          mt/, tools/cuda_model_test.sh's fixture packs and driver.
#   there: tools/cuda_bench.sh run DIR SHAPE [SHAPE ...]   (results under $OUT, else DIR/out)
#          machine facts, the fixture model test, the H2D rate; then per shape: `sluice synth --quant q4` on
#          that machine's disk (DIR/stage/work; deleted after), fio O_DIRECT random reads of one expert block at
#          depths 1-64, `sluice bench --gpu --resident`, and `sluice bench --gpu --vram V` for V in VRAMS
#          (2G 4G 8G 16G) x RAM tier 0 (two layers' staging slots) and 16G; sluice-sync at SYNC_VRAMS.
#          SHAPE.all.json holds every row, summary.txt the tables, raw.tar.gz every log.
# run unpacks the bundle into DIR/stage (copy this script into DIR too while the GPU machine's checkout,
# main's, lacks the version you run).
# Environment: PROMPT (64), GEN (16), VRAMS, RAMS ("0 16G"), LAYERS (0: all), SYNC_VRAMS (4G: the VRAM budgets
# sluice-sync runs at; empty: none),
# MODEL_TEST (1), FIO_DEPTHS, FIO_S (3 s a depth), GPU_FLAG (--gpu; empty: a rehearsal of the script on the CPU).
# prepare: MODEL_TEST=0 leaves the model test's packs out, SYNC_BIN=0 sluice-sync (a bundle of ~8 MB, where
# other files must travel too: tools/cuda_llama.sh).
# A baseline in the same run: prepare with BASE_BIN=PATH (a CLI linked as prepare links sluice, e.g. from an
# older commit) bundles it as sluice-base; run with BASE_VRAMS ("": none) runs it --resident and at those
# VRAM budgets, its rows named sluice-base in the tables.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?prepare or run}
dir=${2:?a directory}
shift 2

top=$dir
dir=$top/stage # the files; carried to the GPU machine as $top/bundle.tar.xz (stripped, xz: ~16 MB)
if [ "$mode" = prepare ]; then
    cuda=${CUDA_HOME:-/usr/local/cuda}
    rm -rf "$dir" "$top/bundle.tar.xz"
    make -s -j2 CUDA=1 MPI=0 build/cuda/sluice # the link below names no MPI library (the GPU machine has none)
    mkdir -p "$dir/lib"
    libs="-lcjson -lxxhash -luring -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lcurl -lnettle -lm -pthread"
    cuda_libs="-L$cuda/lib64 -lcudart_static -ldl -lrt -lstdc++"
    cc -o "$dir/sluice" build/cuda/src/cli/*.o build/cuda/libsluice.a -Wl,--as-needed $libs $cuda_libs
    if [ "${SYNC_BIN:-1}" = 1 ]; then
        cc -Iinclude -Isrc -D_GNU_SOURCE -DSL_CUDA=1 -DSL_TIER_SYNC=1 -std=c11 -Wall -Wextra -Werror -O2 -pthread \
            -ffp-contract=off -c src/stream/tier.c -o "$dir/tier_sync.o"
        cc -o "$dir/sluice-sync" build/cuda/src/cli/*.o "$dir/tier_sync.o" build/cuda/libsluice.a -Wl,--as-needed \
            $libs $cuda_libs
        rm "$dir/tier_sync.o"
    fi
    if [ -n "${BASE_BIN:-}" ]; then cp "$BASE_BIN" "$dir/sluice-base" && strip "$dir/sluice-base"; fi
    cc -O2 -std=c11 -D_GNU_SOURCE -I"$cuda/include" tools/cuda_h2d.c -o "$dir/cuda_h2d" $cuda_libs -pthread
    # fio from Debian's source (apt-get source through a private list: the image's sources have no deb-src)
    fio=build/fio/fio
    if [ ! -x "$fio" ]; then
        t=$(mktemp -d)
        echo "deb-src http://deb.debian.org/debian bookworm main" >"$t/src.list"
        mkdir -p "$t/lists/partial" build/fio
        o="-o Dir::Etc::SourceList=$t/src.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$t/lists"
        apt-get $o update >/dev/null
        (cd "$t" && apt-get $o source --download-only fio >/dev/null 2>&1 && tar xzf fio_*.orig.tar.gz)
        (cd "$t"/fio-*/ && ./configure --disable-native --disable-rdma --disable-gfapi --disable-pmem --disable-numa \
            --disable-rados --disable-rbd --disable-http --disable-xnvme --disable-libzbc --disable-dfs \
            --disable-libnfs >/dev/null && make -s -j2 fio >/dev/null)
        cp "$t"/fio-*/fio "$fio"
        rm -rf "$t"
    fi
    cp "$fio" "$dir/fio"
    for b in "$dir/sluice" "$dir/fio"; do
        ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
            grep -vE '/(libc|libm|libmvec|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' |
            while read -r l; do cp -L "$l" "$dir/lib/"; done
    done
    # the check that can be made here: every library the binaries load resolves from DIR/lib or glibc
    for b in "$dir/sluice" "$dir/fio" "$dir/cuda_h2d" $([ "${SYNC_BIN:-1}" = 1 ] && echo "$dir/sluice-sync"); do
        LD_LIBRARY_PATH="$dir/lib" ldd "$b" | awk -v d="$dir/lib/" '$2 == "=>" && index($3, d) != 1 {print $1}' |
            grep -vE '^(libc|libm|libmvec|libdl|libpthread|librt|libresolv)\.so' && { echo "$b: loads a library outside $dir/lib"; exit 1; }
        if ldd "$b" | grep -q "not found"; then echo "$b: a library is missing"; exit 1; fi
    done
    LD_LIBRARY_PATH="$dir/lib" "$dir/sluice" --version >/dev/null
    [ "${MODEL_TEST:-1}" = 1 ] && tools/cuda_model_test.sh prepare "$dir/mt" >/dev/null
    strip "$dir"/sluice* "$dir/fio" "$dir/cuda_h2d" $([ -d "$dir/mt" ] && echo "$dir/mt/test_model")
    tar -cJf "$top/bundle.tar.xz" -C "$dir" .
    rm -rf "$dir"
    ls -la "$top/bundle.tar.xz"
    exit 0
fi

[ "$mode" = run ] || { echo "usage: tools/cuda_bench.sh prepare|run DIR [SHAPE ...]" >&2; exit 2; }
[ -x "$dir/sluice" ] || { mkdir -p "$dir" && tar -xJf "$top/bundle.tar.xz" -C "$dir"; }
out=${OUT:-$dir/out} # at most 8 files come back: summary.txt, SHAPE.all.json, raw.tar.gz (every log and row)
raw="$dir/raw"
mkdir -p "$out" "$dir/work" "$raw"
trap 'tar czf "$out/raw.tar.gz" -C "$dir" raw' EXIT
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
prompt=${PROMPT:-64}; gen=${GEN:-16}; layers=${LAYERS:-0}
read -r -a vrams <<<"${VRAMS:-2G 4G 8G 16G}"
read -r -a rams <<<"${RAMS:-0 16G}"
{
    echo "date: $(date -u +%FT%TZ)"; uname -r; nproc
    grep -m1 "model name" /proc/cpuinfo || true
    grep -E "MemTotal" /proc/meminfo || true
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current \
        --format=csv,noheader || true
    df -h "$dir/work" | tail -1
    findmnt -no SOURCE,FSTYPE,OPTIONS --target "$dir/work" || true
    lsblk -d -o NAME,SIZE,ROTA,MODEL 2>/dev/null || true
} >"$raw/machine.txt" 2>&1
cat "$raw/machine.txt"
if [ -d "$dir/mt" ] && [ "${MODEL_TEST:-1}" = 1 ]; then
    t0=$(date +%s)
    tools/cuda_model_test.sh run "$dir/mt" >"$raw/model_test.log" 2>&1 && echo "model test: passed" ||
        echo "model test: FAILED (exit $?)"
    tail -2 "$raw/model_test.log"; echo "model test: $(( $(date +%s) - t0 )) s"
fi
for shape in "$@"; do
    model="$dir/work/$shape.sluice"
    t0=$(date +%s)
    "$dir/sluice" synth --shape "$shape" --quant q4 --layers "$layers" -o "$model" 2>"$raw/$shape.synth.log"
    tail -1 "$raw/$shape.synth.log"
    stride=$("$dir/sluice" info "$model" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["experts"]["stride"])')
    read -r off len < <(python3 - "$model" <<'PY'
import struct, sys
with open(sys.argv[1], 'rb') as f:
    h = f.read(128)
print(struct.unpack_from('<Q', h, 64)[0], struct.unpack_from('<Q', h, 72)[0])
PY
)
    "$dir/cuda_h2d" "$stride" >"$raw/$shape.h2d.json" || echo '{}' >"$raw/$shape.h2d.json"
    : >"$raw/$shape.fio.txt"
    for qd in ${FIO_DEPTHS:-1 2 4 8 16 32 64}; do
        "$dir/fio" --name=experts --filename="$model" --readonly --rw=randread --direct=1 --ioengine=io_uring \
            --bs="$stride" --offset="$off" --size="$len" --iodepth=$qd --runtime="${FIO_S:-3}" --time_based --norandommap \
            --randrepeat=0 --output-format=json 2>/dev/null |
            python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]["read"]; print(sys.argv[1], j["bw_bytes"])' "$qd" \
            >>"$raw/$shape.fio.txt"
    done
    common=(-m "$model" --prompt "$prompt" --gen "$gen" --json --routing uniform --io direct ${GPU_FLAG---gpu})
    "$dir/sluice" bench "${common[@]}" --resident >"$raw/$shape.resident.json" 2>>"$raw/$shape.err" ||
        echo "resident bench failed: $(tail -1 "$raw/$shape.err")"
    ram0=$(( 2 * $("$dir/sluice" info "$model" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["n_experts_used"])') * stride ))
    bins=(sluice); [ -n "${SYNC_VRAMS-4G}" ] && bins+=(sluice-sync)
    if [ -n "${BASE_VRAMS:-}" ] && [ -x "$dir/sluice-base" ]; then # first, beside the resident rows
        bins=(sluice-base "${bins[@]}")
        "$dir/sluice-base" bench "${common[@]}" --resident >"$raw/$shape.sluice-base.resident.json" 2>>"$raw/$shape.err" ||
            echo "sluice-base resident bench failed: $(tail -1 "$raw/$shape.err")"
    fi
    for b in "${bins[@]}"; do
        vs=("${vrams[@]}"); [ "$b" = sluice-sync ] && read -r -a vs <<<"${SYNC_VRAMS-4G}"
        [ "$b" = sluice-base ] && read -r -a vs <<<"$BASE_VRAMS"
        for v in "${vs[@]}"; do
            args=()
            for r in "${rams[@]}"; do [ "$r" = 0 ] && args+=(--cache "$ram0") || args+=(--cache "$r"); done
            "$dir/$b" bench "${common[@]}" --vram "$v" "${args[@]}" >"$raw/$shape.$b.$v.json" 2>>"$raw/$shape.err" ||
                echo "$b --vram $v failed: $(tail -1 "$raw/$shape.err")"
        done
    done
    rm -f "$model"
    python3 - "$raw" "$shape" "$stride" "$out" <<'PY' | tee -a "$out/summary.txt"
import glob, json, math, os, sys
out, shape, stride, dest = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
fio = [tuple(map(float, l.split())) for l in open(f"{out}/{shape}.fio.txt") if l.strip()]
disk = max(b for _, b in fio)
best_qd = int(max(fio, key=lambda x: x[1])[0])
h2d = json.load(open(f"{out}/{shape}.h2d.json"))
h2d_bw = min(h2d.get("h2d_bytes_s", 1e30), h2d.get("h2d_block_bytes_s", 1e30)) # none: a rehearsal without a GPU
rows = []
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return []
for r in load(f"{out}/{shape}.resident.json"):
    rows.append(dict(bin="sluice", vram="resident", **r))
for p in sorted(glob.glob(f"{out}/{shape}.sluice*.json")):
    b, v = os.path.basename(p)[len(shape) + 1:-5].rsplit(".", 1)
    for r in load(p):
        rows.append(dict(bin=b, vram=v, **r))
print(f"## {shape} q4: expert block {stride} B; fio O_DIRECT randread best {disk / 1e9:.2f} GB/s (depth {best_qd}; "
      + ", ".join(f"{int(q)}: {b / 1e9:.2f}" for q, b in fio) + f"); H2D pinned {h2d.get('h2d_bytes_s', 0) / 1e9:.1f} GB/s "
      f"(256 MiB), {h2d.get('h2d_block_bytes_s', 0) / 1e9:.1f} GB/s (block copies)")
# the columns of docs/CUDA.md's tables: fraction against fio's best depth and against depth 8 (one layer's
# reads in flight), decode against --resident's
res = [r["decode_tok_s"] for r in rows if r["vram"] == "resident"]
d8 = dict((int(q), b) for q, b in fio).get(8, disk)
# and against fio at the depth nearest (log scale) the one sluice's reads had in flight (bench's queue_depth)
def fio_at(qd):
    if not qd or qd <= 0:
        return None, None
    q, b = min(fio, key=lambda x: abs(math.log2(x[0]) - math.log2(max(qd, 1))))
    return int(q), b
print("| build | VRAM | RAM | prefill tok/s | decode tok/s | VRAM hit | RAM hit | disk MB/tok | H2D MB/tok | disk busy "
      "| bound tok/s | fraction | at depth 8 | depth | fio there GB/s | at its depth | ÷ resident |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    disk_b, h2d_b = r["bytes_per_token"], r.get("vram_copied_bytes_per_token", 0)
    t, t8 = max(disk_b / disk, h2d_b / h2d_bw), max(disk_b / d8, h2d_b / h2d_bw)
    qd_f, bw_qd = fio_at(r.get("queue_depth"))
    tq = max(disk_b / bw_qd, h2d_b / h2d_bw) if bw_qd else 0
    r.update(fio_depth_near=qd_f, fio_bw_near=bw_qd, fraction_own_depth=r["decode_tok_s"] * tq if tq > 0 else None)
    bound = 1 / t if t > 0 else float("inf")
    r.update(disk_bw=disk, disk_depth=best_qd, h2d_bw=h2d_bw, bound_tok_s=bound,
             fraction=r["decode_tok_s"] * t if t > 0 else None, fraction_depth8=r["decode_tok_s"] * t8 if t8 > 0 else None)
    ram = "resident" if r["vram"] == "resident" else f"{r['cache_bytes'] / 2**20:.0f}M"
    f = lambda x: "-" if x is None else f"{x:.2f}"
    busy = r.get("disk_busy_fraction")
    print(f"| {r['bin']} | {r['vram']} | {ram} | {r['prefill_tok_s']:.1f} | {r['decode_tok_s']:.2f} | "
          f"{100 * r.get('vram_hit_rate', 0):.1f}% | {100 * r['hit_rate']:.1f}% | {disk_b / 1e6:.0f} | {h2d_b / 1e6:.0f} | "
          f"{'-' if busy is None else f'{100 * busy:.0f}%'} | {bound:.2f} | {f(r['fraction'])} | {f(r['fraction_depth8'])} | "
          f"{f(r.get('queue_depth'))} | {'-' if bw_qd is None else f'{bw_qd / 1e9:.2f} ({qd_f})'} | "
          f"{f(r['fraction_own_depth'])} | {f(r['decode_tok_s'] / res[0] if res else None)} |")
for r in rows:
    r.pop("layers", None)
json.dump({"shape": shape, "stride": stride, "fio": fio, "h2d": h2d, "rows": rows}, open(f"{dest}/{shape}.all.json", "w"), indent=1)
PY
    echo "$shape: $(( $(date +%s) - t0 )) s"
done
