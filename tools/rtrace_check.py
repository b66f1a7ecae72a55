#!/usr/bin/env python3
"""A routing trace recorded by sluice (`--record-routing`, src/model/rtrace.h) against transformers' own routers:
the checkpoint's top-k experts per token and MoE layer over the same windows as `sluice perplexity --ctx CTX`
(non-overlapping, each from an empty state), in float32. Prints the share of (token, layer) rows whose expert
sets agree, the mean overlap, and the first token's experts per layer (the reference tests/test_hybrid.c's
routing_trace_route128 checks the committed trace against).

Usage: python3 tools/rtrace_check.py HF_DIR TEXT TRACE [--ctx 512]
  (HF_DIR: what tools/train_route128.py writes as OUTDIR/hf; a Qwen3-MoE checkpoint with tokenizer.json)
"""
import argparse
import struct

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def read_trace(path):
    b = open(path, "rb").read()
    assert b[:8] == b"SLRTRACE", path
    ver, t, layers, e, k, width = struct.unpack_from("<6I", b, 8)
    vals = np.frombuffer(b, dtype=np.uint8 if width == 1 else "<u2", count=t * layers * k, offset=32)
    return vals.reshape(t, layers, k).astype(np.int64), e


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf")
    ap.add_argument("text")
    ap.add_argument("trace")
    ap.add_argument("--ctx", type=int, default=512)
    a = ap.parse_args()
    rec, n_exp = read_trace(a.trace)
    tok = Tokenizer.from_file(f"{a.hf}/tokenizer.json")
    ids = tok.encode(open(a.text).read(), add_special_tokens=False).ids
    model = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32).eval()
    k = model.config.num_experts_per_tok
    assert model.config.num_experts == n_exp and rec.shape[2] == k, (model.config.num_experts, rec.shape)
    n = min(len(ids) // a.ctx * a.ctx, rec.shape[0])
    ref = np.zeros((n, rec.shape[1], k), dtype=np.int64)
    with torch.no_grad():
        for w0 in range(0, n, a.ctx):
            out = model(input_ids=torch.tensor([ids[w0:w0 + a.ctx]]), use_cache=False, output_router_logits=True)
            for layer, lg in enumerate(out.router_logits):
                ref[w0:w0 + a.ctx, layer] = torch.topk(lg.float(), k, dim=-1).indices.numpy()[:a.ctx]
    got = np.sort(rec[:n], -1)
    ref = np.sort(ref, -1)
    same = (got == ref).all(-1)
    overlap = np.mean([len(set(g) & set(r)) / k for g, r in zip(got.reshape(-1, k), ref.reshape(-1, k))])
    print(f"{n} tokens x {rec.shape[1]} layers: {100 * same.mean():.2f}% of rows the same set, "
          f"mean overlap {100 * overlap:.2f}%")
    for layer in range(rec.shape[1]):
        print(f"token 0 layer {layer}: transformers {ref[0, layer].tolist()} trace {got[0, layer].tolist()}")


if __name__ == "__main__":
    main()
