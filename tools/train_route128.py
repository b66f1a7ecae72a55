#!/usr/bin/env python3
"""Trains a small Qwen3-MoE with the routing width of Qwen3-30B-A3B (128 routed experts, top-8, renormalised,
no shared expert) on the demo corpus, on the CPU, for its routing: issue 25's second model, whose routing on
held-out text is models/demo/route128.rtrace (docs/STREAMING.md "Routing traces"). The model is not committed.

The corpus and tokenizer are the demo model's (tools/demo_corpus.py, tools/train_demo.py: the same byte-level
BPE of 4096 ids learnt on the training split, the same ChatML rendering of the conversations); the model is
transformers' own Qwen3MoeForCausalLM with its router's auxiliary load-balancing loss
(transformers/models/qwen3_moe/modeling_qwen3_moe.py load_balancing_loss_func), as the Qwen3-MoE releases were
trained with one. Hidden 128, 8 layers (the layers of `sluice synth --shape qwen3-30b-a3b --layers 8`, so a
replay there maps layer to layer), 4 query / 2 KV heads of 32, expert FFN 64.

Output OUTDIR/:
  ckpt.pt     model + optimizer + step, every --ckpt-every steps (--resume continues from it)
  hf/         the trained checkpoint in BF16 (save_pretrained, per-expert tensors) + tokenizer.json /
              tokenizer_config.json: what `sluice pack` packs
  route.json  the run: config, losses, held-out loss / perplexity (tools/train_demo.py's windows: CTX tokens
              each from an empty state, the second half scored), and the routing's spread (experts' share of
              the held-out choices per layer)

Usage (2 cores shared: nice, one or two threads):
  nice -n 10 python3 tools/train_route128.py CORPUS OUTDIR [--steps 300] [--batch 8] [--threads 2] [--resume]
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_demo import CTX, VOCAB, adamw, batches, load_corpus, save_master, windows_nll  # noqa: E402

SEQ = 256


def model_config():
    from transformers import Qwen3MoeConfig
    return Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=128, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=256, moe_intermediate_size=64, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=1e-6,
        max_position_embeddings=4096, tie_word_embeddings=False, output_router_logits=True,
        router_aux_loss_coef=0.01, bos_token_id=None, eos_token_id=VOCAB - 5, pad_token_id=VOCAB - 5)


def routing_spread(model, ids, n_tok):
    """Per layer: the top-8 choices' counts over the first n_tok held-out tokens (one window, as recorded)."""
    cfg = model.config
    counts = np.zeros((cfg.num_hidden_layers, cfg.num_experts), dtype=np.int64)
    with torch.no_grad():
        for w0 in range(0, n_tok, CTX):
            x = torch.tensor([ids[w0:w0 + CTX]])
            out = model(input_ids=x, use_cache=False, output_router_logits=True)
            for layer, lg in enumerate(out.router_logits):
                top = torch.topk(lg.float(), cfg.num_experts_per_tok, dim=-1).indices.flatten().numpy()
                np.add.at(counts[layer], top, 1)
    share = counts / counts.sum(1, keepdims=True)
    top16 = np.sort(share, 1)[:, ::-1][:, :16].sum(1)
    return {"tokens": n_tok, "experts_used": [int((c > 0).sum()) for c in counts],
            "top16_share": [round(float(v), 4) for v in top16],
            "max_share": [round(float(v), 4) for v in share.max(1)]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--minutes", type=float, default=0,
                    help="stop training after this long, the learning rate's cosine fitted to it (0: no limit)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="3 steps, to time one")
    a = ap.parse_args()
    from transformers import Qwen3MoeForCausalLM
    torch.set_num_threads(a.threads)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    c = load_corpus(a.corpus, a.seed)
    tok, rng, held_ids = c.tok, c.rng, c.held_ids
    print(f"tokenizer: {VOCAB} ids; train {sum(len(d) for d in c.docs)} tokens, held-out {len(held_ids)}; "
          f"{time.time() - t0:.1f}s", flush=True)

    cfg = model_config()
    model = Qwen3MoeForCausalLM(cfg)
    n_par = sum(p.numel() for p in model.parameters())
    print(f"model: {n_par / 1e6:.2f} M parameters", flush=True)
    opt = adamw(model, a.lr)
    steps = 3 if a.smoke else a.steps
    warm = min(30, steps // 10 + 1)
    clock = {"el": 0.0}   # training seconds so far: with --minutes the cosine runs to whichever end comes first

    def lr_at(s):
        if s < warm:
            return (s + 1) / warm
        frac = (s - warm) / max(1, steps - warm)
        if a.minutes:
            frac = max(frac, clock["el"] / (a.minutes * 60))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    ckpt = os.path.join(a.out, "ckpt.pt")
    start, log, train_s = 0, [], 0.0
    if a.resume and os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        start, log, train_s = st["step"], st["log"], st["train_s"]
        rng.setstate(st["rng"])
        print(f"resumed at step {start}", flush=True)
    it = batches(c.docs, c.eot, rng, a.batch, SEQ)
    for _ in range(start):   # the data order as an uninterrupted run's (batches are cheap to skip)
        next(it)
    model.train()
    ts = time.time()
    step = start
    for step in range(start, steps):
        x = next(it)
        out = model(input_ids=x, labels=x, use_cache=False)   # loss includes coef * aux_loss
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        el = train_s + time.time() - ts
        clock["el"] = el
        sched.step()
        lm = out.loss.item() - cfg.router_aux_loss_coef * out.aux_loss.item()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step} lm {lm:.4f} aux {out.aux_loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} "
                  f"{el / (step + 1):.2f}s/step", flush=True)
            log.append({"step": step, "lm_loss": round(lm, 4), "aux": round(out.aux_loss.item(), 4)})
        stop = a.minutes and el > a.minutes * 60
        if (step + 1) % a.ckpt_every == 0 or step == steps - 1 or stop:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "step": step + 1, "log": log, "train_s": el, "rng": rng.getstate()}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        if stop:
            print(f"--minutes {a.minutes}: stopped after step {step}", flush=True)
            break
    train_s = train_s + time.time() - ts
    model.eval()
    # master: BF16 weights, per-expert tensors (what sluice packs); evaluated as saved
    save_master(model, tok, c.template, os.path.join(a.out, "hf"), 50_000_000)
    nll, scored = windows_nll(model, held_ids, "cpu", bs=4)
    nbytes = sum(len(tok.decode([t], skip_special_tokens=False).encode()) for t in scored)
    ev = {"tokens": len(scored), "loss": nll / len(scored), "ppl": math.exp(nll / len(scored)),
          "bpb": nll / math.log(2) / nbytes}
    print("held-out, BF16 master:", ev, flush=True)
    spread = routing_spread(model, held_ids, 2 * CTX)
    print("routing on held-out text:", spread, flush=True)
    run = {"seed": a.seed, "steps": step + 1, "batch": a.batch, "seq": SEQ, "lr": a.lr, "params": n_par,
           "config": json.loads(cfg.to_json_string()), "train_seconds": round(train_s, 1), "log": log,
           "heldout_bf16": ev, "routing": spread, "threads": a.threads,
           "transformers": transformers.__version__, "torch": torch.__version__}
    with open(os.path.join(a.out, "route.json"), "w") as f:
        json.dump(run, f, indent=1)
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
