#!/usr/bin/env python3
"""Plots the CSV that build/locality writes (make locality) as docs/locality.png.

Left: expert-cache hit rate against cache size (the slot fraction of the expert section) for lru, lfu and
lru + pin on the demo model's real routing, with the uniform-routing baseline (hit rate = slot fraction)
and Belady's offline optimum (the bound for any policy). Right: expert bytes read per token, the same
runs plus next-layer prefetch forced on.

Usage: build/venv/bin/python tools/plot_locality.py [CSV] [PNG]   (defaults: build/locality.csv, docs/locality.png)
Needs matplotlib (build/venv/bin/pip install matplotlib).
"""
import csv
import io
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402  (a matplotlib dependency)

SERIES = [  # csv policy, label, style
    ("optimum", "offline optimum (Belady)", dict(color="0.45", ls=":", marker="")),
    ("pin", "lru + pin (profile of training text)", dict(color="tab:green", marker="^")),
    ("lfu", "lfu", dict(color="tab:orange", marker="s")),
    ("lru", "lru", dict(color="tab:blue", marker="o")),
    ("uniform", "uniform routing (= slot fraction)", dict(color="0.6", ls="--", marker="")),
]


def load(path):
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.setdefault(r["policy"], []).append(r)
    for v in rows.values():
        v.sort(key=lambda r: float(r["slot_fraction"]))
    return rows


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "build/locality.csv"
    out = sys.argv[2] if len(sys.argv) > 2 else "docs/locality.png"
    rows = load(src)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=100)
    for key, label, style in SERIES:
        if key not in rows:
            continue
        x = [100 * float(r["slot_fraction"]) for r in rows[key]]
        ax1.plot(x, [100 * float(r["hit_rate"]) for r in rows[key]], label=label, lw=1.6, ms=4, **style)
        if key in ("optimum",):
            continue
        if key == "uniform":  # bytes a uniform router would read: requests/token x block x (1 - fraction)
            ref = rows["lru"]
            y = [float(r["bytes_per_token"]) / (1 - float(r["hit_rate"])) * (1 - float(r["slot_fraction"]))
                 if float(r["hit_rate"]) < 1 else 0 for r in ref]
        else:
            y = [float(r["bytes_per_token"]) for r in rows[key]]
        ax2.plot(x, [v / 1048576 for v in y], label=label.split(" (")[0], lw=1.6, ms=4, **style)
    if "prefetch_on" in rows:
        x = [100 * float(r["slot_fraction"]) for r in rows["prefetch_on"]]
        ax2.plot(x, [float(r["bytes_per_token"]) / 1048576 for r in rows["prefetch_on"]], color="tab:red", marker="x",
                 ls="-.", lw=1.4, label="lru + prefetch on")
    ax1.set(xlabel="expert cache, % of the expert section", ylabel="hit rate, %", xlim=(0, 52), ylim=(0, 100),
            title="Expert-cache hit rate, held-out text")
    ax2.set(xlabel="expert cache, % of the expert section", ylabel="MiB of experts read per token", xlim=(0, 52),
            ylim=(0, None), title="Expert bytes read per token")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="upper left")
    ax2.legend(fontsize=8, loc="lower left")
    fig.suptitle("models/demo.sluice (6 layers x 32 experts, top-4): routing locality in teacher-forced decode",
                 fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    # a 128-colour palette keeps the file small (line art: nothing visible is lost)
    Image.open(buf).convert("RGB").quantize(128).save(out, optimize=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
