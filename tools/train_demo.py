#!/usr/bin/env python3
"""Trains sluice's demo model: a small Qwen3-Next (Gated DeltaNet + gated attention, routed and shared
experts) on the King James Bible, with transformers' own Qwen3NextForCausalLM and torch.

Input: the corpus that tools/demo_corpus.py writes (train.txt, heldout.txt, chat.jsonl).
Output OUTDIR/:
  hf/         the trained checkpoint in BF16 as save_pretrained writes it (per-expert tensors, as the
              official Qwen3-Next release), plus tokenizer.json / tokenizer_config.json: the master that
              `sluice pack` packs at every --quant for docs/QUANT.md (not committed: 47 MB)
  mlx/        the same weights quantized in MLX's affine layout (uint32 codes, BF16 scales and biases):
              experts 4-bit, everything else 8-bit, group 64 -- what models/demo.sluice is packed from
  ref.json, ref_logits.f32
              transformers' float32 logits and 16 greedy tokens of the *dequantized* MLX weights on a
              held-out passage: the exactness test of the shipped model (tests/test_demo.c)
  train.json  the run: config, steps, losses, held-out perplexity / bits per byte of both checkpoints

Perplexity here is computed as `sluice perplexity` does (non-overlapping windows of CTX tokens, each
evaluated from an empty state, the second half of each window scored), so the two can be compared.

The tokenizer: byte-level BPE (HF tokenizers; NFC, Qwen's split regex, ByteLevel) with 4096 ids, learnt
on the training split: 4091 from the trainer, then <|endoftext|> <|im_start|> <|im_end|> (special) and
<think> </think> (added), as in Qwen3's own tokenizer. The chat template is Qwen3's
(tests/data/tiny_tokenizer/tokenizer_config.json).

Reproducible from --seed up to GPU non-determinism (atomics in backward). Runs on the GPU machine:
  python3 tools/train_demo.py CORPUS OUTDIR [--steps 1000] [--seed 1] [--smoke]
"""
import argparse
import copy
import json
import math
import os
import random
import sys
import time
import types

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import fit_to_model, save_checkpoint, to_per_expert  # noqa: E402

VOCAB = 4096
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SEQ = 512
CTX = 512          # perplexity window
REF_TOKENS = 96    # exactness reference: a held-out passage of this many tokens
N_GREEDY = 16
ZC_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
            ".q_norm.weight", ".k_norm.weight")


def model_config():
    from transformers import Qwen3NextConfig
    return Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=6,
        layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_conv_kernel_dim=4, num_experts=32, num_experts_per_tok=4, moe_intermediate_size=128,
        shared_expert_intermediate_size=256, intermediate_size=512, mlp_only_layers=[], decoder_sparse_step=1,
        norm_topk_prob=True, rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=False,
        output_router_logits=True, router_aux_loss_coef=0.01, bos_token_id=None, eos_token_id=VOCAB - 5,
        pad_token_id=VOCAB - 5)


def chatml(msgs, rng):
    s = ""
    for m in msgs:
        if m["role"] == "assistant":
            think = "<think>\n\n</think>\n\n" if rng.random() < 0.5 else ""
            s += f"<|im_start|>assistant\n{think}{m['content']}<|im_end|>\n"
        else:
            s += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return s


def build_tokenizer(texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n = VOCAB - len(SPECIAL) - len(ADDED)
    trainer = trainers.BpeTrainer(vocab_size=n, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.get_vocab_size() == n, tok.get_vocab_size()
    tok.add_special_tokens(SPECIAL)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    assert tok.token_to_id("</think>") == VOCAB - 1
    return tok


def write_tokenizer(tok, d, template):
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer", "chat_template": template}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def load_corpus(corpus, seed):
    """The corpus tools/demo_corpus.py writes, read and tokenized: the chapters (a "Book N" header, a blank line,
    the verses) and the conversations rendered in ChatML (rng, random.Random(seed), picks which answers carry an
    empty think block; it goes on to shuffle the training order), the tokenizer learnt on both, Qwen3's chat
    template, and the ids of the training documents and of the held-out text."""
    c = types.SimpleNamespace()
    train_txt = open(os.path.join(corpus, "train.txt")).read()
    c.held_txt = open(os.path.join(corpus, "heldout.txt")).read()
    c.chats = [json.loads(line) for line in open(os.path.join(corpus, "chat.jsonl"))]
    c.rng = random.Random(seed)
    parts = train_txt.split("\n\n")   # chapters are "Book N", a blank line, verses: header, body, header, ...
    c.chapters = [parts[i] + "\n\n" + parts[i + 1].strip("\n") + "\n" for i in range(0, len(parts) - 1, 2)]
    chat_texts = [chatml(m, c.rng) for m in c.chats]
    c.tok = build_tokenizer(c.chapters + chat_texts)
    c.template = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                                             "tiny_tokenizer", "tokenizer_config.json")))["chat_template"]
    c.eot = c.tok.token_to_id("<|endoftext|>")
    c.enc = lambda s: c.tok.encode(s, add_special_tokens=False).ids
    c.docs = [c.enc(t) for t in c.chapters] + [c.enc(t) for t in chat_texts]
    c.held_ids = c.enc(c.held_txt)
    return c


def batches(docs, eot, rng, batch, seq):
    """Endless training batches [batch][seq + 1]: the documents in an order rng shuffles each epoch, each followed
    by eot, cut into rows end to end."""
    buf = []
    while True:
        order = list(range(len(docs)))
        rng.shuffle(order)
        for i in order:
            buf += docs[i] + [eot]
            while len(buf) >= batch * (seq + 1):
                x = torch.tensor(buf[:batch * (seq + 1)]).view(batch, seq + 1)
                buf = buf[batch * (seq + 1):]
                yield x


def adamw(model, lr):
    """AdamW with weight decay 0.1 on the matrices and none on the norms and vectors."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "norm" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "norm" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def save_master(model, tok, template, hf, shard_bytes):
    """Rounds model's parameters to BF16 in place (kept float32, so it is evaluated as saved) and writes it to hf/
    as the BF16 master sluice packs: per-expert tensors in shards of shard_bytes, config.json (dtype bfloat16, no
    router logits), tokenizer.json and tokenizer_config.json. Returns the state dict written and config.json."""
    cfg = model.config
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16).float()
    cfg.output_router_logits = False
    os.makedirs(hf, exist_ok=True)
    # save from a copy: model.to(bfloat16) would also round the RoPE inv_freq buffer, which the
    # evaluation after must keep in float32 (as transformers computes it for a loaded checkpoint)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(hf)
    sd = {}
    for f in sorted(f for f in os.listdir(hf) if f.endswith(".safetensors")):
        sd.update(load_file(os.path.join(hf, f)))
        os.remove(os.path.join(hf, f))
    if os.path.exists(os.path.join(hf, "model.safetensors.index.json")):
        os.remove(os.path.join(hf, "model.safetensors.index.json"))
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in to_per_expert(sd, cfg.hidden_size).items()}
    save_checkpoint(sd, hf, shard_bytes=shard_bytes)
    cj = json.load(open(os.path.join(hf, "config.json")))
    cj["dtype"] = "bfloat16"
    cj["output_router_logits"] = False
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)
    write_tokenizer(tok, hf, template)
    return sd, cj


def windows_nll(model, ids, dev, ctx=CTX, bs=16):
    """Sum of NLL (nats) over the scored tokens and their ids, sluice perplexity's method."""
    nw = len(ids) // ctx
    total, scored = 0.0, []
    model.eval()
    with torch.no_grad():
        for b0 in range(0, nw, bs):
            w = torch.tensor([ids[i * ctx:(i + 1) * ctx] for i in range(b0, min(nw, b0 + bs))], device=dev)
            logits = model(input_ids=w, use_cache=False).logits.float()
            lp = torch.log_softmax(logits[:, ctx // 2 - 1:ctx - 1], -1)
            tgt = w[:, ctx // 2:]
            total += float(-lp.gather(-1, tgt[..., None]).sum())
            scored += tgt.flatten().tolist()
    return total, scored


def evaluate(model, tok, ids, dev):
    nll, scored = windows_nll(model, ids, dev)
    nbytes = sum(len(tok.decode([t], skip_special_tokens=False).encode()) for t in scored)
    return {"tokens": len(scored), "bytes": nbytes, "ppl": math.exp(nll / len(scored)),
            "bpb": nll / math.log(2) / nbytes}


def quantize(w, bits, group=64):
    """MLX affine quantization of a 2-D float tensor [out, in] (or [E, out, in]) along the last axis:
    scale = (max - min) / (2^bits - 1), bias = min, both rounded to BF16 first; codes packed 32/bits to a
    little-endian uint32. Returns (codes u32, scales bf16, biases bf16, dequantized float32)."""
    w = w.float()
    shp = w.shape
    g = w.reshape(*shp[:-1], shp[-1] // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    n = (1 << bits) - 1
    scale = ((hi - lo) / n).clamp_min(1e-8).to(torch.bfloat16)
    bias = lo.to(torch.bfloat16)
    s, b = scale.float()[..., None], bias.float()[..., None]
    q = torch.clamp(torch.round((g - b) / s), 0, n).to(torch.int64)
    deq = (q.float() * s + b).reshape(shp)
    per = 32 // bits
    q = q.reshape(*shp[:-1], shp[-1] // per, per)
    word = torch.zeros(q.shape[:-1], dtype=torch.int64, device=q.device)
    for j in range(per):
        word |= q[..., j] << (bits * j)
    codes = torch.from_numpy(word.cpu().numpy().astype(np.uint32))
    return codes, scale.cpu().contiguous(), bias.cpu().contiguous(), deq


def export_mlx(hf_sd, cfg_json, d):
    """hf_sd: per-expert HF names, BF16. Writes the MLX checkpoint to d; returns the dequantized per-expert
    state dict (float32) that transformers evaluates for the reference."""
    out, deq = {}, {}
    L, E = cfg_json["num_hidden_layers"], cfg_json["num_experts"]
    quant = {"group_size": 64, "bits": 8, "mode": "affine"}
    for k, v in hf_sd.items():
        if ".mlp.experts." in k:
            continue
        if "conv1d" in k:
            out[k] = v.float().permute(0, 2, 1).contiguous()   # [C,1,K] -> MLX [C,K,1]
            deq[k] = v.float()
        elif k.endswith(ZC_NORMS):
            out[k] = v.float() + 1.0                           # mlx-lm stores (1 + w)
            deq[k] = v.float()
        elif v.ndim == 2 and v.shape[1] % 64 == 0:
            c, s, b, dq = quantize(v, 8)
            base = k[:-len(".weight")]
            out[k], out[base + ".scales"], out[base + ".biases"] = c, s, b
            deq[k] = dq
        else:
            out[k] = v.float()
            deq[k] = v.float()
    for layer in range(L):
        for part in ("gate_proj", "up_proj", "down_proj"):
            names = [f"model.layers.{layer}.mlp.experts.{e}.{part}.weight" for e in range(E)]
            w = torch.stack([hf_sd[n] for n in names])
            c, s, b, dq = quantize(w, 4)
            base = f"model.layers.{layer}.mlp.switch_mlp.{part}"
            out[base + ".weight"], out[base + ".scales"], out[base + ".biases"] = c, s, b
            quant[base] = {"group_size": 64, "bits": 4}
            for e, n in enumerate(names):
                deq[n] = dq[e]
    os.makedirs(d, exist_ok=True)
    save_checkpoint({k: v.cpu() for k, v in out.items()}, d, shard_bytes=15_000_000)
    c = dict(cfg_json)
    c["quantization"] = quant
    c["quantization_config"] = quant
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    return deq


def greedy(model, ids, n, dev):
    seq, new = list(ids), []
    with torch.no_grad():
        for _ in range(n):
            t = int(model(input_ids=torch.tensor([seq], device=dev), use_cache=False).logits[0, -1].argmax())
            new.append(t)
            seq.append(t)
    return new


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="a few steps, to time one")
    a = ap.parse_args()
    from transformers import Qwen3NextForCausalLM
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False   # float32 evaluation means float32 (cuDNN's conv too)
    torch.backends.cudnn.allow_tf32 = False
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    c = load_corpus(a.corpus, a.seed)
    tok, template, eot, enc, held_txt, held_ids = c.tok, c.template, c.eot, c.enc, c.held_txt, c.held_ids
    n_train = sum(len(d) for d in c.docs)
    print(f"tokenizer: {VOCAB} ids; train {n_train} tokens ({len(c.chapters)} chapters, {len(c.chats)} chats), "
          f"held-out {len(held_ids)} tokens; {time.time() - t0:.1f}s", flush=True)

    cfg = model_config()
    model = Qwen3NextForCausalLM(cfg).to(dev)
    n_par = sum(p.numel() for p in model.parameters())
    print(f"model: {n_par / 1e6:.2f} M parameters", flush=True)
    opt = adamw(model, a.lr)
    steps = 5 if a.smoke else a.steps
    warm = min(60, steps // 10 + 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) /
                                                                                      max(1, steps - warm))))
    log = []
    it = batches(c.docs, eot, c.rng, a.batch, SEQ)
    model.train()
    ts = time.time()
    for step in range(steps):
        x = next(it).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev == "cuda"):
            out = model(input_ids=x, labels=x, use_cache=False)   # transformers shifts the labels itself
        loss = out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            el = time.time() - ts
            rec = {"step": step, "loss": loss.item()}
            if step and (step % 250 == 0 or step == steps - 1):   # the held-out curve, for the record
                rec["heldout_ppl"] = math.exp(windows_nll(model, held_ids, dev)[0] / (len(held_ids) // CTX * CTX // 2))
                model.train()
            print(f"step {step} loss {loss.item():.4f} aux {float(out.aux_loss or 0):.4f} "
                  f"lr {sched.get_last_lr()[0]:.2e} {el / (step + 1):.3f}s/step {rec.get('heldout_ppl', '')}",
                  flush=True)
            log.append(rec)
    train_s = time.time() - ts
    model.eval()
    cfg.output_router_logits = False   # also for the reference model made from cfg below
    # master: BF16, per-expert tensors
    sd, cj = save_master(model, tok, template, os.path.join(a.out, "hf"), 15_000_000)
    ev_master = evaluate(model, tok, held_ids, dev)
    print("held-out, BF16 master:", ev_master, flush=True)
    # MLX export and the dequantized model
    mlx = os.path.join(a.out, "mlx")
    deq = export_mlx(sd, cj, mlx)
    write_tokenizer(tok, mlx, template)
    ref_model = Qwen3NextForCausalLM(cfg).to(dev).float().eval()
    ref_model.load_state_dict(fit_to_model(deq, ref_model.state_dict(), cfg.hidden_size))
    ev_mlx = evaluate(ref_model, tok, held_ids, dev)
    print("held-out, q4 experts / q8 rest (dequantized):", ev_mlx, flush=True)
    start = held_txt.index("And it came to pass")
    ids = enc(held_txt[start:])[:REF_TOKENS]
    # the reference itself is computed on the CPU in float32, as tools/make_fixtures.py does
    ref_cpu = Qwen3NextForCausalLM(cfg).float().eval()
    ref_cpu.load_state_dict({k: v.cpu() for k, v in ref_model.state_dict().items()})
    with torch.no_grad():
        logits = ref_cpu(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    # the first 64 positions only (0.5 MB less in the repository; tests/test_demo.c reads logit_positions)
    logits.numpy()[:64].astype("<f4").tofile(os.path.join(a.out, "ref_logits.f32"))
    g = greedy(ref_cpu, ids, N_GREEDY, "cpu")
    ref = {"tokens": ids, "greedy": g, "vocab": VOCAB, "logit_positions": 64, "text": tok.decode(ids), "greedy_text": tok.decode(g),
           "transformers": transformers.__version__, "torch": torch.__version__, "device": dev,
           "dtype": "float32 compute on the dequantized MLX weights (q4 experts, q8 rest, group 64)"}
    with open(os.path.join(a.out, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
    # a sample, greedy and sampled, from the master
    samples = []
    for prompt in ["And it came to pass", "<|im_start|>user\nRead me Psalms chapter 23.<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n\n</think>\n\n"]:
        p = torch.tensor([enc(prompt)], device=dev)
        o = ref_model.generate(p, max_new_tokens=60, do_sample=True, temperature=0.7, top_p=0.9,
                               eos_token_id=[eot, tok.token_to_id("<|im_end|>")], pad_token_id=eot)
        samples.append(tok.decode(o[0].tolist(), skip_special_tokens=False))
        print("sample:", repr(samples[-1]), flush=True)
    run = {"seed": a.seed, "steps": steps, "batch": a.batch, "seq": SEQ, "lr": a.lr, "params": n_par,
           "train_tokens": n_train, "train_seconds": round(train_s, 1), "log": log, "heldout_bf16": ev_master,
           "heldout_q4q8": ev_mlx, "samples": samples, "gpu": torch.cuda.get_device_name() if dev == "cuda" else "",
           "transformers": transformers.__version__, "torch": torch.__version__}
    with open(os.path.join(a.out, "train.json"), "w") as f:
        json.dump(run, f, indent=1)
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
