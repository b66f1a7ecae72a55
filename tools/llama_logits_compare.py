#!/usr/bin/env python3
"""How close sluice's logits are to llama.cpp's on the same GGUF, position by position (docs/QUANT.md "Against
llama.cpp"): finer than greedy text, where one near-tie parts two texts for good.

llama.cpp: `llama-perplexity -m GGUF -f TEXT -c CTX --chunks N --kl-divergence-base BASE -nr` saves its tokens
and, per chunk of CTX tokens, the log-probabilities of positions CTX/2 .. CTX-2 (tools/perplexity/perplexity.cpp
log_softmax: per row an f32 scale and minimum, then a uint16 per vocabulary entry, 16 nats of range). sluice:
`sluice logits` of each chunk's tokens from a fresh session (as llama-perplexity evaluates each chunk). Prints
mean KL(llama.cpp || sluice), the largest, the top-1 agreement, and both engines' perplexity of the scored tokens.

Local only (CI does not build llama.cpp). Usage:
  build/venv/bin/python tools/llama_logits_compare.py GGUF PACK TEXT [--chunks 4] [--ctx 512] [--mode default|exact]
      [--llama-args "-fa off -ctk f32 -ctv f32"] [--sluice-args "--kv f32"]   (extra options of either engine)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def read_base(path):
    raw = open(path, "rb").read()
    assert raw[:8] == b"_logits_", "not a llama-perplexity logits file"
    n_ctx, n_vocab, n_chunk = np.frombuffer(raw, np.int32, 3, 8)
    off = 20
    toks = np.frombuffer(raw, np.int32, n_ctx * n_chunk, off).reshape(n_chunk, n_ctx)
    off += 4 * n_ctx * n_chunk
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_ctx - 1 - n_ctx // 2
    lp = np.frombuffer(raw, np.uint16, n_chunk * rows * nv, off).reshape(n_chunk, rows, nv)
    head = lp[..., :4].copy().view(np.float32)  # scale, min log-prob
    q = lp[..., 4:4 + n_vocab].astype(np.float64)
    logp = head[..., 1:2].astype(np.float64) + head[..., 0:1].astype(np.float64) * q
    return int(n_ctx), int(n_vocab), toks, logp


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("pack")
    ap.add_argument("text")
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--mode", default="default", choices=["default", "exact"])
    ap.add_argument("--llama-bin", default=os.environ.get("LLAMA_BIN", "/work/llama.cpp/build-cpu/bin"))
    ap.add_argument("--sluice", default=os.environ.get("SLUICE", "build/sluice"))
    ap.add_argument("--llama-args", default="", help="extra llama-perplexity options, one string")
    ap.add_argument("--sluice-args", default="", help="extra sluice logits options, one string")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.bin")
        subprocess.run([os.path.join(a.llama_bin, "llama-perplexity"), "-m", a.gguf, "-f", a.text, "-c", str(a.ctx),
                        "--chunks", str(a.chunks), "--kl-divergence-base", base, "-t", "2", "-nr"] + a.llama_args.split(),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        n_ctx, n_vocab, toks, ref = read_base(base)
        first = n_ctx // 2
        kls, agree, nll_l, nll_s = [], [], [], []
        for c in range(toks.shape[0]):
            out = os.path.join(tmp, "s.f32")
            cmd = [a.sluice, "logits", "-m", a.pack, "--resident", "--tokens", ",".join(map(str, toks[c])), "--out", out]
            subprocess.run(cmd + (["--exact"] if a.mode == "exact" else []) + a.sluice_args.split(), check=True,
                           stdout=subprocess.DEVNULL)
            s = log_softmax(np.fromfile(out, np.float32).reshape(n_ctx, n_vocab)[first:n_ctx - 1])
            p = np.exp(ref[c])
            kls.append((p * (ref[c] - s)).sum(axis=-1))
            agree.append(ref[c].argmax(axis=-1) == s.argmax(axis=-1))
            nxt = toks[c][first + 1:n_ctx]
            nll_l.append(-ref[c][np.arange(len(nxt)), nxt])
            nll_s.append(-s[np.arange(len(nxt)), nxt])
    kl, ag = np.concatenate(kls), np.concatenate(agree)
    print(f"{os.path.basename(a.gguf)} ({a.mode}): {kl.size} positions, mean KL(llama.cpp || sluice) {kl.mean():.3e}, "
          f"max {kl.max():.3e}, top-1 agreement {100 * ag.mean():.2f}%, ppl llama.cpp "
          f"{np.exp(np.concatenate(nll_l).mean()):.4f} sluice {np.exp(np.concatenate(nll_s).mean()):.4f}")


if __name__ == "__main__":
    sys.exit(main())
