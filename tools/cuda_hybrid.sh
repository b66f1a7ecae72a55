#!/usr/bin/env bash
# tools/cuda_hybrid.sh: the hybrid step's device run (issue 25; docs/CUDA.md "The hybrid step"), about 4 minutes.
#   here:  MPI=0 tools/cuda_hybrid.sh prepare DIR [OLD_BUNDLE]   makes DIR/bundle.tar.xz (xz, ~12 MB) of sluice (this
#          tree's CLI, the CUDA runtime linked statically, as tools/cuda_bench.sh prepare links it), lib/ (every shared
#          library it loads but glibc's), test_cuda and test_model (tests/cuda, as tools/cuda_model_test.sh builds
#          them), bench_serve (tools/bench_serve.c), VERSION (git describe), and sluice-old: OLD_BUNDLE's sluice (a bundle of this script's or of the
#          first hybrid run, build/dev/hybrid/bundle.tar.xz), the build before these changes; DIR/run.sh is this script.
#          Build it from a committed tree (VERSION names the commit; a dirty tree is refused).
#   there: bash DIR/run.sh   from a checkout's root (tests/data: the fixture packs; models/demo/heldout.rtrace: the
#          routing trace); results in $OUT/hybrid26/summary.txt and logs.tar.gz.
# What it runs: (a) exactness: test_cuda (check_hybrid: host experts bitwise the device's) and test_model (every
# fixture's f32 and q4 pack decoded through a small tier with the hybrid step, bitwise all-resident); (b) the 30B
# shape (sluice synth, q4, 8 layers) --gpu --cache 24G --prompt 512 --gen 32 at --vram 320M and 2G, routing uniform,
# model and trace (the demo model's held-out routing, 32 experts mapped onto 128), each with sluice-old --hybrid on
# (the first hybrid step), sluice --hybrid off (every miss copied up: the baseline) and sluice --hybrid on,
# alternated, two rounds while time is left (STOP_AT, 200 s). Per run: decode and prefill tok/s, VRAM hit rate,
# host share, H2D bytes a token.
set -uo pipefail
mode=${1:-run}
if [ "$mode" = prepare ]; then
    set -e
    cd "$(dirname "$0")/.."
    dir=${2:?a directory}
    old=${3:-}
    [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "commit first: the bundle names a commit"; exit 1; }
    cuda=${CUDA_HOME:-/usr/local/cuda}
    rm -rf "$dir/stage" && mkdir -p "$dir/stage/lib"
    st=$dir/stage
    MPI=0 make -s -j2 CUDA=1 build/cuda/libsluice.a build/cuda/sluice build/cuda/tools/bench_serve.o
    libs="-lcjson -lxxhash -luring -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lcurl -lnettle -lm -pthread"
    cuda_libs="-L$cuda/lib64 -lcudart_static -ldl -lrt -lstdc++"
    cc -o "$st/sluice" build/cuda/src/cli/*.o build/cuda/libsluice.a -Wl,--as-needed $libs $cuda_libs
    cc -o "$st/bench_serve" build/cuda/tools/bench_serve.o build/cuda/libsluice.a -Wl,--as-needed $libs $cuda_libs
    for t in test_model test_cuda; do
        cc -Iinclude -Isrc -D_GNU_SOURCE -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -O2 "tests/cuda/$t.c" \
            build/cuda/libsluice.a -Wl,--as-needed -lcjson -lxxhash -luring -lm -pthread $cuda_libs -o "$st/$t"
    done
    [ -n "$old" ] && tar -xJf "$old" -C "$st" ./sluice --transform 's,^\./sluice$,./sluice-old,'
    ldd "$st/sluice" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
        grep -vE '/(libc|libm|libmvec|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' |
        while read -r l; do cp -L "$l" "$st/lib/"; done
    LD_LIBRARY_PATH="$st/lib" "$st/sluice" --version >/dev/null
    git describe --always --dirty >"$st/VERSION"
    strip "$st"/sluice "$st"/test_model "$st"/test_cuda "$st"/bench_serve
    # one dictionary over the whole tar: the binaries' CUDA kernels are the same bytes (24 -> 11.5 MB with four binaries)
    tar -cf - -C "$st" . | xz -9 -T2 --lzma2=preset=9e,dict=192MiB >"$dir/bundle.tar.xz"
    rm -rf "$st"
    cp "$0" "$dir/run.sh"
    ls -la "$dir/bundle.tar.xz"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
o="${OUT:-/tmp/hybrid26_out}/hybrid26"; mkdir -p "$o"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$o/summary.txt
w=/tmp/hy26; rm -rf "$w"; mkdir -p "$w/mt" "$w/logs"; log=$w/logs
trap 'tar czf "$o/logs.tar.gz" -C "$w" logs; rm -f "$w/q30.sluice"; echo "=== summary"; cat "$S"' EXIT
tar -xJf "$here/bundle.tar.xz" -C "$w"
export LD_LIBRARY_PATH=$w/lib
sl=$w/sluice
{ echo "hybrid26 run: $(date -u +%FT%TZ) build $(cat "$w/VERSION")$([ -x "$w/sluice-old" ] && echo ", sluice-old: the first hybrid step")"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
  echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(grep MemTotal /proc/meminfo | tr -s ' ')"; } >"$S" 2>&1
timeout 100 "$w/test_cuda" >"$log/test_cuda.log" 2>&1; rc=$?
echo "test_cuda rc=$rc: $(tail -1 "$log/test_cuda.log") [$(el) s]" >>"$S"
grep -E "^FAIL|hybrid" "$log/test_cuda.log" | head -20 >>"$S"
names=$(tools/cuda_pack_fixtures.sh "$sl" "$w/mt" "$log/pack.log")
timeout 100 "$w/test_model" "$w/mt" $names >"$log/model_test.log" 2>&1; rc=$?
echo "model_test rc=$rc: $(tail -1 "$log/model_test.log") [$(el) s]" >>"$S"
grep -E "hybrid|FAIL|DIFFERS" "$log/model_test.log" | head -30 >>"$S"
rm -rf "$w/mt"
m=$w/q30.sluice
"$sl" synth --shape qwen3-30b-a3b --quant q4 --layers 8 -o "$m" >"$log/synth.log" 2>&1 || echo "synth failed" >>"$S"
echo "synth: $(tail -1 "$log/synth.log") [$(el) s]" >>"$S"
trace=$PWD/models/demo/heldout.rtrace
echo "bench: 30B shape q4 8 layers, --gpu --cache 24G --prompt 512 --gen 32 (prefill / decode tok/s, VRAM hit, host share)" >>"$S"
for round in 1 2; do
  for v in 2G 320M; do
    for r in uniform model trace; do
      for b in old-on new-off new-on; do
        [ "$(el)" -gt "${STOP_AT:-200}" ] && { echo "stopped at $(el) s (round $round)" >>"$S"; exit 0; }
        bin=$w/sluice; [ $b = old-on ] && bin=$w/sluice-old
        [ -x "$bin" ] || continue
        [ $r = trace ] && [ $b = old-on ] && continue # (the first hybrid step has no traces)
        rt=$r; [ $r = trace ] && rt=trace:$trace
        j=$log/bench.$round.$v.$r.$b.json
        timeout 40 "$bin" bench --hybrid "${b#*-}" -m "$m" --gpu --vram "$v" --cache 24G --prompt 512 --gen 32 \
            --routing "$rt" --json >"$j" 2>"$j.err"; rc=$?
        python3 - "$j" "$b" "$v" "$r" "$round" "$rc" "$(el)" >>"$S" <<'PY'
import json, sys
p, b, v, r, rd, rc, t = sys.argv[1:]
try:
    x = json.load(open(p))[0]
    print(f"round {rd} vram {v:>4} {r:7} {b:7}: prefill {x['prefill_tok_s']:8.1f} decode {x['decode_tok_s']:7.2f} "
          f"vram hit {100 * x.get('vram_hit_rate', 0):5.1f}% host {100 * x.get('hybrid_host_fraction', 0):5.1f}% "
          f"H2D MB/tok {x.get('vram_copied_bytes_per_token', 0) / 1e6:6.1f} [{t} s]")
except Exception as e:
    print(f"round {rd} vram {v} {r} {b}: rc {rc}, no result ({e}) [{t} s]")
PY
      done
    done
  done
done
