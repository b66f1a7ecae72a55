#!/usr/bin/env python3
"""Build tiny randomly initialised MoE checkpoints with transformers' own classes, plus reference outputs.

Runs where torch + transformers (5.x) are installed (the GPU machine; it computes on CPU in float32).
For each fixture NAME it writes OUTDIR/NAME/:
  config.json, model.safetensors (or shards + model.safetensors.index.json)   -- the HF checkpoint
  ref.json        {"tokens": [...], "greedy": [...16 ids...], "vocab": V, "n_layers": L, "hidden": H, ...}
  ref_logits.f32  float32 little-endian [n_tokens][vocab] for ref.json["tokens"]
  (hidden states are not written: no test reads them, and they took a megabyte of the tracked-size budget;
   SLUICE_FIXTURE_HIDDEN=1 writes ref_hidden.f32, float32 [n_layers+1][n_tokens][hidden], for debugging)

Fixtures:
  qwen3_moe        F16, sharded (index.json), tied embeddings, a dense layer (mlp_only_layers), no top-k renorm
  qwen3_next       F32, legacy full_attention_interval, a dense layer, shared expert (3 layers: linear, dense, full)
  qwen3_5_moe      F32, the VLM wrapper (model.language_model.*, model.visual.*), per-expert tensors (3 layers)
  qwen3_5_fused    BF16, the VLM wrapper with fused experts (gate_up_proj [E,2I,H], down_proj [E,H,I])
  qwen3_next_fp8   FP8 E4M3 linear weights with 128x128 block scales (weight_scale_inv), as the official release
  mixtral          BF16, per-expert block_sparse_moe.experts.N.w1/w2/w3 and block_sparse_moe.gate (the release layout)
  olmoe            BF16, q/k norm over the whole projection, no top-k renorm, GQA
  qwen2_moe        BF16, q/k/v bias, shared expert with a sigmoid gate, a dense layer, no top-k renorm
  glm4_moe         BF16, partial RoPE, q/k norm, q/k/v bias, first_k_dense_replace, a plain shared expert, sigmoid
                   group-limited routing with e_score_correction_bias, routed_scaling_factor
  deepseek_v3      BF16, MLA with q_lora_rank (q_a_proj / q_a_layernorm / q_b_proj), interleaved RoPE with YaRN
                   (mscale = mscale_all_dim = 1 as DeepSeek-V3's: softmax scale times mscale^2), a dense first
                   layer, sigmoid group routing with e_score_correction_bias, a plain shared expert
  deepseek_v3_fp8  FP8 E4M3 128x128 block-scaled linear weights as DeepSeek-V3's release (BF16 embeddings, head,
                   router, norms; F32 e_score_correction_bias), q_lora_rank null (one q_proj), rotate-half RoPE
  gpt_oss          BF16, as GptOssForCausalLM.save_pretrained writes it: sliding (window 8) and full layers, sinks,
                   q/k/v/o biases, YaRN, router bias, fused interleaved gate_up_proj [E,H,2I] with biases, clamped SwiGLU
  gpt_oss_mxfp4    the released MXFP4 layout (experts.*_blocks [E,rows,cols/32,16] + *_scales [E,rows,cols/32],
                   quantization_config quant_method mxfp4), BF16 backbone; references from transformers' own
                   dequantisation (integrations/mxfp4.py convert_moe_packed_tensors), whose sha256 ref.json keeps
                   (over float32 [E][rows = out][cols = in], each expert's rows as sluice dequantises them)

Every parameter is randomised (norm weights, A_log, dt_bias included) so routing and gating vary.
Usage: python3 tools/make_fixtures.py OUTDIR [NAME ...]
"""
import copy, json, os, sys, traceback, re
import numpy as np
import torch
import transformers
from safetensors.torch import save_file, load_file

T_PROMPT = 100     # the 100 positions of issue 26; crosses the 64-token DeltaNet chunk
N_GREEDY = 16
V = 256

# transformers 5.x keeps MoE experts fused in memory (gate_up_proj [E,2I,H], down_proj [E,H,I]) and may or may not
# convert them back on save; these helpers pin the on-disk layout each fixture is meant to have.
EXP_FUSED = re.compile(r"(.*\.mlp\.experts)\.(gate_up_proj|down_proj)$")
EXP_SPLIT = re.compile(r"(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def _transposed(sd, pre, hidden):
    # decided from down_proj ([E,H,I] standard, [E,I,H] transposed): gate_up can be ambiguous when 2I == H
    d = sd[pre + ".down_proj"]
    if d.shape[1] == hidden:
        return False
    assert d.shape[2] == hidden, (pre, tuple(d.shape))
    return True


def to_per_expert(sd, hidden):
    out = {}
    for k, w in sd.items():
        mm = EXP_FUSED.match(k)
        if not mm:
            out[k] = w
            continue
        pre, kind = mm.groups()
        assert w.dim() == 3, (k, tuple(w.shape))
        if _transposed(sd, pre, hidden):
            w = w.transpose(1, 2)
        for e in range(w.shape[0]):
            if kind == "gate_up_proj":
                i = w.shape[1] // 2
                out[f"{pre}.{e}.gate_proj.weight"] = w[e, :i].clone()
                out[f"{pre}.{e}.up_proj.weight"] = w[e, i:].clone()
            else:
                out[f"{pre}.{e}.down_proj.weight"] = w[e].clone()
    return out


def to_fused(sd):
    # standard (official Qwen3.5) layout: gate_up_proj [E,2I,H] (gate rows first), down_proj [E,H,I]
    out, groups = {}, {}
    for k, w in sd.items():
        mm = EXP_SPLIT.match(k)
        if mm:
            groups.setdefault(mm.group(1), {})[(int(mm.group(2)), mm.group(3))] = w
        else:
            out[k] = w
    for pre, g in groups.items():
        E = 1 + max(e for e, _ in g)
        out[pre + ".gate_up_proj"] = torch.stack(
            [torch.cat([g[(e, "gate_proj")], g[(e, "up_proj")]], 0) for e in range(E)]).contiguous()
        out[pre + ".down_proj"] = torch.stack([g[(e, "down_proj")] for e in range(E)]).contiguous()
    return out


def fit_to_model(sd, model_sd, hidden):
    """sd (per-expert or fused names) -> the model's own state-dict names and layout."""
    if all(k in sd for k in model_sd):
        return {k: sd[k] for k in model_sd}
    f = to_fused(to_per_expert(sd, hidden))
    res = {}
    for k, ref in model_sd.items():
        w = f[k]
        mm = EXP_FUSED.match(k)
        if mm and _transposed(model_sd, mm.group(1), hidden):
            w = w.transpose(1, 2).contiguous()
        assert w.shape == ref.shape, (k, tuple(w.shape), tuple(ref.shape))
        res[k] = w.to(ref.dtype)
    return res


def save_checkpoint(sd, d, shard_bytes=None):
    if not shard_bytes:
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        return
    shards, cur, size = [], {}, 0
    for k, t in sd.items():
        nb = t.numel() * t.element_size()
        if cur and size + nb > shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = t
        size += nb
    shards.append(cur)
    n = len(shards)
    wmap = {}
    for i, sh in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_file(sh, os.path.join(d, fn), metadata={"format": "pt"})
        wmap.update({k: fn for k in sh})
    total = sum(t.numel() * t.element_size() for t in sd.values())
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)


def rewrite_checkpoint(d, fn, shard_bytes=None):
    """Load what save_pretrained wrote, apply fn, and rewrite it only if names/dtypes/shapes changed
    (or sharding was asked for and is missing)."""
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    sd = {}
    for f in files:
        sd.update(load_file(os.path.join(d, f)))
    new = fn(sd)
    sig = lambda x: {k: (str(v.dtype), tuple(v.shape)) for k, v in x.items()}
    idx = os.path.join(d, "model.safetensors.index.json")
    if sig(new) == sig(sd) and not (shard_bytes and not os.path.exists(idx)):
        return
    for f in files:
        os.remove(os.path.join(d, f))
    if os.path.exists(idx):
        os.remove(idx)
    save_checkpoint(new, d, shard_bytes)


def legacy_interval(d, interval):
    # as the official Qwen3-Next config.json: full_attention_interval, no layer_types
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    lt = c.pop("layer_types", None)
    n = c["num_hidden_layers"]
    exp = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    assert lt is None or lt == exp, lt
    c["full_attention_interval"] = interval
    with open(p, "w") as f:
        json.dump(c, f, indent=2)


def randomise(model, seed, zero_centred, std=0.08):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = name
            if n.endswith("A_log"):
                p.copy_(torch.log(torch.rand(p.shape, generator=g) * 15 + 1))
            elif n.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "norm" in n.split(".")[-2] if n.count(".") else False:
                # norm weights: zero-centred (1+w) families get w ~ N(0, .15); plain ones 1 + N(0, .15)
                base = 0.0 if (zero_centred and "linear_attn.norm" not in n) else 1.0
                p.copy_(base + torch.randn(p.shape, generator=g) * 0.15)
            elif "embed_tokens" in n or n.startswith("lm_head"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "conv1d" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif "visual" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            elif n.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def scale_head(model, s):
    """lm_head times s (fixtures shrunk to hidden 32: s = sqrt(2) keeps the logits' spread of hidden 64)."""
    with torch.no_grad():
        model.lm_head.weight.mul_(s)


def round_params(model, dtype):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))


def forward_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    logits = out.logits[0].float().numpy()
    hs = out.hidden_states
    # [n][H] per layer (a hyper-connection family's layers give [n][streams][H]: its first stream)
    hidden = np.stack([h[0].float().reshape(h.shape[1], -1)[:, :hs[0].shape[-1]].numpy() for h in hs])
    return logits, hidden


def greedy(model, ids, n):
    # full recomputation each step: the simplest possible reference (no cache semantics involved)
    seq = list(ids)
    new = []
    for _ in range(n):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([seq]), use_cache=False)
        t = int(out.logits[0, -1].argmax())
        new.append(t)
        seq.append(t)
    return new


def write_refs(model, d, seed, extra, n_tokens=T_PROMPT):
    rng = np.random.default_rng(seed)
    ids = [int(x) for x in rng.integers(0, V, n_tokens)]
    logits, hidden = forward_logits(model, ids)
    g = greedy(model, ids, N_GREEDY)
    logits.astype("<f4").tofile(os.path.join(d, "ref_logits.f32"))
    if os.environ.get("SLUICE_FIXTURE_HIDDEN") == "1":
        hidden.astype("<f4").tofile(os.path.join(d, "ref_hidden.f32"))
    ref = {"tokens": ids, "greedy": g, "vocab": int(logits.shape[1]), "n_hidden_states": int(hidden.shape[0]),
           "hidden": int(hidden.shape[2]), "transformers": transformers.__version__, "torch": torch.__version__}
    ref.update(extra)
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)


def next_kwargs():
    return dict(vocab_size=V, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                partial_rotary_factor=0.25, linear_num_key_heads=2, linear_num_value_heads=4,
                linear_key_head_dim=16, linear_value_head_dim=24, linear_conv_kernel_dim=4, num_experts=16,
                num_experts_per_tok=4, moe_intermediate_size=32, shared_expert_intermediate_size=40,
                rms_norm_eps=1e-6, max_position_embeddings=4096)


def make_qwen3_moe(d):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(vocab_size=V, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=24, intermediate_size=96, moe_intermediate_size=32,
                         num_experts=16, num_experts_per_tok=4, norm_topk_prob=False, decoder_sparse_step=1,
                         mlp_only_layers=[2], rope_parameters={"rope_type": "default", "rope_theta": 1e6}, rms_norm_eps=1e-6, tie_word_embeddings=True,
                         max_position_embeddings=4096, attn_implementation="eager")
    torch.manual_seed(1)
    m = Qwen3MoeForCausalLM(cfg).float().eval()
    # tied embeddings: with small block weights the residual stream stays dominated by the input token's own
    # embedding and greedy decoding just repeats it; larger weights make the blocks (hence routing) matter
    randomise(m, 101, zero_centred=False, std=0.25)
    round_params(m, torch.float16)
    # save from a copy: m.to(float16) would also round the RoPE inv_freq buffer, and the reference
    # must be computed with float32 frequencies (as transformers does for a float32 model)
    copy.deepcopy(m).to(torch.float16).save_pretrained(d, max_shard_size="400KB")
    rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 64), shard_bytes=400_000)
    write_refs(m, d, 11, {"arch": "qwen3_moe", "dtype": "F16"})


def make_qwen3_next(d, fp8=False):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    kw = next_kwargs()
    prf = kw.pop("partial_rotary_factor")
    # qwen3_next: linear, dense linear, full (3 layers, 1.25 MB: the 2 MB rule for fixtures); the FP8 one keeps
    # its 6 layers (linear x2, full, linear, dense linear, full), whose bytes are already small
    n_layers, dense = (6, [4]) if fp8 else (3, [1])
    cfg = Qwen3NextConfig(num_hidden_layers=n_layers, full_attention_interval=3, intermediate_size=96,
                          mlp_only_layers=dense, decoder_sparse_step=1, norm_topk_prob=True,
                          rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": prf},
                          tie_word_embeddings=False, attn_implementation="eager", **kw)
    torch.manual_seed(2)
    m = Qwen3NextForCausalLM(cfg).float().eval()
    randomise(m, 202 if not fp8 else 303, zero_centred=True)
    if not fp8:
        m.save_pretrained(d)
        rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 64))
        legacy_interval(d, 3)
        write_refs(m, d, 22, {"arch": "qwen3_next", "dtype": "F32"})
        return
    # FP8 E4M3, 128x128 block scales; dequantised weights go back into the model for the reference
    model_sd = {k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}
    sd = to_per_expert(model_sd, 64)   # the official FP8 release ships per-expert tensors
    out = {}
    skip = []
    for k, w in sd.items():
        quant = (w.dim() == 2 and k.endswith(".weight") and "embed_tokens" not in k and not k.startswith("lm_head")
                 and not k.endswith("mlp.gate.weight") and "shared_expert_gate" not in k and "norm" not in k)
        if not quant:
            out[k] = w
            if w.dim() == 2 and k.endswith(".weight"):
                skip.append(k[:-len(".weight")])
            continue
        o, i = w.shape
        bo, bi = (o + 127) // 128, (i + 127) // 128
        s = torch.zeros(bo, bi, dtype=torch.float32)
        q = torch.zeros(o, i, dtype=torch.float8_e4m3fn)
        deq = torch.zeros(o, i, dtype=torch.float32)
        for a in range(bo):
            for b in range(bi):
                blk = w[a*128:(a+1)*128, b*128:(b+1)*128]
                sc = (blk.abs().max() / 448.0).clamp(min=1e-12).float()
                qb = (blk / sc).to(torch.float8_e4m3fn)
                s[a, b] = sc
                q[a*128:(a+1)*128, b*128:(b+1)*128] = qb
                deq[a*128:(a+1)*128, b*128:(b+1)*128] = qb.float() * sc
        out[k] = q
        out[k[:-len(".weight")] + ".weight_scale_inv"] = s
        sd[k] = deq
    m.load_state_dict(fit_to_model(sd, model_sd, 64))
    os.makedirs(d, exist_ok=True)
    m.config.architectures = [type(m).__name__]
    m.config.save_pretrained(d)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128], "modules_to_not_convert": skip}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    legacy_interval(d, 3)
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    write_refs(m, d, 33, {"arch": "qwen3_next", "dtype": "F8_E4M3"})


def set_config_dtype(d, dtype):
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c["dtype"] = dtype   # what the checkpoint now holds
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def make_qwen3_5(d, fused=False):
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration
    kw = next_kwargs()
    kw.pop("partial_rotary_factor")
    # qwen3_5_moe: linear, linear, full (3 layers, 1.9 MB: the 2 MB rule); qwen3_5_fused (BF16) keeps 4, the last
    # one linear after the full layer
    lt = ["linear_attention", "linear_attention", "full_attention"] + (["linear_attention"] if fused else [])
    text = dict(num_hidden_layers=len(lt), layer_types=lt,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True},
                tie_word_embeddings=False, **kw)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16, in_channels=3)
    cfg = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                           attn_implementation="eager")
    torch.manual_seed(3)
    m = Qwen3_5MoeForConditionalGeneration(cfg).float().eval()
    randomise(m, 404 if fused else 505, zero_centred=True)
    if not fused:  # F32, per-expert tensors (BF16 would halve it but moves its native GGUF off bitwise: see git log)
        m.save_pretrained(d)
        rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 64))
        write_refs(m, d, 44, {"arch": "qwen3_5_moe", "dtype": "F32"})
        return
    round_params(m, torch.bfloat16)
    m.save_pretrained(d)
    # experts fused, as the official Qwen3.5 releases ship them, everything in BF16
    rewrite_checkpoint(d, lambda sd: {k: v.to(torch.bfloat16).contiguous()
                                      for k, v in to_fused(to_per_expert(sd, 64)).items()})
    set_config_dtype(d, "bfloat16")
    write_refs(m, d, 55, {"arch": "qwen3_5_moe", "dtype": "BF16", "fused_experts": True})


MIXTRAL_PART = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}
EXP_PER = re.compile(r"(.*)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def to_mixtral_layout(sd):
    # Mixtral's released checkpoints: block_sparse_moe.gate and block_sparse_moe.experts.N.w1 (gate), w2 (down),
    # w3 (up). Whatever save_pretrained wrote (fused or per expert, mlp.* or block_sparse_moe.*) ends up so.
    out = {}
    for k, w in to_per_expert(sd, 64).items():
        mm = EXP_PER.match(k)
        if mm:
            k = f"{mm.group(1)}.block_sparse_moe.experts.{mm.group(2)}.{MIXTRAL_PART[mm.group(3)]}.weight"
        elif k.endswith(".mlp.gate.weight"):
            k = k[:-len(".mlp.gate.weight")] + ".block_sparse_moe.gate.weight"
        out[k] = w.contiguous()
    return out


def check_reload(cls, d, model, ids):
    # what was written must be what transformers itself loads: same logits from the saved directory
    try:
        m2 = cls.from_pretrained(d, dtype=torch.float32).eval()
        with torch.no_grad():
            a = model(input_ids=torch.tensor([ids]), use_cache=False).logits
            b = m2(input_ids=torch.tensor([ids]), use_cache=False).logits
        diff = float((a - b).abs().max())
    except Exception as e:
        print("reload", os.path.basename(d), "RELOAD FAILED", repr(e), flush=True)
        return
    print("reload", os.path.basename(d), "max |delta logit|", diff, "RELOAD MISMATCH" if diff > 1e-5 else "ok", flush=True)


def make_mixtral(d):
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(vocab_size=V, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=16, num_experts_per_tok=2,
                        rope_parameters={"rope_type": "default", "rope_theta": 1e6}, rms_norm_eps=1e-5,
                        sliding_window=None, tie_word_embeddings=False, max_position_embeddings=4096,
                        attn_implementation="eager")
    torch.manual_seed(6)
    m = MixtralForCausalLM(cfg).float().eval()
    randomise(m, 606, zero_centred=False, std=0.12)
    round_params(m, torch.bfloat16)
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d)
    rewrite_checkpoint(d, to_mixtral_layout)
    check_reload(MixtralForCausalLM, d, m, list(range(20)))
    write_refs(m, d, 66, {"arch": "mixtral", "dtype": "BF16"})


def make_olmoe(d):
    from transformers import OlmoeConfig, OlmoeForCausalLM
    cfg = OlmoeConfig(vocab_size=V, hidden_size=32, intermediate_size=24, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, num_experts=16, num_experts_per_tok=4, norm_topk_prob=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e4}, rms_norm_eps=1e-5,
                      clip_qkv=None, tie_word_embeddings=False, max_position_embeddings=4096,
                      pad_token_id=1, bos_token_id=None, eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(7)
    m = OlmoeForCausalLM(cfg).float().eval()
    randomise(m, 717, zero_centred=False, std=0.17)  # hidden 32 (was 64, std 0.12): the same fan-in variance
    scale_head(m, 2 ** 0.5)
    # BF16 (OLMoE's release dtype; half the tracked bytes of the F32 it was): parameters rounded first, so the
    # reference is the model the checkpoint holds
    round_params(m, torch.bfloat16)
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d)
    rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 32))
    check_reload(OlmoeForCausalLM, d, m, list(range(20)))
    write_refs(m, d, 77, {"arch": "olmoe", "dtype": "BF16"})


def make_qwen2_moe(d):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    cfg = Qwen2MoeConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, moe_intermediate_size=24,
                         shared_expert_intermediate_size=40, num_experts=16, num_experts_per_tok=4,
                         norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1], qkv_bias=True,
                         use_sliding_window=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                         attn_implementation="eager")
    torch.manual_seed(8)
    m = Qwen2MoeForCausalLM(cfg).float().eval()
    randomise(m, 808, zero_centred=False, std=0.17)  # hidden 32 (was 64, std 0.12): the same fan-in variance
    scale_head(m, 2 ** 0.5)
    g = torch.Generator().manual_seed(809)
    with torch.no_grad():  # q/k/v biases large enough to matter
        for n, p in m.named_parameters():
            if n.endswith("_proj.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    # BF16 (Qwen1.5-MoE's release dtype; half the tracked bytes of the F32 it was): parameters rounded first
    round_params(m, torch.bfloat16)
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d)
    rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 32))
    check_reload(Qwen2MoeForCausalLM, d, m, list(range(20)))
    write_refs(m, d, 88, {"arch": "qwen2_moe", "dtype": "BF16"})


def make_glm4_moe(d):
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, moe_intermediate_size=24, n_routed_experts=16, num_experts_per_tok=4,
              n_shared_experts=1, routed_scaling_factor=2.5, n_group=4, topk_group=2, first_k_dense_replace=1,
              norm_topk_prob=True, use_qk_norm=True, attention_bias=True,
              rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
              rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=4096, attn_implementation="eager")
    m = None
    for extra in ({}, {"partial_rotary_factor": 0.5}):  # 5.x reads it from rope_parameters; older from the top level
        try:
            torch.manual_seed(9)
            m = Glm4MoeForCausalLM(Glm4MoeConfig(**kw, **extra)).float().eval()
        except Exception as e:
            print("glm4_moe config", extra, "refused:", repr(e), flush=True)
            continue
        nf = m.model.rotary_emb.inv_freq.numel()
        print("glm4_moe", extra, "inv_freq entries", nf, "(partial 0.5 of head_dim 32: 8)", flush=True)
        if nf == 8:
            break
    assert m is not None and m.model.rotary_emb.inv_freq.numel() == 8
    randomise(m, 909, zero_centred=False, std=0.12)
    g = torch.Generator().manual_seed(910)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("_proj.bias"):  # q/k/v biases large enough to matter
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        # e_score_correction_bias (a buffer): positive, so every biased score beats the 0 of a masked group, and
        # as large as the spread of the sigmoid scores, so it changes which experts are chosen
        for n, b in m.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(torch.rand(b.shape, generator=g) * 0.4)
    try:  # how often the bias changes the chosen set (on random router inputs)
        mlp = m.model.layers[1].mlp
        x = torch.randn(500, 64, generator=g)
        # 5.17: the router returns (logits, weights, indices); earlier 5.x: Glm4MoeMoE.route_tokens_to_experts
        pick = (lambda: mlp.gate(x)[2]) if not hasattr(mlp, "route_tokens_to_experts") else \
            (lambda: mlp.route_tokens_to_experts(mlp.gate(x))[0])
        with torch.no_grad():
            i1 = pick().sort(-1)[0]
            keep = mlp.gate.e_score_correction_bias.clone()
            mlp.gate.e_score_correction_bias.zero_()
            i0 = pick().sort(-1)[0]
            mlp.gate.e_score_correction_bias.copy_(keep)
        print("glm4_moe: bias changes the chosen experts of", int((i0 != i1).any(-1).sum()), "of 500 inputs", flush=True)
    except Exception as e:
        print("glm4_moe: bias check skipped", repr(e), flush=True)
    # BF16 (GLM-4.5's release dtype; half the tracked bytes of the F32 it was): parameters and the bias buffer
    # rounded first, so the reference is the model the checkpoint holds
    round_params(m, torch.bfloat16)
    _round_buffers(m, torch.bfloat16, "e_score_correction_bias")
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d)
    rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 64))
    check_reload(Glm4MoeForCausalLM, d, m, list(range(20)))
    write_refs(m, d, 99, {"arch": "glm4_moe", "dtype": "BF16"})


def make_dots1(d):
    """dots.llm1: Qwen3 attention + DeepSeek-V3 MoE; a dense first layer, a sliding-window last layer (window 8:
    the fixture's sequence is longer, so the window matters)."""
    from transformers import Dots1Config, Dots1ForCausalLM
    cfg = Dots1Config(vocab_size=V, hidden_size=64, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, n_shared_experts=1, n_routed_experts=16,
                      num_experts_per_tok=4, n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True,
                      routed_scaling_factor=2.0, sliding_window=8, max_window_layers=2, max_position_embeddings=4096,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                      attn_implementation="eager")
    print("dots1 layer_types", cfg.layer_types, flush=True)
    assert cfg.layer_types == ["full_attention", "full_attention", "sliding_attention"], cfg.layer_types
    torch.manual_seed(13)
    m = Dots1ForCausalLM(cfg).float().eval()
    randomise(m, 1313, zero_centred=False, std=0.15)
    g = torch.Generator().manual_seed(1314)
    with torch.no_grad():
        for n, b in m.named_buffers():  # positive and as large as the sigmoid scores' spread (see glm4_moe)
            if n.endswith("e_score_correction_bias"):
                b.copy_(torch.rand(b.shape, generator=g) * 0.4)
    m.save_pretrained(d)
    rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 64))
    check_reload(Dots1ForCausalLM, d, m, list(range(20)))
    write_refs(m, d, 131, {"arch": "dots1", "dtype": "F32"})


def _deepseek_model(seed, q_lora, interleave, layers, yarn=False):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    rope = {"rope_type": "default", "rope_theta": 1e4}
    if yarn:  # DeepSeek-V3's own values but factor and original length (positions of the fixture pass 64)
        rope = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 64,
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    cfg = DeepseekV3Config(vocab_size=V, hidden_size=64, intermediate_size=64, moe_intermediate_size=16,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
                           n_routed_experts=16, routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=q_lora,
                           qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=4, topk_group=2,
                           num_experts_per_tok=4, first_k_dense_replace=1, norm_topk_prob=True,
                           max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                           rope_parameters=rope, rope_interleave=interleave, attention_bias=False,
                           attn_implementation="eager")
    torch.manual_seed(seed)
    m = DeepseekV3ForCausalLM(cfg).float().eval()
    randomise(m, seed * 101, zero_centred=False, std=0.15)
    g = torch.Generator().manual_seed(seed * 101 + 1)
    with torch.no_grad():
        for n, b in m.named_buffers():  # positive and as large as the sigmoid scores' spread (see glm4_moe)
            if n.endswith("e_score_correction_bias"):
                b.copy_(torch.rand(b.shape, generator=g) * 0.4)
    print("deepseek_v3 scaling", m.model.layers[0].self_attn.scaling, "inv_freq", m.model.rotary_emb.inv_freq.tolist(),
          "attention_scaling", getattr(m.model.rotary_emb, "attention_scaling", None),
          "q_a eps", getattr(getattr(m.model.layers[0].self_attn, "q_a_layernorm", None), "variance_epsilon", None),
          "kv_a eps", m.model.layers[0].self_attn.kv_a_layernorm.variance_epsilon, flush=True)
    return m, DeepseekV3ForCausalLM


def _round_buffers(m, dtype, suffix):
    with torch.no_grad():
        for n, b in m.named_buffers():
            if n.endswith(suffix):
                b.copy_(b.to(dtype).float())


def make_deepseek_v3(d, yarn=True):
    m, cls = _deepseek_model(12, 32, True, 3, yarn)
    round_params(m, torch.bfloat16)
    _round_buffers(m, torch.bfloat16, "e_score_correction_bias")  # the bf16 copy below saves it as bf16
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d)
    rewrite_checkpoint(d, lambda sd: to_per_expert(sd, 64))  # the release layout: mlp.experts.N.*
    check_reload(cls, d, m, list(range(20)))
    write_refs(m, d, 121 if not yarn else 122, {"arch": "deepseek_v3", "dtype": "BF16", "yarn": yarn})


def _fp8_blocks(w):
    o, i = w.shape
    bo, bi = (o + 127) // 128, (i + 127) // 128
    s = torch.zeros(bo, bi, dtype=torch.float32)
    q = torch.zeros(o, i, dtype=torch.float8_e4m3fn)
    deq = torch.zeros(o, i, dtype=torch.float32)
    for a in range(bo):
        for b in range(bi):
            blk = w[a*128:(a+1)*128, b*128:(b+1)*128].float()
            sc = (blk.abs().max() / 448.0).clamp(min=1e-12).float()
            qb = (blk / sc).to(torch.float8_e4m3fn)
            s[a, b] = sc
            q[a*128:(a+1)*128, b*128:(b+1)*128] = qb
            deq[a*128:(a+1)*128, b*128:(b+1)*128] = qb.float() * sc
    return q, s, deq


def make_deepseek_v3_fp8(d):
    # as deepseek-ai/DeepSeek-V3's FP8 release: every linear weight but embed_tokens, lm_head and mlp.gate is
    # F8_E4M3 with a [ceil(out/128), ceil(in/128)] F32 weight_scale_inv; the rest BF16, the bias F32
    m, cls = _deepseek_model(13, None, False, 2)
    round_params(m, torch.bfloat16)
    model_sd = {k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}
    sd = to_per_expert(model_sd, 64)
    out = {}
    for k, w in sd.items():
        quant = (w.dim() == 2 and k.endswith(".weight") and "embed_tokens" not in k and not k.startswith("lm_head")
                 and not k.endswith("mlp.gate.weight") and "norm" not in k)
        if not quant:
            out[k] = w.float() if k.endswith("e_score_correction_bias") else w.to(torch.bfloat16)
            continue
        q, s, deq = _fp8_blocks(w)
        out[k] = q
        out[k[:-len(".weight")] + ".weight_scale_inv"] = s
        sd[k] = deq
    m.load_state_dict(fit_to_model(sd, model_sd, 64))
    os.makedirs(d, exist_ok=True)
    m.config.architectures = [type(m).__name__]
    m.config.save_pretrained(d)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    write_refs(m, d, 131, {"arch": "deepseek_v3", "dtype": "F8_E4M3"})

def gptoss_model(I, seed):
    from transformers import GptOssConfig, GptOssForCausalLM
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=I, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_local_experts=16, num_experts_per_tok=4, sliding_window=8,
              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=2048, rms_norm_eps=1e-5,
              tie_word_embeddings=False, attention_bias=True, attn_implementation="eager")
    # YaRN with a small original context, so the 100-token reference sits well inside the interpolated range
    yarn = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
            "original_max_position_embeddings": 64}
    m = None
    for extra in ({"rope_parameters": dict(yarn, rope_theta=150000.0)},
                  {"rope_scaling": yarn, "rope_theta": 150000.0}):
        try:
            torch.manual_seed(seed)
            m = GptOssForCausalLM(GptOssConfig(**kw, **extra)).float().eval()
        except Exception as e:
            print("gpt_oss config", list(extra), "refused:", repr(e), flush=True)
            m = None
            continue
        re_ = m.model.rotary_emb
        print("gpt_oss", list(extra), "attention_scaling", re_.attention_scaling, "inv_freq", re_.inv_freq.tolist(),
              flush=True)
        if abs(float(re_.attention_scaling) - 1.0) > 1e-3:
            break
    assert m is not None and abs(float(m.model.rotary_emb.attention_scaling) - 1.0) > 1e-3
    for n, p in m.named_parameters():
        if ".layers.0." in n:
            print("gpt_oss param", n, tuple(p.shape), flush=True)
    randomise(m, seed * 101, zero_centred=False, std=0.12)
    g = torch.Generator().manual_seed(seed * 101 + 1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("sinks"):  # large enough that the sink takes a real share of each head's softmax
                p.copy_(torch.randn(p.shape, generator=g) * 1.5)
            elif n.endswith("_proj.bias") or n.endswith("router.bias") or n.endswith("proj_bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif n.endswith("experts.gate_up_proj"):  # big enough that gate > 7 and |up| > 7 happen (the clamps)
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif n.endswith("experts.down_proj"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return m


def gptoss_info(m, ids):
    # how much of the fixture the reference exercises: clamped activations, the sink's share
    info = {}
    try:
        gu = m.model.layers[0].mlp.experts.gate_up_proj
        with torch.no_grad():
            h = m.model.layers[0].post_attention_layernorm(m.model.embed_tokens(torch.tensor(ids)))
            # the stored layout: [E, H, 2I] (x @ W) or [E, 2I, H]
            tr = m.model.layers[0].mlp.experts.down_proj.shape[1] != 64  # down [E,I,H]: the x @ W layout
            y = torch.einsum("th,ehj->etj", h, gu) if tr else torch.einsum("th,ejh->etj", h, gu)
        gate, up = y[..., ::2], y[..., 1::2]
        info["clamped_gate_fraction"] = float((gate > 7).float().mean())
        info["clamped_up_fraction"] = float((up.abs() > 7).float().mean())
    except Exception as e:
        print("gpt_oss: clamp statistics skipped", repr(e), flush=True)
    re_ = m.model.rotary_emb
    info["inv_freq"] = [float(x) for x in re_.inv_freq.float().tolist()]
    info["attention_scaling"] = float(re_.attention_scaling)
    return info


def make_gpt_oss(d):
    from transformers import GptOssForCausalLM
    m = gptoss_model(16, 11)
    round_params(m, torch.bfloat16)
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d)
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            for k, w in load_file(os.path.join(d, f)).items():
                if ".layers.0." in k or "layers" not in k:
                    print("gpt_oss saved", k, str(w.dtype), tuple(w.shape), flush=True)
    check_reload(GptOssForCausalLM, d, m, list(range(20)))
    ids = list(range(40))
    write_refs(m, d, 111, dict({"arch": "gpt_oss", "dtype": "BF16"}, **gptoss_info(m, ids)))


FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def mxfp4_quantize(w):
    """w [E, rows, cols] float -> blocks uint8 [E, rows, cols/32, 16], scales uint8 [E, rows, cols/32]: a shared
    power-of-two scale per 32 values (OCP MX: 2^(floor(log2 amax) - 2)), each value the nearest E2M1 code, two
    codes a byte, the even element in the low nibble (as convert_moe_packed_tensors reads them)."""
    E, R, C = w.shape
    x = w.reshape(E, R, C // 32, 32).double()
    amax = x.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -100)
    e = torch.floor(torch.log2(amax)) - 2
    scaled = x / torch.pow(2.0, e)
    lut = torch.tensor(FP4, dtype=torch.float64)
    code = (scaled[..., None] - lut).abs().argmin(-1).to(torch.uint8)  # ties: the lower code (smaller magnitude)
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8).contiguous()
    scales = (e[..., 0] + 127).clamp(0, 255).to(torch.uint8).contiguous()
    return blocks, scales


def make_gpt_oss_mxfp4(d):
    import hashlib
    from transformers import GptOssForCausalLM
    from transformers.integrations import mxfp4 as hf_mxfp4
    m = gptoss_model(32, 12)
    round_params(m, torch.bfloat16)
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    out, hashes = {}, {}
    for k, w in sd.items():
        mm = EXP_FUSED.match(k)
        if not mm:
            out[k] = w.to(torch.bfloat16)
            continue
        pre, kind = mm.groups()
        tr = _transposed(sd, pre, 64)  # [E, in, out] (x @ W), decided from down_proj: 2I == H here
        wt = w.transpose(1, 2) if tr else w  # -> [E, rows (out), cols (in)]
        blocks, scales = mxfp4_quantize(wt.contiguous())
        # transformers returns the x @ W layout [E, cols (in), rows (out)]; sluice's rows are [E, rows, cols]
        deq = hf_mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).cpu()
        assert deq.shape == (wt.shape[0], wt.shape[2], wt.shape[1]), tuple(deq.shape)
        deq_rows = deq.transpose(1, 2).contiguous()
        print("gpt_oss_mxfp4", k, "blocks", tuple(blocks.shape), "scales", tuple(scales.shape),
              "max |w - deq|", float((wt - deq_rows).abs().max()), "scale bytes", int(scales.min()), int(scales.max()),
              flush=True)
        hashes[k] = hashlib.sha256(deq_rows.numpy().astype("<f4").tobytes()).hexdigest()  # [E][rows][cols] f32
        with torch.no_grad():  # the reference model runs on transformers' own dequantised weights
            dict(m.named_parameters())[k].copy_(deq if tr else deq_rows)
        out[pre + "." + kind + "_blocks"] = blocks
        out[pre + "." + kind + "_scales"] = scales
    for k in list(out):
        if k.endswith("_bias"):
            out[k] = out[k].to(torch.bfloat16)
    m.config.save_pretrained(d)
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    c["torch_dtype"] = c["dtype"] = "bfloat16"
    with open(p, "w") as f:
        json.dump(c, f, indent=2)
    save_checkpoint(out, d)
    try:  # what transformers itself makes of the directory: Mxfp4Config(dequantize=True)
        from transformers import Mxfp4Config
        m2 = GptOssForCausalLM.from_pretrained(d, quantization_config=Mxfp4Config(dequantize=True),
                                               dtype=torch.float32, device_map="cpu").eval()
        ids = list(range(20))
        with torch.no_grad():
            a = m(input_ids=torch.tensor([ids]), use_cache=False).logits
            b = m2(input_ids=torch.tensor([ids]), use_cache=False).logits.float()
        diff = float((a - b).abs().max())
        print("reload gpt_oss_mxfp4 (dequantize=True) max |delta logit|", diff,
              "RELOAD MISMATCH" if diff > 1e-4 else "ok", flush=True)
        for k in hashes:
            pm = dict(m2.named_parameters()).get(k)
            if pm is not None:
                print("reload", k, tuple(pm.shape), str(pm.dtype), "equal to the reference model's:",
                      bool(torch.equal(pm.float().cpu(), dict(m.named_parameters())[k])), flush=True)
    except Exception as e:
        print("reload gpt_oss_mxfp4 RELOAD FAILED", repr(e), flush=True)
        traceback.print_exc()
    write_refs(m, d, 112, dict({"arch": "gpt_oss", "dtype": "MXFP4", "dequant_sha256": hashes},
                               **gptoss_info(m, list(range(40)))))


MAKERS = {
    "qwen3_moe": make_qwen3_moe,
    "qwen3_next": make_qwen3_next,
    "qwen3_5_moe": make_qwen3_5,
    "qwen3_5_fused": lambda d: make_qwen3_5(d, fused=True),
    "qwen3_next_fp8": lambda d: make_qwen3_next(d, fp8=True),
    "mixtral": make_mixtral,
    "olmoe": make_olmoe,
    "qwen2_moe": make_qwen2_moe,
    "glm4_moe": make_glm4_moe,
    "dots1": make_dots1,
    "deepseek_v3": make_deepseek_v3,
    "deepseek_v3_fp8": make_deepseek_v3_fp8,
    "gpt_oss": make_gpt_oss,
    "gpt_oss_mxfp4": make_gpt_oss_mxfp4,
}


def family_modules():
    """Makers of the families added one module each: tools/fixtures/NAME.py defines MAKERS = {fixture: fn(d)}
    and imports what it shares from this file (`from make_fixtures import randomise, write_refs, ...`)."""
    import importlib, pkgutil
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    found = {}
    for mod in pkgutil.iter_modules([os.path.join(here, "fixtures")]):
        found.update(importlib.import_module("fixtures." + mod.name).MAKERS)
    return found


def main():
    outdir = sys.argv[1]
    MAKERS.update(family_modules())
    names = sys.argv[2:] or list(MAKERS)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    failed = 0
    for n in names:
        d = os.path.join(outdir, n)
        os.makedirs(d, exist_ok=True)
        try:
            MAKERS[n](d)
            print("made", n, sorted(os.listdir(d)), flush=True)
        except Exception:
            failed += 1
            print("FAILED", n, flush=True)
            traceback.print_exc()
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
