#!/usr/bin/env bash
# Streaming benchmark on one model, in one run: fio random O_DIRECT reads of expert-sized blocks over
# the model's expert section (queue depth 1 and 16), then `sluice bench` at several cache sizes for
# each policy. Usage:
#   tools/bench_stream.sh MODEL.sluice [CACHE ...]      (default caches: 1G 2G 4G)
# Make a model much larger than the cache first, e.g.
#   build/sluice synth --shape qwen3-next-80b-a3b --layers 8 -o /big/next80b-8L.sluice   # 26 GB
set -euo pipefail
model=$1; shift
caches=("$@"); [ ${#caches[@]} -gt 0 ] || caches=(1G 2G 4G)
bin=${SLUICE:-build/sluice}
gen=${GEN:-24}
prompt=${PROMPT:-8}
info=$("$bin" info "$model" --json)
get() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" <<<"$info"; }
stride=$(get 'd["experts"]["stride"]')
eoff=$(python3 - "$model" <<'PY'
import struct, sys
with open(sys.argv[1], 'rb') as f:
    h = f.read(128)
print(struct.unpack_from('<Q', h, 64)[0], struct.unpack_from('<Q', h, 72)[0])
PY
)
off=${eoff% *}; len=${eoff#* }
echo "model: $model  expert section ${len} bytes at ${off}, block (stride) ${stride} bytes"
if command -v fio >/dev/null; then
    for qd in 1 16; do
        bw=$(fio --name=experts --filename="$model" --rw=randread --direct=1 --ioengine=io_uring --bs="$stride" \
                 --offset="$off" --size="$len" --iodepth=$qd --runtime=15 --time_based --output-format=json 2>/dev/null |
             python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print("%.0f MiB/s, %.1f blocks/s" % (j["bw_bytes"]/1048576, j["iops"]))')
        echo "fio randread O_DIRECT bs=${stride} qd=${qd}: $bw"
    done
else
    echo "fio not installed (apt-get install fio): skipping the raw-device reference"
fi
for pol in lru lfu; do
    args=()
    for c in "${caches[@]}"; do args+=(--cache "$c"); done
    "$bin" bench -m "$model" --prompt "$prompt" --gen "$gen" --policy "$pol" --io direct "${args[@]}"
done
