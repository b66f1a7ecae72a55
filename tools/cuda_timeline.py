#!/usr/bin/env python3
"""tools/cuda_timeline.py: read a timeline written by tools/cuda_timeline.c (CUDA_INJECTION64_PATH=libsltl.so) and say
where a decode step's time goes: per step the wall span, the kernels' busy time (their union), the idle gaps, the
number of launches, how far the host's launch calls ran ahead of the GPU, and per kernel name the time a step.

    python3 tools/cuda_timeline.py FILE [--steps N] [--top K]

Steps are cut at the largest device-to-host copies (the logits' copy ends a step); the last N steps are summed (default 8),
the first ones being the prompt and warm-up. A kernel's "lead" is its start minus the end of the API call that
launched it: near zero (a few us) means the GPU had nothing queued and waited for the host (host-bound); large
means the host ran ahead (GPU-bound)."""
import argparse
import collections
import re
import sys


def load(path):
    ks, copies, api = [], [], {}
    for line in open(path, errors="replace"):
        f = line.split(" ", 7)
        if not f or f[0] not in "KMSRD" or len(f) < 4:
            continue
        if f[0] == "K" and len(f) >= 8:
            ks.append((int(f[1]), int(f[2]), int(f[3]), int(f[4]), f[5], f[6], f[7].strip()))
        elif f[0] in "MS" and len(f) >= 6:
            copies.append((int(f[1]), int(f[2]), f[0], int(f[5]), int(f[6]) if len(f) > 6 else 0))
        elif f[0] in "RD" and len(f) >= 5:
            api[int(f[4])] = (int(f[1]), int(f[2]), f[0], int(f[3]))
    ks.sort()
    copies.sort()
    return ks, copies, api


_dm = {}


def demangle(names):
    # c++filt where the machine has it (binutils), else the mangled names' own identifiers
    import shutil
    import subprocess
    names = sorted(set(names))
    if shutil.which("c++filt"):
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        out = r.stdout.split("\n")
        if r.returncode == 0 and len(out) >= len(names):
            _dm.update(zip(names, out))


def short(name, n=70):
    s = _dm.get(name, name)
    if s.startswith("_Z"):
        m = re.match(r"_Z(?:N\d*)?(\d+)", s)
        if m:
            i = m.end()
            s = s[i:i + int(m.group(1))] + s[i + int(m.group(1)):][:12]
    else:
        s = re.sub(r"\(.*\)$", "", s)
        s = re.sub(r"^void ", "", s)
    return s[:n]


def union(iv):
    busy, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    ks, copies, api = load(a.file)
    if not ks:
        sys.exit("no kernel records in " + a.file)
    d2h = [c for c in copies if c[2] == "M" and c[4] == 2]  # CUPTI_ACTIVITY_MEMCPY_KIND_DTOH = 2
    big = max((c[3] for c in d2h), default=0)
    d2h = [c for c in d2h if c[3] * 2 >= big]  # the logits' copies (a step's smaller reads do not cut it)
    cuts = [c[1] for c in d2h]
    steps, j = [], 0
    prev = ks[0][0] - 1
    for cut in cuts:
        cur = [k for k in ks[j:] if k[0] < cut]
        j += len(cur)
        if cur:
            steps.append((prev, cut, cur))
        prev = cut
    if not steps:
        steps = [(ks[0][0], ks[-1][1], ks)]
    sel = steps[-a.steps:] if len(steps) > a.steps else steps
    print("%s: %d kernels, %d copies, %d API calls, %d steps (cut at device-to-host copies); the last %d:"
          % (a.file, len(ks), len(copies), len(api), len(steps), len(sel)))
    demangle(k[6] for k in ks)
    tot = collections.defaultdict(lambda: [0, 0])
    leads = []
    print("step  wall_us  kernels_busy_us  idle_us  launches  from_last_copy_us")
    for i, (t0, t1, cur) in enumerate(sel):
        first, last = cur[0][0], max(k[1] for k in cur)
        busy = union([(k[0], k[1]) for k in cur])
        print("%4d %8.1f %16.1f %8.1f %9d %18.1f" % (i, (last - first) / 1e3, busy / 1e3, (last - first - busy) / 1e3,
                                                    len(cur), (first - t0) / 1e3))
        for k in cur:
            t = tot[short(k[6])]
            t[0] += 1
            t[1] += k[1] - k[0]
            if k[3] in api:
                leads.append((k[0] - api[k[3]][1]) / 1e3)
    n = len(sel)
    print("\nper step (mean of %d): kernel, launches, us, us a launch" % n)
    for name, (c, t) in sorted(tot.items(), key=lambda x: -x[1][1])[:a.top]:
        print("  %-60s %6.1f %9.1f %8.2f" % (name, c / n, t / n / 1e3, t / c / 1e3))
    if leads:
        leads.sort()
        q = lambda p: leads[min(len(leads) - 1, int(p * len(leads)))]
        print("\nlead (kernel start - its launch call's end), us: p10 %.1f p50 %.1f p90 %.1f; under 5 us: %.0f%%"
              % (q(0.1), q(0.5), q(0.9), 100.0 * sum(1 for x in leads if x < 5) / len(leads)))
    rt = collections.defaultdict(lambda: [0, 0])
    lo, hi = sel[0][2][0][0], sel[-1][1]
    for s, e, kind, cbid in api.values():
        if lo <= s <= hi:
            r = rt[(kind, cbid)]
            r[0] += 1
            r[1] += e - s
    if rt:
        print("\nAPI calls in those steps (kind, cbid: calls a step, us a step; cupti_runtime_cbid.h / cupti_driver_cbid.h)")
        for (kind, cbid), (c, t) in sorted(rt.items(), key=lambda x: -x[1][1])[:12]:
            print("  %s %4d %8.1f %9.1f" % (kind, cbid, c / n, t / n / 1e3))


if __name__ == "__main__":
    main()
