"""GGUF import of issue 26's families: lfm2_moe (llama.cpp lfm2moe), gemma4 (gemma4), llama4 (llama4),
granitemoehybrid (granitehybrid), kimi_linear (kimi-linear), mimo_v2_flash (mimo2), bailing_hybrid (bailingmoe3),
deepseek_v4 (deepseek4).
Each fixture of tests/data is written at test time as a GGUF the way llama.cpp's convert_hf_to_gguf.py --outtype
f32 writes it (conversion/lfm2.py LFM2MoeModel, gemma.py Gemma4Model, llama.py Llama4Model, granite.py
GraniteHybridModel, kimi_linear.py KimiLinearModel, mimo.py MimoV2Model, bailingmoe3.py BailingMoeV3Model,
deepseek.py DeepseekV4Model; base.py
TextModel's keys), with gguf-py's own names (gguf.get_tensor_name_map) and writer: the converter imports torch and
transformers, which CI does not install. test_writer_mirrors_llama_cpp_converter checks this writer against the
converter itself where both are at hand (SLUICE_LLAMA_CPP: a llama.cpp source tree; SLUICE_LLAMA_CPP_PYTHON: a
Python with torch and transformers) and the converter can convert the fixture (NO_CONVERTER).
Reference: the safetensors pack of the same fixture, where llama.cpp's graph means what the checkpoint means; where
it does not, of a fixture copy changed to what the GGUF file means (MEANS; src/family/arch/lfm2_moe.c, llama4.c,
mimo_v2_flash.c, bailing_hybrid.c)."""
import json
import os
import re
import runpy
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from conftest import ROOT, run  # noqa: E402
from test_gguf import finish, gguf_tokenizer_writer, logits, ref_tokens  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402
from test_gguf_families import add_typed, hf_tensors, stays_f32, text_cfg  # noqa: E402

DATA = os.path.join(ROOT, "tests/data")
ARCH = {"lfm2_moe": gguf.MODEL_ARCH.LFM2MOE, "gemma4": gguf.MODEL_ARCH.GEMMA4, "llama4": gguf.MODEL_ARCH.LLAMA4,
        "granitemoehybrid": gguf.MODEL_ARCH.GRANITE_HYBRID, "kimi_linear": gguf.MODEL_ARCH.KIMI_LINEAR,
        "mimo_v2_flash": gguf.MODEL_ARCH.MIMO2, "bailing_hybrid": None, "deepseek_v4": None}
# architectures the gguf-py of CI (build/venv) predates: named here, tensors named by hand (BAILING_NAMES)
ARCH_NAME = {"bailing_hybrid": "bailingmoe3", "deepseek_v4": "deepseek4"}
# config.json changes that make the safetensors checkpoint mean what llama.cpp's file of it means
# (Llama 4: llama.cpp's graph fixes chunks of 8192, NoPE every fourth layer, temperature floor 8192,
# src/models/llama4.cpp)
MEANS = {"lfm2_moe": {"routed_scaling_factor": 1.0},
         "llama4": {"attention_chunk_size": 8192, "floor_scale": 8192, "attn_scale": 0.1,
                    "layer_types": ["chunked_attention"] * 3, "no_rope_layers": [1, 1, 1]},
         "mimo_v2_flash": {"routed_scaling_factor": 1.0},
         # Ling 3: the converter writes expert_group_count from a config's n_group only, not from
         # num_expert_group (the fixture's, transformers' name): the file routes without groups
         "bailing_hybrid": {"num_expert_group": 1}}
# tokenizer.ggml.pre the converter writes for each family's released tokenizer (conversion/base.py
# get_vocab_base_pre); None: the GGUF is written without a tokenizer (Gemma 4's tokenizer.ggml.model gemma4 is another
# model than the tiny byte-level one: tests/py/test_tokenizer_spm.py; Kimi Linear's kimi-k2, tiktoken ranks without
# merges, sluice does not read)
PRE = {"lfm2_moe": "lfm2", "gemma4": None, "llama4": "llama4", "granitemoehybrid": "gpt-2", "kimi_linear": None,
       "mimo_v2_flash": "qwen2", "bailing_hybrid": "gpt-2", "deepseek_v4": "deepseek-v3"}
# the converter reads a release's layer_types (mamba / attention), not transformers 5.25's (the fixture's
# linear_attention / full_attention: it would take every layer for Mamba2); its copy of the fixture gets the release's
# (Kimi Linear: the converter reads the release's linear_attn_config, first_k_dense_replace and
# moe_router_activation_func, and finds the dense layer's MLP under mlp.*, where transformers 5.25 saves it under
# block_sparse_moe.*: RELEASE_NAMES renames the tensors of the copy)
RELEASE = {"granitemoehybrid": {"layer_types": ["mamba", "attention"]},
           "kimi_linear": {"linear_attn_config": {"full_attn_layers": [3], "kda_layers": [1, 2], "head_dim": 8,
                                                  "num_heads": 2, "short_conv_kernel_size": 4},
                           "first_k_dense_replace": 1, "moe_router_activation_func": "sigmoid"},
           # MiMo-V2-Flash: the release's swa_* / hybrid_layer_pattern (1: sliding) fields and top-level RoPE keys, read
           # as config.json is (RAW_CONFIG: transformers 5.25's own MiMo config has none of them); None: removed
           "mimo_v2_flash": {"hybrid_layer_pattern": [0, 1, 0], "swa_head_dim": 16, "swa_num_attention_heads": 2,
                             "swa_v_head_dim": 8, "swa_num_key_value_heads": 2, "topk_method": "noaux_tc",
                             "scoring_func": "sigmoid", "layernorm_epsilon": 1e-5, "partial_rotary_factor": 0.5,
                             "rope_theta": 5000000.0, "swa_rope_theta": 10000.0, "rope_parameters": None}}
RELEASE["deepseek_v4"] = {"compress_ratios": [0, 4, 8], "num_hash_layers": 1,
                          "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                           "beta_fast": 32.0, "beta_slow": 1.0}}
RAW_CONFIG = {"mimo_v2_flash"}
# llama.cpp's converter takes a layer for full attention at every layer_group_size-th and at the tail past the last
# whole group (BailingMoeV3Model.is_full_attention): the fixture's [KDA, MLA, KDA] is no such pattern, and the
# converter refuses a KDA tensor on what it takes for a full layer. This writer puts the fixture's own kinds in
# head_count_kv, which llama.cpp's graph reads per layer; the converter is not run on it.
NO_CONVERTER = {"bailing_hybrid"}
# DeepseekV4Model.tensor_force_quant keeps a bf16 matrix BF16 whatever --outtype says (its routed experts are MXFP4 from
# the release's FP4; the fixture's are bf16, which the converter cannot repack: DSV4_PATCH stacks them as F32)
BF16_MATRICES = {"deepseek_v4"}
NEXTN = {"mimo_v2_flash": 3, "bailing_hybrid": 1}  # MimoV2Model._n_nextn: the release's MTP blocks, counted in block_count
RELEASE_NAMES = {"kimi_linear": (re.compile(r"block_sparse_moe\.(gate|up|down)_proj"), r"mlp.\1_proj"),
                 # DeepSeek-V4: the release's names (no model. prefix, embed, hc_head_*, attn.kv_norm), which the
                 # converter maps; transformers 5.25 saves the fixture's
                 "deepseek_v4": (re.compile(r"^model\.(.*)$"), lambda m: re.sub(
                     r"\.attn\.norm\.", ".attn.kv_norm.",
                     m.group(1).replace("embed_tokens.", "embed.").replace("hc_head.hc_", "hc_head_")))}
FAMILIES = list(ARCH)


def stack_experts(hf, key_of, n_experts):
    """{(layer, part): [E, rows, cols]} from per-expert tensors; key_of(name) -> (layer, expert, part) or None. The
    rest of hf as a list of (name, array)."""
    experts, rest = {}, []
    for k, (a, _) in hf.items():
        ke = key_of(k)
        if ke is None:
            rest.append((k, a))
            continue
        l, e, part = ke
        experts.setdefault((l, part), {})[e] = a
    stacked = {key: np.stack([es[e] for e in range(n_experts)]) for key, es in sorted(experts.items())}
    return stacked, rest


def convert_lfm2_moe(cfg, hf, tmap):
    """LFM2MoeModel.modify_tensors: conv.conv squeezed to [H, K], expert_bias named .bias, experts w1 / w3 / w2
    stacked per layer (renamed layers.N.feed_forward.experts.wX before the name map)"""
    def key_of(k):
        p = k.split(".")
        return (int(p[2]), int(p[5]), p[6]) if ".feed_forward.experts." in k else None
    stacked, rest = stack_experts(hf, key_of, cfg["num_experts"])
    out = []
    for k, a in rest:
        if "conv.conv" in k:
            a = a.reshape(a.shape[0], a.shape[-1])
        if k.endswith(".expert_bias"):
            k += ".bias"
        out.append((tmap.get_name(k, try_suffixes=(".weight", ".bias")), a))
    for (l, part), a in stacked.items():
        out.append((tmap.get_name(f"layers.{l}.feed_forward.experts.{part}.weight", try_suffixes=(".weight",)), a))
    return out


def text_keys(w, cfg, blocks=None, ctx="max_position_embeddings", ff="intermediate_size"):
    """TextModel.set_gguf_parameters' first keys (conversion/base.py): block count (blocks, else the fixture's
    layers), the context (ctx: the fixture's field, None: not written), the widths and the head count"""
    w.add_block_count(blocks or cfg["num_hidden_layers"])
    if ctx:
        w.add_context_length(cfg[ctx])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg[ff])
    w.add_head_count(cfg["num_attention_heads"])


def meta_lfm2_moe(cfg, w):
    """TextModel.set_gguf_parameters with head_count_kv per layer (0 for conv layers), then LFM2MoeModel's keys"""
    text_keys(w, cfg)
    w.add_head_count_kv([cfg["num_key_value_heads"] if t == "full_attention" else 0 for t in cfg["layer_types"]])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["norm_eps"])
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_leading_dense_block_count(cfg["num_dense_layers"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_shortconv_l_cache(cfg["conv_L_cache"])


def convert_gemma4(cfg, hf, tmap):
    """Gemma4Model (Gemma3Model with no norm shift): layer_scalar and the fused experts named .weight; router.scale as
    ffn_gate_inp.scale, per_expert_scale as ffn_down_exps.scale; rope_freqs generated for the full layers'
    proportional RoPE (factors 1 for the rotated pairs, 1e30 for the rest)"""
    out = []
    for k, a in ((k, a) for k, (a, _) in hf.items()):
        bid = k.split(".")[2] if ".layers." in k else None
        if k.endswith("router.scale"):
            out.append((f"blk.{bid}.ffn_gate_inp.scale", a))
            continue
        if k.endswith(".per_expert_scale"):
            out.append((f"blk.{bid}.ffn_down_exps.scale", a))
            continue
        if k.endswith("layer_scalar") or (".experts." in k and not k.endswith(".weight")):
            k += ".weight"
        out.append((tmap.get_name(k, try_suffixes=(".weight", ".bias")), a))
    full = cfg["rope_parameters"]["full_attention"]
    hd = full_head_dim(cfg)
    n_rot = int(hd * full["partial_rotary_factor"] / 2)
    out.append(("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (hd // 2 - n_rot), np.float32)))
    return out


def full_head_dim(cfg):
    if cfg.get("global_head_dim"):
        return cfg["global_head_dim"]
    return next(c["head_dim"] for l, c in cfg["per_layer_config"].items() if cfg["layer_types"][int(l)] == "full_attention")


def meta_gemma4(cfg, w):
    """TextModel's keys, Gemma3Model's and Gemma4Model's (head dims and KV heads of both layer kinds)"""
    types, rope = cfg["layer_types"], cfg["rope_parameters"]
    hd_full, hd_swa = full_head_dim(cfg), cfg["head_dim"]
    kv_full = next(c["num_key_value_heads"] for l, c in cfg["per_layer_config"].items() if types[int(l)] == "full_attention")
    text_keys(w, cfg)
    w.add_head_count_kv([cfg["num_key_value_heads"] if t == "sliding_attention" else kv_full for t in types])
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["top_k_experts"])
    w.add_key_length(hd_full)
    w.add_value_length(hd_full)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    w.add_sliding_window(cfg["sliding_window"])
    w.add_shared_kv_layers(cfg["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(cfg["hidden_size_per_layer_input"])
    w.add_sliding_window_pattern([t == "sliding_attention" for t in types])
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_rope_dimension_count(hd_full)
    w.add_rope_dimension_count_swa(int(hd_swa * rope["sliding_attention"].get("partial_rotary_factor", 1.0)))


def llama3_factors(cfg):
    """LlamaModel.generate_extra_tensors: rope_freqs of rope_type llama3, in torch's arithmetic (the frequencies
    base ** (i / dim) in double rounded to f32, then every operation on those 0-d f32 tensors in f32, Python numbers
    rounded to f32 first), or None"""
    rope = cfg["rope_parameters"]
    if rope.get("rope_type") != "llama3":
        return None
    dim, base, f32 = cfg["head_dim"], rope["rope_theta"], np.float32
    e = np.arange(0, dim, 2, dtype=np.float32) / f32(dim)
    freqs = f32(1.0) / (base ** e.astype(np.float64)).astype(np.float32)
    f, lo, hi, old = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"], rope["original_max_position_embeddings"]
    out = []
    for freq in freqs:
        wl = f32(2 * np.pi) / freq
        if wl < old / hi:
            out.append(f32(1))
        elif wl > old / lo:
            out.append(f32(f))
        else:
            sm = (f32(old) / wl - f32(lo)) / f32(hi - lo)
            out.append(f32(1) / ((f32(1) - sm) / f32(f) + sm))
    return np.array(out, np.float32)


def convert_llama4(cfg, hf, tmap):
    """Llama4Model (no q/k permutation): experts.gate_up_proj [E, H, 2I] transposed and split into gate / up,
    down_proj transposed; rope_freqs of the llama3 scaling"""
    out = []
    for k, a in ((k.replace("language_model.model.", "model."), a) for k, (a, _) in hf.items()):
        if "gate_up_proj" in k:
            g, u = np.split(np.swapaxes(a, -1, -2), 2, axis=-2)
            out.append((tmap.get_name(k.replace("gate_up_proj", "gate_proj.weight"), try_suffixes=(".weight",)), g))
            out.append((tmap.get_name(k.replace("gate_up_proj", "up_proj.weight"), try_suffixes=(".weight",)), u))
            continue
        if k.endswith("down_proj"):
            k, a = k + ".weight", np.swapaxes(a, -1, -2)
        out.append((tmap.get_name(k, try_suffixes=(".weight", ".bias")), a))
    ff = llama3_factors(cfg)
    if ff is not None:
        out.append(("rope_freqs.weight", ff))
    return out


def meta_llama4(cfg, w):
    """TextModel's and LlamaModel's keys (intermediate_size is intermediate_size_mlp), Llama4Model's"""
    text_keys(w, cfg, ff="intermediate_size_mlp")
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_interleave_moe_layer_step(cfg["interleave_moe_layer_step"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])


def granite_attn(cfg):
    """the attention layers, as GraniteHybridModel.get_attn_layers finds them in a release's layer_types (mamba /
    attention; transformers 5.25's full_attention, which it does not look for, counted the same here)"""
    return [i for i, t in enumerate(cfg["layer_types"]) if t in ("attention", "full_attention")]


def llama_permute(w, n_head):
    """LlamaModel.permute: each head's rows regrouped for llama.cpp's interleaved RoPE"""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert_granitemoehybrid(cfg, hf, tmap):
    """GraniteHybridModel: attention layers as GraniteMoeModel (q / k permuted), Mamba2 layers as Mamba2Model
    (conv1d squeezed, A = -exp(A_log) and D as [n, 1], dt_bias as dt_proj.bias, the norm as [groups, inner /
    groups]); input_linear (experts and shared MLP) split into gate and up"""
    out, attn, ng = [], granite_attn(cfg), cfg["mamba_n_groups"]
    for k, a in ((k, a) for k, (a, _) in hf.items()):
        bid = int(k.split(".")[2]) if ".layers." in k else None
        if k.endswith("input_linear.weight"):
            g, u = np.split(a, 2, axis=-2)
            kind = "exps" if "block_sparse_moe" in k else "shexp"
            out += [(f"blk.{bid}.ffn_gate_{kind}.weight", g), (f"blk.{bid}.ffn_up_{kind}.weight", u)]
            continue
        k = k.replace(".dt_bias", ".dt_proj.bias")
        name = tmap.get_name(k, try_suffixes=(".weight", ".bias"))
        if bid in attn and k.endswith("q_proj.weight"):
            a = llama_permute(a, cfg["num_attention_heads"])
        elif bid in attn and k.endswith("k_proj.weight"):
            a = llama_permute(a, cfg["num_key_value_heads"])
        elif ".conv1d.weight" in k:
            a = a.reshape(a.shape[0], a.shape[-1])
        elif k.endswith(".A_log"):
            a = -np.exp(a.astype(np.float64)).astype(np.float32).reshape(-1, 1)
        elif k.endswith(".D"):
            a = a.reshape(-1, 1)
        elif ".mamba.norm." in k:
            a = a.reshape(ng, -1)
        out.append((name, a))
    return out


def meta_granitemoehybrid(cfg, w):
    """GraniteMoeModel's keys (GraniteModel's multipliers), then the Mamba2 ones, head_count_kv per layer, no RoPE
    (rope.scaling.finetuned false) and context 2**20 for a hybrid"""
    attn = granite_attn(cfg)
    text_keys(w, cfg, ctx=None)
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_attention_scale(cfg["attention_multiplier"])
    w.add_embedding_scale(cfg["embedding_multiplier"])
    w.add_residual_scale(cfg["residual_multiplier"])
    w.add_logit_scale(cfg["logits_scaling"])
    w.add_expert_shared_feed_forward_length(cfg["shared_intermediate_size"])
    w.add_ssm_conv_kernel(cfg["mamba_d_conv"])
    w.add_ssm_state_size(cfg["mamba_d_state"])
    w.add_ssm_group_count(cfg["mamba_n_groups"])
    w.add_ssm_inner_size(cfg["mamba_expand"] * cfg["hidden_size"])
    w.add_ssm_time_step_rank(cfg["mamba_n_heads"])
    w.add_head_count_kv([cfg["num_key_value_heads"] if i in attn else 0 for i in range(cfg["num_hidden_layers"])])
    w.add_rope_scaling_finetuned(False)
    w.add_context_length(2 ** 20)


def convert_kimi_linear(cfg, hf, tmap):
    """KimiLinearModel.modify_tensors: conv kernels as [1, inner, 1, K], A = -exp(A_log), dt_bias as dt_proj.bias,
    experts w1 / w2 / w3 stacked per layer, kv_b_proj split into k_b_proj (transposed) and v_b_proj (on the
    release's names: RELEASE_NAMES)"""
    pat, rep = RELEASE_NAMES["kimi_linear"]

    def key_of(k):
        p = k.split(".")
        return (int(p[2]), int(p[5]), p[6]) if ".block_sparse_moe.experts." in k else None
    stacked, rest = stack_experts(hf, key_of, cfg["num_experts"])
    out, nh, nope = [], cfg["num_attention_heads"], cfg["qk_nope_head_dim"]
    for k, a in rest:
        k = pat.sub(rep, k)
        if k.endswith("_conv1d.weight"):
            a = a.reshape(1, a.shape[0], 1, a.shape[-1])
        elif k.endswith(".A_log"):
            a = -np.exp(a.astype(np.float64)).astype(np.float32)
        elif k.endswith(".dt_bias"):
            k = k.replace(".dt_bias", ".dt_proj.bias")
        elif k.endswith("kv_b_proj.weight"):
            kv = a.reshape(nh, -1, a.shape[-1])
            out.append((tmap.get_name(k.replace("kv_b_proj", "k_b_proj"), try_suffixes=(".weight",)),
                        np.swapaxes(kv[:, :nope], 1, 2)))
            out.append((tmap.get_name(k.replace("kv_b_proj", "v_b_proj"), try_suffixes=(".weight",)), kv[:, nope:]))
            continue
        out.append((tmap.get_name(k, try_suffixes=(".weight", ".bias")), a))
    names = {"w1": "ffn_gate_exps", "w2": "ffn_down_exps", "w3": "ffn_up_exps"}
    for (l, part), a in stacked.items():
        out.append((f"blk.{l}.{names[part]}.weight", a))
    return out


def meta_kimi_linear(cfg, w):
    """TextModel's keys on the release's config (num_key_value_heads 1, moe_router_activation_func), then
    KimiLinearModel's: head_count_kv per layer (0 for KDA), the KDA and MLA dimensions, the MoE keys"""
    rel = dict(cfg, **RELEASE["kimi_linear"])
    lin, L = rel["linear_attn_config"], cfg["num_hidden_layers"]
    kv_lora, rope = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    text_keys(w, cfg, blocks=L, ctx="model_max_length")
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_token"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_key_length(cfg["qk_rope_head_dim"])  # transformers' head_dim (its config's, not the file's)
    w.add_value_length(cfg["qk_rope_head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_head_count_kv([1 if i + 1 in lin["full_attn_layers"] else 0 for i in range(L)])
    w.add_ssm_conv_kernel(lin["short_conv_kernel_size"])
    w.add_kda_head_dim(lin["head_dim"])
    w.add_kv_lora_rank(kv_lora)
    w.add_rope_dimension_count(rope)
    w.add_key_length(kv_lora + rope)
    w.add_key_length_mla(cfg["qk_nope_head_dim"] + rope)
    w.add_value_length_mla(cfg["v_head_dim"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_count(cfg["num_shared_experts"])
    w.add_leading_dense_block_count(rel["first_k_dense_replace"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])


def convert_mimo_v2_flash(cfg, hf, tmap):
    """MimoV2Model: attention_sink_bias as attn_sinks.weight, experts stacked per layer (the name map of
    block_count + 3 layers)"""
    def key_of(k):
        p = k.split(".")
        return (int(p[2]), int(p[5]), p[6]) if ".mlp.experts." in k else None
    stacked, rest = stack_experts(hf, key_of, cfg["n_routed_experts"])
    out = []
    for k, a in rest:
        if k.endswith("attention_sink_bias"):
            k += ".weight"
        out.append((tmap.get_name(k, try_suffixes=(".weight", ".bias")), a))
    for (l, part), a in stacked.items():
        out.append((tmap.get_name(f"model.layers.{l}.mlp.experts.{part}.weight", try_suffixes=(".weight",)), a))
    return out


def meta_mimo_v2_flash(cfg, w):
    """TextModel's keys on the release's config, then MimoV2Model's (per-layer arrays over block_count + 3)"""
    rel = dict(cfg, **RELEASE["mimo_v2_flash"])
    hybrid = rel["hybrid_layer_pattern"] + [1] * NEXTN["mimo_v2_flash"]
    text_keys(w, cfg, blocks=len(hybrid))
    w.add_rope_freq_base(rel["rope_theta"])
    w.add_rope_freq_base_swa(rel["swa_rope_theta"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_key_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_head_count_kv([rel["swa_num_key_value_heads"] if s else cfg["num_key_value_heads"] for s in hybrid])
    w.add_sliding_window(cfg["sliding_window"])
    w.add_sliding_window_pattern(hybrid)
    w.add_value_length(cfg["v_head_dim"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_rope_dimension_count(int(cfg["head_dim"] * rel["partial_rotary_factor"]))
    w.add_layer_norm_rms_eps(rel["layernorm_epsilon"])
    w.add_float32("mimo2.attention.value_scale", float(cfg["attention_value_scale"]))  # add_attn_value_scale
    w.add_nextn_predict_layers(NEXTN["mimo_v2_flash"])


BAILING_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
                 "attention.q_proj.weight": "attn_q.weight", "attention.k_proj.weight": "attn_k.weight",
                 "attention.v_proj.weight": "attn_v.weight", "attention.q_conv1d.weight": "ssm_conv1d_q.weight",
                 "attention.k_conv1d.weight": "ssm_conv1d_k.weight", "attention.v_conv1d.weight": "ssm_conv1d_v.weight",
                 "attention.b_proj.weight": "ssm_beta.weight", "attention.A_log": "ssm_a",
                 "attention.dt_bias": "ssm_dt.bias", "attention.o_norm.weight": "ssm_norm.weight",
                 "attention.dense.weight": "attn_output.weight", "attention.f_proj.weight": "ssm_f_a.weight",
                 "attention.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
                 "attention.kv_a_layernorm.weight": "attn_kv_a_norm.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
                 "mlp.gate.expert_bias": "exp_probs_b.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
                 "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
                 "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
                 "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
                 "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
                 "model.word_embeddings.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                 "lm_head.weight": "output.weight"}


def convert_bailing_hybrid(cfg, hf, tmap):
    """BailingMoeV3Model.modify_tensors (llama.cpp gguf-py's BAILINGMOE3 names): conv kernels as [1, inner, 1, K],
    exp(A_log) as [n, 1], dt_bias as dt_proj.bias, f_proj / g_proj as ssm_f_a / ssm_g_a on KDA layers and g_proj as
    attn_gate on MLA ones, experts stacked per layer, kv_b_proj split"""
    def key_of(k):
        p = k.split(".")
        return (int(p[2]), int(p[5]), p[6]) if ".mlp.experts." in k else None
    stacked, rest = stack_experts(hf, key_of, cfg["num_experts"])
    out, nh, nope = [], cfg["num_attention_heads"], cfg["qk_nope_head_dim"]
    for k, a in rest:
        k = k.replace("e_score_correction.bias", "expert_bias")  # hf_tensors' rename undone
        if not k.startswith("model.layers."):
            out.append((BAILING_NAMES[k], a))
            continue
        bid, rel = k.split(".")[2], k.split(".", 3)[3]
        full = cfg["layer_types"][int(bid)] == "full_attention"
        if rel.endswith("_conv1d.weight"):
            a = a.reshape(1, a.shape[0], 1, a.shape[-1])
        elif rel == "attention.A_log":
            a = np.exp(a.astype(np.float64)).astype(np.float32).reshape(-1, 1)
        elif rel == "attention.g_proj.weight":
            out.append((f"blk.{bid}.{'attn_gate' if full else 'ssm_g_a'}.weight", a))
            continue
        elif rel == "attention.kv_b_proj.weight":
            kv = a.reshape(nh, -1, a.shape[-1])
            out += [(f"blk.{bid}.attn_k_b.weight", np.swapaxes(kv[:, :nope], 1, 2)), (f"blk.{bid}.attn_v_b.weight", kv[:, nope:])]
            continue
        out.append((f"blk.{bid}.{BAILING_NAMES[rel]}", a))
    for (l, part), a in stacked.items():
        out.append((f"blk.{l}.ffn_{part.replace('_proj', '')}_exps.weight", a))
    return out


def meta_bailing_hybrid(cfg, w):
    """TextModel's keys (num_key_value_heads 1, the release's sigmoid score function), BailingMoeV3Model's: per-layer
    arrays over block_count + nextn (the MTP block full attention, its limits 0), KDA, MLA and MoE keys"""
    L, n = cfg["num_hidden_layers"], cfg["num_hidden_layers"] + NEXTN["bailing_hybrid"]
    kv_lora, rope = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    text_keys(w, cfg, blocks=n, ctx="model_max_length")
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_token"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_head_count_kv([1 if i >= L or cfg["layer_types"][i] == "full_attention" else 0 for i in range(n)])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_ssm_conv_kernel(cfg["short_conv_kernel_size"])
    w.add_kda_head_dim(cfg["head_dim"])
    w.add_bool("bailingmoe3.kda.safe_gate", cfg["kda_safe_gate"])  # add_kda_safe_gate
    w.add_float32("bailingmoe3.kda.gate_lower_bound", cfg["kda_lower_bound"])  # add_kda_gate_lower_bound
    w.add_kv_lora_rank(kv_lora)
    w.add_rope_dimension_count(rope)
    w.add_key_length(kv_lora + rope)
    w.add_key_length_mla(cfg["qk_nope_head_dim"] + rope)
    w.add_value_length_mla(cfg["v_head_dim"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_feed_forward_length(cfg["moe_intermediate_size"] * cfg["num_shared_experts"])
    w.add_expert_shared_count(cfg["num_shared_experts"])
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    w.add_expert_weights_norm(cfg["moe_renormalize"])
    for key, add in (("expert_swiglu_limit_list", w.add_swiglu_clamp_exp),
                     ("share_expert_swiglu_limit_list", w.add_swiglu_clamp_shexp)):
        v = [float(x or 0) for x in cfg[key][:n]]
        add(v + [0.0] * (n - len(v)))
    w.add_nextn_predict_layers(NEXTN["bailing_hybrid"])


# llama.cpp gguf-py's DEEPSEEK4 names of the release's tensors (conversion/deepseek.py _map_dsv4_tensor_name; the
# fixture's attn.norm is the release's attn.kv_norm), relative to blk.N. or global
DSV4_NAMES = {"attn.attn_sink": "attn_sinks", "attn.wq_a.weight": "attn_q_a", "attn.wq_b.weight": "attn_q_b",
              "attn.q_norm.weight": "attn_q_a_norm", "attn.wkv.weight": "attn_kv", "attn.norm.weight": "attn_kv_a_norm",
              "attn.wo_a.weight": "attn_output_a", "attn.wo_b.weight": "attn_output_b",
              "attn.compressor.ape": "attn_compressor_ape", "attn.compressor.wkv.weight": "attn_compressor_kv",
              "attn.compressor.wgate.weight": "attn_compressor_gate", "attn.compressor.norm.weight": "attn_compressor_norm",
              "attn.indexer.wq_b.weight": "indexer.attn_q_b", "attn.indexer.weights_proj.weight": "indexer.proj",
              "attn.indexer.compressor.ape": "indexer_compressor_ape",
              "attn.indexer.compressor.wkv.weight": "indexer_compressor_kv",
              "attn.indexer.compressor.wgate.weight": "indexer_compressor_gate",
              "attn.indexer.compressor.norm.weight": "indexer_compressor_norm", "attn_norm.weight": "attn_norm",
              "ffn_norm.weight": "ffn_norm", "ffn.gate.weight": "ffn_gate_inp", "ffn.gate.tid2eid": "ffn_gate_tid2eid",
              "ffn.shared_experts.w1.weight": "ffn_gate_shexp", "ffn.shared_experts.w2.weight": "ffn_down_shexp",
              "ffn.shared_experts.w3.weight": "ffn_up_shexp", "hc_attn_fn": "hc_attn_fn", "hc_attn_base": "hc_attn_base",
              "hc_attn_scale": "hc_attn_scale", "hc_ffn_fn": "hc_ffn_fn", "hc_ffn_base": "hc_ffn_base",
              "hc_ffn_scale": "hc_ffn_scale", "embed_tokens.weight": "token_embd", "norm.weight": "output_norm",
              "hc_head.hc_fn": "output_hc_fn", "hc_head.hc_base": "output_hc_base", "hc_head.hc_scale": "output_hc_scale"}
DSV4_EXPERTS = {"w1": "ffn_gate_exps", "w2": "ffn_down_exps", "w3": "ffn_up_exps"}


def convert_deepseek_v4(cfg, hf, tmap):
    """DeepseekV4Model.modify_tensors / generate_extra_tensors: the release's names mapped, gate.bias of hash layers
    dropped (unused), tid2eid as I32, the routed experts stacked per layer (the converter repacks the release's FP4
    experts to MXFP4; the fixture's are bf16: stacked as they are)"""
    def key_of(k):
        p = k.split(".")
        return (int(p[2]), int(p[5]), p[6]) if ".ffn.experts." in k else None
    stacked, rest = stack_experts(hf, key_of, cfg["n_routed_experts"])
    out, hash_layers = [], cfg["mlp_layer_types"].count("hash_moe")
    for k, a in rest:
        k = k.removeprefix("model.")
        if not k.startswith("layers."):
            out.append((DSV4_NAMES[k] + ".weight", a))
            continue
        bid, rel = int(k.split(".")[1]), k.split(".", 2)[2]
        if rel == "ffn.gate.bias":
            if bid >= hash_layers:
                out.append((f"blk.{bid}.exp_probs_b.bias", a))
            continue
        out.append((f"blk.{bid}.{DSV4_NAMES[rel]}.weight", a.astype(np.int32) if rel.endswith("tid2eid") else a))
    for (l, part), a in stacked.items():
        out.append((f"blk.{l}.{DSV4_EXPERTS[part]}.weight", a))
    return out


def meta_deepseek_v4(cfg, w):
    """TextModel's keys (the release's rope_scaling: the compressed branches' YaRN) and DeepseekV4Model's; the layer
    kinds as the release's compress_ratios (0 sliding, CSA's rate, HCA's rate), its hash layers num_hash_layers"""
    L, rates, cp = cfg["num_hidden_layers"], cfg["compress_rates"], cfg["rope_parameters"]["compress"]
    ratio = {"sliding_attention": 0, "compressed_sparse_attention": rates["compressed_sparse_attention"],
             "heavily_compressed_attention": rates["heavily_compressed_attention"]}
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_uint32("deepseek4.expert_gating_func", 4)  # ExpertGatingFuncType.SQRTSOFTPLUS
    w.add_string("deepseek4.rope.scaling.type", "yarn")
    w.add_float32("deepseek4.rope.scaling.factor", cp["factor"])
    w.add_uint32("deepseek4.rope.scaling.original_context_length", cp["original_max_position_embeddings"])
    w.add_float32("deepseek4.rope.scaling.yarn_beta_fast", cp["beta_fast"])
    w.add_float32("deepseek4.rope.scaling.yarn_beta_slow", cp["beta_slow"])
    w.add_rope_dimension_count(cfg["qk_rope_head_dim"])
    w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_sliding_window(cfg["sliding_window"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    w.add_expert_weights_norm(cfg["norm_topk_prob"])
    w.add_array("deepseek4.swiglu_clamp_exp", [cfg["swiglu_limit"]] * L)
    w.add_array("deepseek4.swiglu_clamp_shexp", [cfg["swiglu_limit"]] * L)
    w.add_uint32("deepseek4.attention.indexer.head_count", cfg["index_n_heads"])
    w.add_uint32("deepseek4.attention.indexer.key_length", cfg["index_head_dim"])
    w.add_uint32("deepseek4.attention.indexer.top_k", cfg["index_topk"])
    w.add_uint32("deepseek4.attention.output_group_count", cfg["o_groups"])
    w.add_uint32("deepseek4.attention.output_lora_rank", cfg["o_lora_rank"])
    w.add_array("deepseek4.attention.compress_ratios", [ratio[t] for t in cfg["layer_types"]])
    w.add_float32("deepseek4.attention.compress_rope_freq_base", cfg["compress_rope_theta"])
    w.add_uint32("deepseek4.hyper_connection.count", cfg["hc_mult"])
    w.add_uint32("deepseek4.hyper_connection.sinkhorn_iterations", cfg["hc_sinkhorn_iters"])
    w.add_float32("deepseek4.hyper_connection.epsilon", cfg["hc_eps"])
    w.add_uint32("deepseek4.hash_layer_count", cfg["mlp_layer_types"].count("hash_moe"))
    w.add_uint32("deepseek4.embedding_length_out", cfg["hidden_size"] * cfg["hc_mult"])


CONVERT = {"lfm2_moe": convert_lfm2_moe, "gemma4": convert_gemma4, "llama4": convert_llama4,
           "granitemoehybrid": convert_granitemoehybrid, "kimi_linear": convert_kimi_linear,
           "mimo_v2_flash": convert_mimo_v2_flash, "bailing_hybrid": convert_bailing_hybrid,
           "deepseek_v4": convert_deepseek_v4}
META = {"lfm2_moe": meta_lfm2_moe, "gemma4": meta_gemma4, "llama4": meta_llama4,
        "granitemoehybrid": meta_granitemoehybrid, "kimi_linear": meta_kimi_linear,
        "mimo_v2_flash": meta_mimo_v2_flash, "bailing_hybrid": meta_bailing_hybrid, "deepseek_v4": meta_deepseek_v4}


def write(family, path, tokenizer=True, drop=(), rope=None, q8=False, dequant=False, keys=None, data=None,
          mxfp4=False):
    """The fixture as an f32 GGUF (--outtype f32), with the tiny tokenizer under the family's pre-tokenizer name;
    tensors named in drop left out; rope: rope_parameters fields changed before converting. q8: matrices Q8_0 where
    their rows are whole blocks (else F16), what stays F32 as base.py prepare_tensors keeps it; mxfp4: the routed
    experts (*_exps) MXFP4; dequant: those written as gguf-py dequantises them, in F32; keys(w): keys written after
    the family's (a bad file: each replaces the converter's); data: another checkpoint of tests/data of that family.
    Returns [(name, array)] as converted."""
    cfg, _ = text_cfg(data or family)
    if rope:
        cfg = dict(cfg, rope_parameters=dict(cfg["rope_parameters"], **rope))
    tmap = ARCH[family] and gguf.get_tensor_name_map(ARCH[family], cfg["num_hidden_layers"] + NEXTN.get(family, 0))
    tensors = CONVERT[family](cfg, hf_tensors(data or family), tmap)
    w = gguf.GGUFWriter(path, ARCH_NAME.get(family) or gguf.MODEL_ARCH_NAMES[ARCH[family]])
    META[family](cfg, w)
    if keys:
        keys(w)
    if tokenizer and PRE[family]:
        gguf_tokenizer_writer(os.path.join(DATA, "tiny_tokenizer"), PRE[family])(w)
    for name, a in tensors:
        assert name, family
        if name in drop:
            continue
        if a.dtype == np.int32:  # DeepSeek-V4's tid2eid
            w.add_tensor(name, a)
            continue
        a = np.ascontiguousarray(a, dtype=np.float32)
        if mxfp4 and name.endswith("_exps.weight"):
            add_typed(w, name, a, QT.MXFP4, dequant)
            continue
        keep = not q8 or stays_f32(name, a) or ".shortconv.conv" in name or name.endswith(".scale")
        bf16 = family in BF16_MATRICES and not q8 and a.ndim >= 2 and not name.endswith("_exps.weight")
        add_typed(w, name, a, QT.BF16 if bf16 else QT.F32 if keep else QT.Q8_0, dequant)
    finish(w)
    return tensors


@pytest.fixture(scope="module")
def st_packs(tmp_path_factory):
    """The safetensors packs of the fixtures, changed to what the GGUF files mean (MEANS)"""
    d = tmp_path_factory.mktemp("st")
    out = {}
    for fam in FAMILIES:
        src = str(d / fam)
        shutil.copytree(os.path.join(DATA, fam), src)
        cfg = json.load(open(os.path.join(src, "config.json")))
        cfg.get("text_config", cfg).update(MEANS.get(fam, {}))
        json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
        out[fam] = str(d / f"{fam}.sluice")
        run(["pack", src, "-o", out[fam]])
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_equals_safetensors_pack(family, st_packs, tmp_path):
    """The f32 GGUF's logits over the fixture's 100 positions: those of the safetensors pack of what it means
    (bitwise: the converter's rewrites are permutations, and f32 holds the bf16 weights exactly), so the same
    greedy tokens; the tokenizer and chat template from the GGUF metadata generate text."""
    g = str(tmp_path / "m.gguf")
    write(family, g)
    p = str(tmp_path / "m.sluice")
    run(["pack", g, "-o", p])
    toks = ref_tokens(family)
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(st_packs[family], toks, str(tmp_path / "b.f32"))
    assert a.shape == b.shape and np.isfinite(a).all()
    assert np.array_equal(a, b), f"max relative difference {np.abs(a - b).max() / np.abs(b).max():.3g}"
    V = json.loads(run(["info", p, "--json"]).stdout)["config"]["vocab"]
    r = run(["run", p, "--tokens", ",".join(map(str, toks[:8])), "-n", "16"])
    s = run(["run", st_packs[family], "--tokens", ",".join(map(str, toks[:8])), "-n", "16"])
    assert r.stdout == s.stdout and r.stdout.split(), (r.stdout, s.stdout)
    assert np.array_equal(a.reshape(-1, V).argmax(1), b.reshape(-1, V).argmax(1))
    if PRE[family]:
        c = run(["run", p, "-p", "hi", "--chat", "-n", "4"])
        assert c.returncode == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_q8_gguf_equals_its_dequantisation(family, tmp_path):
    """A Q8_0 GGUF (what the converter quantises) and the F32 GGUF of gguf-py's dequantisation of it give the same
    logits bitwise: the rewrites undone (Gemma 4's fused gate_up halves, Llama 4's gate / up joined, Granite's q / k
    rows and shared gate / up) keep the Q8_0 rows as they are."""
    out = []
    for dq in (False, True):
        g, p = str(tmp_path / f"{dq}.gguf"), str(tmp_path / f"{dq}.sluice")
        write(family, g, q8=True, dequant=dq)
        run(["pack", g, "-o", p])
        out.append(logits(p, ref_tokens(family), str(tmp_path / f"{dq}.f32")))
    info = json.loads(run(["info", str(tmp_path / "False.sluice"), "--json"]).stdout)
    # Kimi Linear's fixture (hidden 24) has no row of whole Q8_0 blocks: its matrices are F16
    assert info["experts"]["dtype"] == ("q8" if text_cfg(family)[0]["hidden_size"] % 32 == 0 else "f16"), info["experts"]
    assert np.isfinite(out[0]).all() and np.array_equal(out[0], out[1]), np.abs(out[0] - out[1]).max()


def test_lfm2_moe_what_the_file_means(st_packs, tmp_path):
    """llama.cpp's lfm2moe file has no routed_scaling_factor (its graph scales by none): the GGUF pack differs from
    the checkpoint's own (1.5 in the fixture), and the layer kinds come from head_count_kv's zeros."""
    g = str(tmp_path / "m.gguf")
    write("lfm2_moe", g)
    p = str(tmp_path / "m.sluice")
    run(["pack", g, "-o", p])
    info = json.loads(run(["info", p, "--json"]).stdout)
    cfg, _ = text_cfg("lfm2_moe")
    s = str(tmp_path / "own.sluice")
    run(["pack", os.path.join(DATA, "lfm2_moe"), "-o", s])
    toks = ref_tokens("lfm2_moe")
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(s, toks, str(tmp_path / "b.f32"))
    assert not np.array_equal(a, b)
    own = json.loads(run(["info", s, "--json"]).stdout)["config"]
    for k in ("layer_types", "layer_moe", "conv_k", "dense_inter", "moe_inter", "norm_topk", "eps"):
        assert info["config"][k] == own[k], k
    assert info["config"]["layer_types"][0] == "linear_attention"
    assert (info["config"]["routed_scale"], own["routed_scale"]) == (1, cfg["routed_scaling_factor"]) != (1, 1)


def pack_like(family, tmp_path, name, over):
    """The safetensors pack of the fixture with its text config's fields changed (over)"""
    src = str(tmp_path / name)
    shutil.copytree(os.path.join(DATA, family), src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    tc = cfg.get("text_config", cfg)
    for k, v in over.items():
        tc[k] = dict(tc[k], **v) if isinstance(v, dict) else v
    json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
    run(["pack", src, "-o", src + ".sluice"])
    return src + ".sluice"


# Llama-3 RoPE scaling as rope_freqs, read back as rope_parameters: three blended pairs (low 1, high 64, 8192
# positions: solved from them); none, as Llama-4-Scout's low = high = 1 makes it (a kept / scaled boundary between
# two pairs), against the HF path given Scout's own parameters (transformers only warns of high == low) and
# against high 2 (the same factors)
@pytest.mark.parametrize("rope,ref", [
    ({"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 64.0, "original_max_position_embeddings": 8192}, None),
    ({"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 512}, None),
    ({"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 512},
     {"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0, "original_max_position_embeddings": 512}),
], ids=["blended", "scout", "scout-as-high-2"])
def test_llama4_rope_freqs_read_back(rope, ref, tmp_path):
    g = str(tmp_path / "m.gguf")
    write("llama4", g, rope=rope)
    p = str(tmp_path / "m.sluice")
    run(["pack", g, "-o", p])
    s = pack_like("llama4", tmp_path, "ref", dict(MEANS["llama4"], rope_parameters=ref or rope))
    toks = ref_tokens("llama4")
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(s, toks, str(tmp_path / "b.f32"))
    assert np.isfinite(a).all() and np.abs(a - b).max() <= 1e-4 * np.abs(b).max(), np.abs(a - b).max()
    V = 256
    assert np.array_equal(a.reshape(-1, V).argmax(1), b.reshape(-1, V).argmax(1))


def test_lfm2_moe_bad_gguf(tmp_path):
    """A conv layer without its kernel, and leading_dense_block_count against the routers, are clear errors."""
    from test_gguf import pack_fails
    g = str(tmp_path / "m.gguf")
    write("lfm2_moe", g, drop=("blk.0.shortconv.conv.weight",))
    pack_fails(tmp_path, g, "tensor 'layers.0.linear_attn.conv1d'")
    write("lfm2_moe", g, keys=lambda w: w.add_leading_dense_block_count(0))
    pack_fails(tmp_path, g, "leading_dense_block_count is 0 but the first router is in layer 1")


def test_kimi_linear_softmax_router_refused(tmp_path):
    """llama.cpp's kimi-linear graph takes its gating function from the file; sluice serves the release's sigmoid
    router only: another one is a clear error."""
    from test_gguf import pack_fails
    g = str(tmp_path / "m.gguf")
    write("kimi_linear", g, keys=lambda w: w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX))
    pack_fails(tmp_path, g, "'kimi-linear.expert_gating_func' is 1; kimi_linear routes with a sigmoid")


def test_bailing_hybrid_unsafe_gate_refused(tmp_path):
    """llama.cpp's bailingmoe3 graph has only the bounded KDA gate (kda.safe_gate); a file saying false is refused."""
    from test_gguf import pack_fails
    g = str(tmp_path / "m.gguf")
    write("bailing_hybrid", g, keys=lambda w: w.add_bool("bailingmoe3.kda.safe_gate", False))
    pack_fails(tmp_path, g, "'bailingmoe3.kda.safe_gate' is false")


def test_deepseek_v4_bad_gguf(tmp_path):
    """What sluice's DeepSeek-V4 cannot be is a clear error: two HCA rates (one hca_rate), limits that differ by layer
    (one swiglu_limit), another router, a hash layer without its tid2eid table."""
    from test_gguf import pack_fails
    g = str(tmp_path / "m.gguf")
    write("deepseek_v4", g, keys=lambda w: w.add_array("deepseek4.attention.compress_ratios", [8, 4, 16]))
    pack_fails(tmp_path, g, "'deepseek4.attention.compress_ratios'[2] = 16: sluice takes 0, 4 (CSA) and one other")
    write("deepseek_v4", g, keys=lambda w: w.add_array("deepseek4.swiglu_clamp_exp", [1.0, 2.0, 1.0]))
    pack_fails(tmp_path, g, "'deepseek4.swiglu_clamp_exp' / '_shexp' differ between layers or experts (layer 1")
    write("deepseek_v4", g, keys=lambda w: w.add_uint32("deepseek4.expert_gating_func", 2))
    pack_fails(tmp_path, g, "'deepseek4.expert_gating_func' is 2; deepseek_v4 routes with sqrt(softplus) (4)")
    write("deepseek_v4", g, drop=("blk.0.ffn_gate_tid2eid.weight",))
    pack_fails(tmp_path, g, "layers.0.mlp.gate.tid2eid")


def test_deepseek_v4_mxfp4_experts(tmp_path):
    """A DeepSeek-V4 GGUF whose routed experts are MXFP4, as llama.cpp's converter writes the release's FP4 experts
    (tests/data/deepseek_v4_w32: hidden and expert widths 32, so every expert row is whole MXFP4 blocks; no
    references of its own: tools/fixtures/deepseek_v4.py): the pack keeps them MXFP4, and its logits are bitwise
    those of the GGUF holding gguf-py's dequantisation of the same experts in F32; against the bf16 safetensors pack
    (unrounded experts) only the FP4 rounding differs."""
    toks = [int(x) for x in np.random.default_rng(28).integers(0, 64, 40)]
    out = []
    for dq in (False, True):
        g, p = str(tmp_path / f"{dq}.gguf"), str(tmp_path / f"{dq}.sluice")
        write("deepseek_v4", g, tokenizer=False, data="deepseek_v4_w32", mxfp4=True, dequant=dq)
        run(["pack", g, "-o", p])
        out.append(logits(p, toks, str(tmp_path / f"{dq}.f32")))
    info = json.loads(run(["info", str(tmp_path / "False.sluice"), "--json"]).stdout)
    assert info["experts"]["dtype"] == "mxfp4", info["experts"]
    assert np.isfinite(out[0]).all() and np.array_equal(out[0], out[1]), np.abs(out[0] - out[1]).max()
    st = str(tmp_path / "st.sluice")
    run(["pack", os.path.join(DATA, "deepseek_v4_w32"), "-o", st])
    b = logits(st, toks, str(tmp_path / "st.f32"))
    rel = np.abs(out[0] - b).max() / np.abs(b).max()
    print("deepseek_v4_w32 MXFP4 experts against bf16: max relative logit difference %.3g" % rel)
    assert 0 < rel < 0.25, rel  # FP4 (2 bits of mantissa) on the experts only


def rename_safetensors(path, pat, rep):
    """The safetensors file at path with its tensors renamed (pat.sub(rep, name)), the data as it is"""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = {pat.sub(rep, k): v for k, v in json.loads(raw[8:8 + n]).items()}
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])


# the release's FP4 experts are repacked to MXFP4 (DeepseekV4Model._write_mxfp4_expert_tensor, which needs their
# .scale); the fixture's bf16 experts are stacked per layer as F32 instead, under the same names
DSV4_PATCH = """
def _dsv4_stack(self, bid, proj, key):
    names = [f"layers.{bid}.ffn.experts.{e}.{proj}.weight" for e in range(self.hparams["n_routed_experts"])]
    data = cb.torch.stack([cb.LazyTorchTensor.to_eager(self.model_tensors[n]()) for n in names]).float().numpy()
    self.gguf_writer.add_tensor(self.format_tensor_name(key, bid), data)
    return names
cd.DeepseekV4Model._write_mxfp4_expert_tensor = _dsv4_stack
"""


def converter_gguf(lc, family, out, tmp):
    """llama.cpp's own convert_hf_to_gguf.py --outtype f32 on the fixture and the tiny tokenizer (its hash names no
    released tokenizer: get_vocab_base_pre answers the family's name)"""
    d = os.path.join(tmp, "hf")
    shutil.copytree(os.path.join(DATA, family), d)
    cfg = json.load(open(os.path.join(d, "config.json")))
    tc = cfg.get("text_config", cfg)
    tc.update(RELEASE.get(family, {}))
    for k in [k for k, v in tc.items() if v is None and k in RELEASE.get(family, {})]:
        del tc[k]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    if family in RELEASE_NAMES:
        rename_safetensors(os.path.join(d, "model.safetensors"), *RELEASE_NAMES[family])
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(DATA, "tiny_tokenizer", f), d)
    code = ("import sys, runpy; sys.path.insert(0, %r); sys.path.insert(1, %r); import conversion.base as cb; "
            "cb.TextModel.get_vocab_base_pre = lambda self, tok: %r; "
            "cb.TextModel.set_vocab = cb.TextModel.set_vocab if %r else (lambda self: None); "
            "import conversion.gemma as cg; cg.Gemma4Model.set_vocab = cb.TextModel.set_vocab; "
            "import conversion.kimi_linear as ck; ck.KimiLinearModel.set_vocab = cb.TextModel.set_vocab; "
            "import conversion.deepseek as cd; cd.DeepseekV4Model.set_vocab = cb.TextModel.set_vocab\n" + DSV4_PATCH +
            "import json; cb.ModelBase.load_hparams = staticmethod(lambda d, m: json.load(open(d / 'config.json'))) "
            "if %r else cb.ModelBase.load_hparams; "
            "sys.argv = ['convert_hf_to_gguf.py', %r, '--outtype', 'f32', '--outfile', %r]; "
            "runpy.run_path(%r, run_name='__main__')") % (lc, os.path.join(lc, "gguf-py"), PRE[family], PRE[family],
                                                          family in RAW_CONFIG, d, out,
                                                          os.path.join(lc, "convert_hf_to_gguf.py"))
    py = os.environ.get("SLUICE_LLAMA_CPP_PYTHON", sys.executable)
    r = subprocess.run([py, "-c", code], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]


@pytest.mark.parametrize("family", FAMILIES)
def test_writer_mirrors_llama_cpp_converter(family, tmp_path):
    """Where llama.cpp's source (SLUICE_LLAMA_CPP) and a Python with torch and transformers
    (SLUICE_LLAMA_CPP_PYTHON, else this one) are at hand: the converter's file has this writer's tensors (names,
    shapes, values) and its model keys (general.* and tokenizer.* aside)."""
    lc = os.environ.get("SLUICE_LLAMA_CPP")
    if not lc or not os.path.exists(os.path.join(lc, "convert_hf_to_gguf.py")):
        pytest.skip("SLUICE_LLAMA_CPP (a llama.cpp source tree) not set")
    if family in NO_CONVERTER:
        pytest.skip(f"llama.cpp's converter cannot convert the {family} fixture (NO_CONVERTER)")
    theirs, ours = str(tmp_path / "c.gguf"), str(tmp_path / "w.gguf")
    converter_gguf(lc, family, theirs, str(tmp_path))
    write(family, ours)
    rt, ro = gguf.GGUFReader(theirs), gguf.GGUFReader(ours)
    tt = {t.name: np.array(t.data) for t in rt.tensors}
    to = {t.name: np.array(t.data) for t in ro.tensors}
    assert sorted(tt) == sorted(to)
    for n in tt:
        assert tt[n].shape == to[n].shape and np.array_equal(tt[n], to[n]), n

    def keys(r):
        return {k: f.contents() for k, f in r.fields.items()
                if not k.startswith(("general.", "tokenizer.", "GGUF."))}
    assert keys(rt) == keys(ro)
