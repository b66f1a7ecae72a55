#!/usr/bin/env python3
"""tools/scale_model.py — the paper model of docs/SCALE.md: tok/s of a model whose experts are spread over
expert ranks (issue 31: `mpirun -np N sluice ...`) against the network's bandwidth and latency, decode and
batched, beside one machine streaming its experts from an SSD. Prints the markdown tables SCALE.md holds.

One step evaluates B tokens (one per sequence), and per MoE layer rank 0 waits for the ranks (sluice's exchange
is one request out per rank, one reply back, then the combine), so a step's time is the sum, layer by layer, of:
  - rank 0's backbone (attention, dense layers, shared experts, router, LM head): its weights read once per step
    (bytes / memory bandwidth) or, for a big batch, its FLOPs (B tokens x 2 x active backbone parameters / CPU
    throughput), whichever is longer;
  - the experts on the ranks, in parallel: the experts the B tokens choose in a layer (uniform routing: U(B) =
    E (1 - (1 - k/E)^B) distinct ones, split evenly over R ranks) read once each, or their FLOPs, whichever is
    longer (per rank);
  - the network on rank 0's link: requests (each token's row, f32 H floats, once per rank that owns one of its
    experts: R (1 - (1 - 1/R)^k) ranks) and replies (k rows of H f32 per token: sluice sends every (token, expert)
    output so that rank 0 adds them in one process's order, bitwise) over a full-duplex link, the larger
    direction counts; plus one round trip per layer.
One machine streaming: the same backbone; the experts from RAM where its cache holds them (uniform routing: hit
rate = the cached fraction) and from the SSD otherwise. Attention's own cost over the context is left out (it is
rank 0's in both set-ups). The machine figures are assumptions, named in ASSUME below; change them and rerun.
"""
import sys

ASSUME = {
    "mem_bw": 40e9,    # bytes/s a machine's cores stream q4 weights through its matmuls (DDR5, 8-12 channels: more)
    "cpu_ops": 2e12,   # int8 multiply-adds x 2 per second a machine sustains (AVX-512 VNNI, 32 cores, effective)
    "ram": 256e9,      # bytes of RAM per machine
    "ssd_bw": 6e9,     # bytes/s one PCIe 4 NVMe gives O_DIRECT reads of whole expert blocks
    "q4_bytes": 0.5625,  # bytes per parameter of sluice's q4 (4 bits + bf16 scale and bias per 64)
    "gpu_bw": 2e12,    # rank 0 with a GPU for the backbone (the second table): HBM bytes/s ...
    "gpu_ops": 2e14,   # ... and int8 ops/s it sustains
}

# name: hidden, MoE layers, experts, chosen per token, expert intermediate, total params, active params
SHAPES = {
    "DeepSeek-V3 (671B)": (7168, 58, 256, 8, 2048, 671e9, 37e9),
    "Kimi-K2 (1T)": (7168, 60, 384, 8, 2048, 1026e9, 32.9e9),
}

LINKS = {  # effective bytes/s of TCP over the link, round trip of one exchange (MPI over TCP, one hop)
    "10 GbE": (1.15e9, 60e-6),
    "25 GbE": (2.9e9, 40e-6),
    "100 GbE": (11.5e9, 25e-6),
}


def shape_parts(sh):
    H, L, E, k, I, total, active = sh
    expert_params = 3 * H * I
    routed = L * E * expert_params
    backbone_total = total - routed
    backbone_active = active - L * k * expert_params
    return H, L, E, k, expert_params, routed, backbone_total, backbone_active


def backbone_s(sh, B, a=ASSUME, gpu=False):
    *_, bb_active = shape_parts(sh)
    bw, ops = (a["gpu_bw"], a["gpu_ops"]) if gpu else (a["mem_bw"], a["cpu_ops"])
    return max(bb_active * a["q4_bytes"] / bw, B * 2 * bb_active / ops)


def experts_s(sh, B, R, a=ASSUME):
    H, L, E, k, ep, *_ = shape_parts(sh)
    U = E * (1 - (1 - k / E) ** B)
    read = L * U * ep * a["q4_bytes"] / R / a["mem_bw"]
    ops = L * B * k * 2 * ep / R / a["cpu_ops"]
    return max(read, ops)


def network_s(sh, B, R, link):
    H, L, E, k, *_ = shape_parts(sh)
    bw, rtt = LINKS[link]
    ranks_per_token = R * (1 - (1 - 1 / R) ** k)
    out = B * ranks_per_token * H * 4 + 40 * ranks_per_token
    back = B * k * H * 4 + 40 * ranks_per_token
    return L * (max(out, back) / bw + rtt), L * B * (ranks_per_token + k) * H * 4


def ranks_needed(sh, a=ASSUME):
    *_, routed, bb_total, _ = shape_parts(sh)
    per = a["ram"] * 0.9
    return max(1, int(-(-routed * a["q4_bytes"] // per)))


def one_machine_s(sh, B, a=ASSUME):
    H, L, E, k, ep, routed, bb_total, _ = shape_parts(sh)
    cache = max(0.0, a["ram"] * 0.9 - bb_total * a["q4_bytes"])
    hit = min(1.0, cache / (routed * a["q4_bytes"]))
    U = E * (1 - (1 - k / E) ** B)
    bytes_ = L * U * ep * a["q4_bytes"]
    io = bytes_ * (1 - hit) / a["ssd_bw"] + bytes_ * hit / a["mem_bw"]
    ops = L * B * k * 2 * ep / a["cpu_ops"]
    return backbone_s(sh, B) + max(io, ops), hit


def table(out=sys.stdout, gpu=False):
    Bs = [1, 8, 32, 128]
    for name, sh in SHAPES.items():
        R = ranks_needed(sh)
        out.write(f"\n**{name}**{', backbone on a GPU' if gpu else ''}: q4 "
                  f"{shape_parts(sh)[5] * ASSUME['q4_bytes'] / 1e9:.0f} GB of experts, "
                  f"{shape_parts(sh)[6] * ASSUME['q4_bytes'] / 1e9:.0f} GB of backbone: rank 0 + {R} expert ranks "
                  f"of {ASSUME['ram'] / 1e9:.0f} GB.\n\n")
        out.write("| batch B | one machine, SSD (cache hit) | " + " | ".join(f"{l} tok/s (network share)" for l in LINKS)
                  + " | infinite network | network bytes/token |\n")
        out.write("|---|---|" + "---|" * len(LINKS) + "---|---|\n")
        for B in Bs:
            t1, hit = one_machine_s(sh, B)
            t1 += backbone_s(sh, B, gpu=gpu) - backbone_s(sh, B)
            row = [f"{B}", f"{B / t1:.2f} ({hit:.0%})"]
            base = backbone_s(sh, B, gpu=gpu) + experts_s(sh, B, R)
            for l in LINKS:
                tn, nb = network_s(sh, B, R, l)
                row.append(f"{B / (base + tn):.2f} ({tn / (base + tn):.0%})")
            row.append(f"{B / base:.2f}")
            row.append(f"{nb / B / 1e6:.1f} MB")
            out.write("| " + " | ".join(row) + " |\n")
        if gpu:
            continue
        out.write("\n")
        for l in LINKS:  # where the network passes the ranks' own expert time
            cross = next((B for B in range(1, 4097) if network_s(sh, B, R, l)[0] > experts_s(sh, B, R)), None)
            out.write(f"- {l}: the network takes longer than the ranks' experts from batch "
                      f"{cross if cross else '> 4096'} on\n")


if __name__ == "__main__":
    print("Assumptions: " + ", ".join(f"{k} = {v:g}" for k, v in ASSUME.items()))
    print("Links: " + ", ".join(f"{k}: {v[0] / 1e9:.2f} GB/s, round trip {v[1] * 1e6:.0f} us" for k, v in LINKS.items()))
    table()
    table(gpu=True)
