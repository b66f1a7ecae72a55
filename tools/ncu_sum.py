#!/usr/bin/env python3
"""tools/ncu_sum.py FILE.csv[.xz] [STEPS LAYERS] [-seq]: an `ncu --csv --metrics gpu__time_duration.sum` log (tools/cuda_check_call.sh) summed per kernel name, per step and per step-layer; -seq prints the last 120 kernels in order."""
import csv, sys, lzma, io, collections
p = sys.argv[1]
raw = (lzma.open(p, 'rt') if p.endswith('.xz') else open(p)).read()
lines = [l for l in raw.splitlines() if l.startswith('"ID"') or (l.startswith('"') and l[1:2].isdigit())]
rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
tot = collections.defaultdict(float); cnt = collections.Counter(); grid = {}
seq = []
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    n = r["Kernel Name"].split("(")[0]
    v = float(r["Metric Value"].replace(",", ""))
    tot[n] += v; cnt[n] += 1; grid.setdefault(n, (r.get("Grid Size"), r.get("Block Size")))
    seq.append((n, v))
steps = float(sys.argv[2]) if len(sys.argv) > 2 else 1
layers = float(sys.argv[3]) if len(sys.argv) > 3 else 1
S = sum(tot.values())
print(f"kernels {len(seq)}  total {S/1e3:.1f} us  per step {S/1e3/steps:.1f} us  per step-layer {S/1e3/steps/layers:.2f} us")
for n, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{v/1e3:10.1f} us {cnt[n]:6d} x {v/cnt[n]/1e3:8.2f} us  {100*v/S:5.1f}%  {n} grid {grid[n][0]} block {grid[n][1]}")
if '-seq' in sys.argv:
    for n, v in seq[-120:]: print(f"{v/1e3:8.2f} {n}")
