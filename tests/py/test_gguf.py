"""GGUF import (sluice pack model.gguf): GGUF files written at test time by gguf-py's GGUFWriter from the
safetensors fixtures of tests/data, with llama.cpp's tensor names and metadata keys (as its
convert_hf_to_gguf.py writes them, Mixtral's q/k rows permuted as LlamaModel.permute does), then packed
and run. References: the safetensors pack of the same fixture, and gguf-py's own gguf.quants (de)quantize."""
import json
import os
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402

from conftest import ROOT, run  # noqa: E402

DATA = os.path.join(ROOT, "tests/data")


# ---- the fixtures as numpy arrays ------------------------------------------------------------------


def finish(w):
    """A gguf-py writer's header, keys and tensors written, the file closed"""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

def read_safetensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        raw = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr = json.loads(raw[8:8 + n])
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            dt = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[v["dtype"]]
            arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(v["shape"])
            out[k] = (arr, v["dtype"])
    return out


def to_f32(arr, dtype):
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


GGUF_ARCH = {"qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe", "olmoe": "olmoe", "mixtral": "llama",
             "glm4_moe": "glm4moe", "minimax_m2": "minimax-m2", "ernie4_5_moe": "ernie4_5-moe",
             "hunyuan_v1_moe": "hunyuan-moe", "glm_moe_dsa": "glm-dsa", "deepseek_v32": "deepseek32"}

# HF module path (after "model.layers.N.") -> llama.cpp name (gguf-py constants.py TENSOR_NAMES)
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "block_sparse_moe.e_score_correction_bias": "exp_probs_b.bias",  # MiniMax-M2
    "mlp.moe_statics.e_score_correction_bias": "exp_probs_b.bias",  # ERNIE 4.5 ([1, E]: ne [E, 1])
    "mlp.gate.wg.weight": "ffn_gate_inp.weight",  # HunYuan
    "mlp.shared_mlp.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_mlp.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_mlp.down_proj.weight": "ffn_down_shexp.weight",
    "self_attn.query_layernorm.weight": "attn_q_norm.weight",
    "self_attn.key_layernorm.weight": "attn_k_norm.weight",
    # MLA and the DSA indexer (conversion/deepseek.py DeepseekV2Model, DeepseekV32Model; conversion/glm.py GlmMoeDsaModel)
    "self_attn.q_a_proj.weight": "attn_q_a.weight", "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight", "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
    "self_attn.indexer.wq_b.weight": "indexer.attn_q_b.weight", "self_attn.indexer.wk.weight": "indexer.attn_k.weight",
    "self_attn.indexer.k_norm.weight": "indexer.k_norm.weight", "self_attn.indexer.k_norm.bias": "indexer.k_norm.bias",
    "self_attn.indexer.weights_proj.weight": "indexer.proj.weight",
}
PARTS = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps",
         "w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}


def llama_permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute"""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(family, path, qtype=None, extra=None, drop=(), tokenizer=None, dequant=False, split=0):
    """The fixture tests/data/<family> as a GGUF: F-types as stored (qtype None), or every matrix whose rows
    are whole blocks quantised to qtype by gguf-py (dequant: and written back as F32, gguf-py's dequantisation).
    Returns {gguf name: (numpy array as written, ggml type)}."""
    d = os.path.join(DATA, family)
    cfg = json.load(open(os.path.join(d, "config.json")))
    arch = GGUF_ARCH[family]
    st = read_safetensors(d)
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split)
    L = cfg["num_hidden_layers"]
    heads, kvh = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
    E = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("moe_num_experts")
    used = cfg.get("num_experts_per_tok") or cfg.get("moe_k") or cfg.get("moe_topk")
    used = used[0] if isinstance(used, list) else used
    rope = cfg.get("rope_parameters") or {}
    nextn = cfg.get("num_nextn_predict_layers", 0) if family == "glm4_moe" else 0
    w.add_block_count(L + nextn)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kvh)
    w.add_key_length(hd)
    w.add_value_length(hd)
    base = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if rope.get("rope_type") == "dynamic":  # HunYuan: conversion/hunyuan.py writes the alpha-stretched base
        base = base * rope["alpha"] ** (hd / (hd - 2))
    w.add_rope_freq_base(base)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(used)
    if cfg.get("moe_intermediate_size"):
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if family == "qwen2_moe":
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if family in ("qwen3_moe", "qwen2_moe", "olmoe"):
        # llama.cpp's qwen3moe renormalises unconditionally; these fixtures do not (norm_topk_prob false)
        w.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", False)))
    if family == "mixtral":
        w.add_rope_dimension_count(hd)
    if family == "minimax_m2":  # conversion/minimax.py MiniMaxM2Model
        w.add_expert_feed_forward_length(cfg["intermediate_size"])
        w.add_rope_dimension_count(int(hd * rope.get("partial_rotary_factor", 1.0)))
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if family == "ernie4_5_moe":  # conversion/ernie.py Ernie4_5MoeModel
        w.add_leading_dense_block_count(cfg["moe_layer_start_index"])
        w.add_interleave_moe_layer_step(cfg["moe_layer_interval"])
        w.add_expert_shared_count(cfg["moe_num_shared_experts"])
    if family in ("glm_moe_dsa", "deepseek_v32"):  # MLA as llama.cpp's deepseek2 runs it, the indexer's keys
        nope, rdim, vdim, kvl = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
        w.add_head_count_kv(1)
        w.add_key_length(kvl + rdim)
        w.add_value_length(kvl)
        w.add_key_length_mla(nope + rdim)
        w.add_value_length_mla(vdim)
        w.add_q_lora_rank(cfg["q_lora_rank"])
        w.add_kv_lora_rank(kvl)
        w.add_rope_dimension_count(rdim)
        if rope.get("rope_type") == "yarn":
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(rope["factor"])
            w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
            w.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])
        w.add_expert_shared_count(cfg["n_shared_experts"])
        w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
        w.add_expert_weights_scale(cfg["routed_scaling_factor"])
        w.add_expert_weights_norm(cfg["norm_topk_prob"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(cfg["n_group"])
        w.add_expert_group_used_count(cfg["topk_group"])
        w.add_indexer_head_count(cfg["index_n_heads"])
        w.add_indexer_key_length(cfg["index_head_dim"])
        w.add_indexer_top_k(cfg["index_topk"])
    if family == "hunyuan_v1_moe":  # conversion/hunyuan.py HunYuanMoEModel
        w.add_expert_feed_forward_length(cfg["intermediate_size"])
        w.add_expert_shared_count(1)
    if family == "glm4_moe":
        w.add_rope_dimension_count(int(hd * cfg.get("partial_rotary_factor", 0.5)))
        w.add_expert_shared_count(cfg["n_shared_experts"])
        w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
        w.add_expert_weights_scale(cfg["routed_scaling_factor"])
        w.add_expert_weights_norm(cfg["norm_topk_prob"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(cfg["n_group"])
        w.add_expert_group_used_count(cfg["topk_group"])
        w.add_nextn_predict_layers(nextn)
    for k, v in (extra or {}).items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_string(k, v)
    if tokenizer:
        tokenizer(w)
    written = {}
    experts = {}

    def add(name, arr, dtype):
        if name in drop:
            return
        if qtype is not None and arr.ndim >= 2 and arr.shape[-1] % 32 == 0:
            f = to_f32(arr, dtype)
            q = gguf.quants.quantize(f, qtype)
            if dequant:
                dq = np.ascontiguousarray(gguf.quants.dequantize(q, qtype).astype(np.float32))
                w.add_tensor(name, dq)
                written[name] = (dq, QT.F32)
            else:
                w.add_tensor(name, q, raw_dtype=qtype)
                written[name] = (q, qtype)
        elif dtype == "BF16":
            w.add_tensor(name, arr, raw_shape=arr.shape, raw_dtype=QT.BF16)
            written[name] = (arr, QT.BF16)
        else:
            w.add_tensor(name, arr)
            written[name] = (arr, QT.F16 if arr.dtype == np.float16 else QT.F32)

    for k in sorted(st):
        arr, dtype = st[k]
        if k == "model.embed_tokens.weight":
            add("token_embd.weight", arr, dtype)
        elif k == "model.norm.weight":
            add("output_norm.weight", arr, dtype)
        elif k == "lm_head.weight":
            add("output.weight", arr, dtype)
        else:
            parts = k.split(".")
            l, rest = int(parts[2]), ".".join(parts[3:])
            if ".experts." in rest:
                e, part = int(parts[-3]), parts[-2]
                experts.setdefault((l, PARTS[part]), {})[e] = (arr, dtype)
                continue
            if rest == "self_attn.kv_b_proj.weight":  # split per head: attn_k_b [h][kv_lora][nope], attn_v_b [h][v][kv_lora]
                nope, vdim = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
                kvb = arr.reshape(heads, nope + vdim, arr.shape[-1])
                add(f"blk.{l}.attn_k_b.weight", np.ascontiguousarray(kvb[:, :nope, :].transpose(0, 2, 1)), dtype)
                add(f"blk.{l}.attn_v_b.weight", np.ascontiguousarray(kvb[:, nope:, :]), dtype)
                continue
            if family == "glm4_moe" and rest == "post_attention_layernorm.weight":
                name = "post_attention_norm.weight"
            else:
                name = LAYER_NAMES[rest]
            if family == "mixtral" and rest == "self_attn.q_proj.weight":
                arr = llama_permute(arr, heads)
            if family == "mixtral" and rest == "self_attn.k_proj.weight":
                arr = llama_permute(arr, kvh)
            add(f"blk.{l}.{name}", arr, dtype)
    for (l, part), es in sorted(experts.items()):
        dtype = es[0][1]
        add(f"blk.{l}.{part}.weight", np.stack([es[e][0] for e in range(E)]), dtype)
    finish(w)
    return written


def ref_tokens(family):
    return json.load(open(os.path.join(DATA, family, "ref.json")))["tokens"]


def logits(model, toks, out):
    """--exact: q8/q4 matrices multiply f32 activations (the reference arithmetic; the default int8
    activations round them, docs/QUANT.md)."""
    run(["logits", "-m", model, "--exact", "--tokens", ",".join(map(str, toks)), "--out", out])
    return np.fromfile(out, dtype=np.float32)


FAMILIES = ["qwen3_moe", "qwen2_moe", "olmoe", "mixtral", "glm4_moe", "minimax_m2", "ernie4_5_moe", "hunyuan_v1_moe",
            "glm_moe_dsa", "deepseek_v32"]


@pytest.fixture(scope="module")
def st_packs(tmp_path_factory):
    d = tmp_path_factory.mktemp("st")
    out = {}
    for fam in FAMILIES:
        p = str(d / f"{fam}.sluice")
        run(["pack", os.path.join(DATA, fam), "-o", p])
        out[fam] = p
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_float_gguf_equals_safetensors_pack(family, st_packs, tmp_path):
    """F32 / F16 / BF16 GGUF (the fixture's own dtype): logits bitwise equal to the safetensors pack's."""
    g = str(tmp_path / "m.gguf")
    write_gguf(family, g)
    p = str(tmp_path / "m.sluice")
    run(["pack", g, "-o", p])
    toks = ref_tokens(family)
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(st_packs[family], toks, str(tmp_path / "b.f32"))
    assert a.shape == b.shape and np.array_equal(a, b), f"max |diff| {np.abs(a - b).max()}"


def per_token_rel(x, ref, vocab):
    x, ref = x.reshape(-1, vocab), ref.reshape(-1, vocab)
    return np.abs(x - ref).max(1) / np.abs(ref).max(1)


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q4_0], ids=["Q8_0", "Q4_0"])
@pytest.mark.parametrize("family", FAMILIES)
def test_quantised_gguf(family, qtype, st_packs, tmp_path):
    """Q8_0 / Q4_0 GGUF: kept as q8 / q4 group 32 with f16 scales (lossless: docs/FORMAT.md). Its logits equal,
    bitwise, those of an F32 GGUF holding gguf-py's dequantisation of the same blocks. Against the fixture's
    own weights the error is the quantisation's: on these random-weight fixtures (where a routing flip moves
    a token's logits a lot) the median per-token error max|d logit| / max|logit| is within 2.5x that of the
    fixture packed with sluice's own mode of the same width (--quant q8|q4 --group 32 --scale-f16); measured:
    Q8_0 1.3-4.4 % vs q8 1.3-3.8 %, Q4_0 20-54 % vs q4 19-47 %."""
    q = "q8" if qtype == QT.Q8_0 else "q4"
    g = str(tmp_path / "q.gguf")
    write_gguf(family, g, qtype=qtype)
    p = str(tmp_path / "q.sluice")
    run(["pack", g, "-o", p])
    info = json.loads(run(["info", p, "--json"]).stdout)
    assert q in info["backbone_dtypes"], info["backbone_dtypes"]
    if family in ("qwen3_moe", "mixtral"):  # expert widths of whole blocks (the others keep f32 experts)
        assert info["experts"]["dtype"] == q
    dq = str(tmp_path / "dq.gguf")
    write_gguf(family, dq, qtype=qtype, dequant=True)
    pd = str(tmp_path / "dq.sluice")
    run(["pack", dq, "-o", pd])
    toks = ref_tokens(family)
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(pd, toks, str(tmp_path / "b.f32"))
    assert np.array_equal(a, b), f"max |diff| {np.abs(a - b).max()}"
    r = run(["verify", p, "--source", g])  # every tensor re-derived from the GGUF, byte for byte
    assert b"every tensor equals the source" in r.stdout + r.stderr
    ref = logits(st_packs[family], toks, str(tmp_path / "r.f32"))
    ps = str(tmp_path / "s.sluice")
    run(["pack", os.path.join(DATA, family), "-o", ps, "--quant", q, "--group", "32", "--scale-f16"])
    s = logits(ps, toks, str(tmp_path / "s.f32"))
    vocab = info["config"]["vocab"]
    e_gguf, e_own = np.median(per_token_rel(a, ref, vocab)), np.median(per_token_rel(s, ref, vocab))
    assert 0 < e_gguf < 2.5 * e_own, (e_gguf, e_own)


# ---- bad input: one clear error, no output file --------------------------------------------------------

def pack_fails(tmp_path, gpath, needle):
    out = str(tmp_path / "bad.sluice")
    r = run(["pack", gpath, "-o", out], check=False)
    err = r.stderr.decode()
    assert r.returncode != 0 and needle in err, err
    assert "Traceback" not in err and len(err.strip().split("\n")) <= 2, err
    assert not [f for f in os.listdir(tmp_path) if f.startswith("bad.sluice")]
    return err


def test_bad_gguf(tmp_path):
    g = str(tmp_path / "m.gguf")
    write_gguf("qwen3_moe", g)
    raw = open(g, "rb").read()
    b = str(tmp_path / "b.gguf")
    for n in (20, 40, 3000):  # truncated in the counts, the metadata, the tensor infos
        open(b, "wb").write(raw[:n])
        pack_fails(tmp_path, b, "truncated")
    open(b, "wb").write(raw[: len(raw) - 1000])  # the last tensor runs past the end
    pack_fails(tmp_path, b, "runs past the end")
    r = gguf.GGUFReader(g)
    t = r.tensors[0]
    # the type field of the first tensor info: right after its dims (name, n_dims, dims, type, offset)
    pos = raw.index(t.name.encode()) + len(t.name) + 4 + 8 * len(t.shape)
    bad = bytearray(raw)
    bad[pos:pos + 4] = struct.pack("<I", 77)
    open(b, "wb").write(bad)
    assert "unknown type 77" in pack_fails(tmp_path, b, t.name)
    bad = bytearray(raw)
    bad[pos:pos + 4] = struct.pack("<I", 9)  # Q8_1: known, not imported
    open(b, "wb").write(bad)
    assert "supported: F32, F16" in pack_fails(tmp_path, b, f"tensor '{t.name}' has GGUF type Q8_1, which sluice does not import")
    bad = bytearray(raw)
    i = raw.index(b"qwen3moe")
    bad[i:i + 8] = b"qwen9moe"
    open(b, "wb").write(bad)
    msg = pack_fails(tmp_path, b, "GGUF architecture 'qwen9moe' is not supported")
    assert "supported: " in msg and "qwen3moe" in msg and "qwen2moe" in msg, msg
    write_gguf("qwen3_moe", b, extra={}, drop=("blk.0.attn_q.weight",))
    pack_fails(tmp_path, b, "self_attn.q_proj")
    be = bytearray(raw)
    be[4:8] = struct.pack(">I", 3)
    open(b, "wb").write(be)
    pack_fails(tmp_path, b, "big-endian")
    # a missing metadata key
    d = str(tmp_path / "k.gguf")
    w = gguf.GGUFWriter(d, "qwen3moe")
    w.add_embedding_length(64)
    w.add_tensor("token_embd.weight", np.zeros((256, 64), dtype=np.float32))
    finish(w)
    pack_fails(tmp_path, d, "missing metadata key 'qwen3moe.block_count'")


# ---- every imported type, tensor by tensor -------------------------------------------------------------

def random_blocks(qtype, rows, cols, rng):
    """Random but valid blocks of qtype for a [rows, cols] matrix: random bytes, with every f16 scale finite
    (and small) and every MXFP4 exponent in range."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(rows * cols // bs, ts), dtype=np.uint8)

    def f16(n):
        return (rng.standard_normal(n) * 0.02).astype(np.float16).view(np.uint8).reshape(n, 2)
    n = b.shape[0]
    if qtype in (QT.Q8_0, QT.Q4_0, QT.Q5_0):
        b[:, 0:2] = f16(n)
    elif qtype in (QT.Q4_1, QT.Q5_1):
        b[:, 0:2], b[:, 2:4] = f16(n), f16(n)
    elif qtype in (QT.Q4_K, QT.Q5_K):
        b[:, 0:2], b[:, 2:4] = f16(n), f16(n)
    elif qtype == QT.Q6_K:
        b[:, 208:210] = f16(n)
    elif qtype == QT.Q2_K:
        b[:, 80:82], b[:, 82:84] = f16(n), f16(n)
    elif qtype == QT.Q3_K:
        b[:, 108:110] = f16(n)
    elif qtype in (QT.IQ4_NL, QT.IQ4_XS, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S):
        b[:, 0:2] = f16(n)
    elif qtype == QT.IQ1_M:  # its f16 d: the top nibbles of the four u16 scales at 48
        d = f16(n).view(np.uint16).reshape(n)
        for i in range(4):
            b[:, 49 + 2 * i] = (b[:, 49 + 2 * i] & 0x0F) | (((d >> (4 * i)) & 0xF) << 4).astype(np.uint8)
    elif qtype == QT.MXFP4:
        b[:, 0] = rng.integers(100, 135, size=n, dtype=np.uint8)
    return b.reshape(rows, cols // bs * ts)


# the container dtypes that hold GGUF blocks as they are
KQ = {"q2_k": QT.Q2_K, "q3_k": QT.Q3_K, "q4_k": QT.Q4_K, "q5_k": QT.Q5_K, "q6_k": QT.Q6_K, "iq4_nl": QT.IQ4_NL,
      "iq4_xs": QT.IQ4_XS, "iq2_xxs": QT.IQ2_XXS, "iq2_xs": QT.IQ2_XS, "iq2_s": QT.IQ2_S, "iq3_xxs": QT.IQ3_XXS,
      "iq3_s": QT.IQ3_S, "iq1_s": QT.IQ1_S, "iq1_m": QT.IQ1_M, "q5_0": QT.Q5_0, "q5_1": QT.Q5_1}


def container(path):
    raw = open(path, "rb").read()
    mo, ml = struct.unpack("<QQ", raw[24:40])
    return raw, json.loads(raw[mo:mo + ml])


def container_f32(raw, t, base=0):
    """A tensor of the container as f32, by docs/FORMAT.md and src/quant/quant.h (codes | scales | biases;
    w = scale * q + bias, the product rounded before the sum as gguf-py does)."""
    shape = t["shape"]
    rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
    off = base + t["offset"]
    dt = t["dtype"]
    if dt in ("f32", "f16", "bf16"):
        n = rows * cols
        if dt == "f32":
            return np.frombuffer(raw, np.float32, n, off).reshape(rows, cols)
        if dt == "f16":
            return np.frombuffer(raw, np.float16, n, off).astype(np.float32).reshape(rows, cols)
        return (np.frombuffer(raw, np.uint16, n, off).astype(np.uint32) << 16).view(np.float32).reshape(rows, cols)
    if dt in KQ:  # the GGUF rows as they are (src/quant/kquant.h): gguf-py decodes them
        qt = KQ[dt]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        b = np.frombuffer(raw, np.uint8, rows * cols // bs * ts, off).reshape(rows, -1)
        return gguf.quants.dequantize(b, qt).astype(np.float32).reshape(rows, cols)
    if dt == "mxfp4":  # codes [rows][cols/2] (even column low), then E8M0 scales [rows][cols/32]
        c = np.frombuffer(raw, np.uint8, rows * cols // 2, off)
        c = np.stack([c & 15, c >> 4], axis=-1).reshape(rows, cols)
        e = np.frombuffer(raw, np.uint8, rows * cols // 32, off + rows * cols // 2).reshape(rows, -1)
        vals = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
        sc = np.ldexp(np.float32(1), e.astype(np.int32) - 127).astype(np.float32)
        return vals[c] * np.repeat(sc, 32, axis=1)
    bits, g = (8 if dt == "q8" else 4), t["group"]
    cb = rows * cols * bits // 8
    c = np.frombuffer(raw, np.uint8, cb, off)
    if bits == 4:
        c = np.stack([c & 15, c >> 4], axis=-1).reshape(-1)
    q = c.reshape(rows, cols).astype(np.float32)
    sdt = {"f32": np.float32, "f16": np.float16, "bf16": None}[t["scale_dtype"]]
    ng = rows * cols // g
    s = np.frombuffer(raw, sdt, ng, off + cb).astype(np.float32).reshape(rows, -1)
    bi = np.frombuffer(raw, sdt, ng, off + cb + ng * np.dtype(sdt).itemsize).astype(np.float32).reshape(rows, -1)
    return np.repeat(s, g, axis=1) * q + np.repeat(bi, g, axis=1)


ALL_TYPES = [QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.MXFP4, QT.Q2_K,
             QT.Q3_K, QT.IQ4_NL, QT.IQ4_XS]


def write_typed_model(path, types, rng, dequant=False):
    """A qwen3moe of 256-wide rows (the K-quants' block), 2 layers of 4 experts, one type per tensor from
    `types` (cycled), random valid blocks. Returns {gguf name: (f32 dequantisation by gguf-py, type)}."""
    H, I, V, E, L, HD = 256, 256, 256, 4, 2, 128
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_block_count(L)
    w.add_context_length(512)
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_expert_feed_forward_length(I)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(E)
    w.add_expert_used_count(2)
    out = {}
    k = [0]

    def mat(name, shape):
        qt = types[k[0] % len(types)]
        k[0] += 1
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        if qt in (QT.F32, QT.F16, QT.BF16):
            f = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
            data = f.astype(np.float16) if qt == QT.F16 else f
            if qt == QT.BF16:
                data = (f.view(np.uint32) >> 16).astype(np.uint16)
            deq = gguf.quants.dequantize(data.view(np.uint8), qt) if qt == QT.BF16 else data.astype(np.float32)
        else:
            data = random_blocks(qt, rows, cols, rng)
            deq = gguf.quants.dequantize(data, qt)
        deq = deq.reshape(shape).astype(np.float32)
        if dequant:
            w.add_tensor(name, np.ascontiguousarray(deq))
        elif qt in (QT.F32, QT.F16):
            w.add_tensor(name, data.reshape(shape))
        else:
            w.add_tensor(name, data.reshape(*shape[:-1], -1), raw_dtype=qt)
        out[name] = (deq, qt)

    def vec(name, n):
        v = (1 + rng.standard_normal(n) * 0.1).astype(np.float32)
        w.add_tensor(name, v)
        out[name] = (v, QT.F32)
    mat("token_embd.weight", [V, H])
    vec("output_norm.weight", H)
    mat("output.weight", [V, H])
    for l in range(L):
        vec(f"blk.{l}.attn_norm.weight", H)
        vec(f"blk.{l}.ffn_norm.weight", H)
        vec(f"blk.{l}.attn_q_norm.weight", HD)
        vec(f"blk.{l}.attn_k_norm.weight", HD)
        mat(f"blk.{l}.attn_q.weight", [2 * HD, H])
        mat(f"blk.{l}.attn_k.weight", [HD, H])
        mat(f"blk.{l}.attn_v.weight", [HD, H])
        mat(f"blk.{l}.attn_output.weight", [H, 2 * HD])
        mat(f"blk.{l}.ffn_gate_inp.weight", [E, H])
        for p in ("gate", "up", "down"):
            mat(f"blk.{l}.ffn_{p}_exps.weight", [E, I, H])
    finish(w)
    return out


def same(a, b):
    """Bit for bit, but for the sign of zero: ggml's q * d is -0 for q = 0 and d < 0, the container's
    scale * code + bias (code 128, bias -128 d) is +0."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(np.where(a == 0, 0, a).view(np.uint32),
                                                 np.where(b == 0, 0, b).view(np.uint32))


CANON = {"token_embd.weight": "embed_tokens", "output.weight": "lm_head", "attn_q.weight": "self_attn.q_proj",
         "attn_k.weight": "self_attn.k_proj", "attn_v.weight": "self_attn.v_proj",
         "attn_output.weight": "self_attn.o_proj", "ffn_gate_inp.weight": "mlp.gate"}


# the activation form llama.cpp multiplies a type with (ggml-cpu.c vec_dot_type), which the q8 / q4 it is held as
# records in its entry ("act": tn_mat.act; docs/FORMAT.md)
# (Q5_0 / Q5_1 are kept native, "q5_0" / "q5_1": their kernels read that form without an entry saying so)
ACT = {QT.Q8_0: "q8_0", QT.Q4_0: "q8_0", QT.Q4_1: "q8_1"}


def check_tensors(p, ref):
    """Every matrix of container p decoded by its documented layout against ref (write_typed_model's): the
    backbone's and every expert's, and its entry's "act"; returns how many were compared."""
    raw, man = container(p)
    tens = {t["name"]: t for t in man["tensors"]}
    checked = 0
    for name, (deq, qt) in ref.items():
        if name.startswith("blk.") and "_exps" in name:
            continue
        rel = name.split(".", 2)[2] if name.startswith("blk.") else name
        if rel not in CANON:
            continue
        cname = (f"layers.{name.split('.')[1]}." if name.startswith("blk.") else "") + CANON[rel]
        got = container_f32(raw, tens[cname])
        assert same(got, deq.reshape(got.shape)), (name, qt.name, tens[cname]["dtype"])
        assert tens[cname].get("act") == ACT.get(qt), (name, qt.name, tens[cname])
        checked += 1
    ex = man["experts"]
    for s, l in enumerate(ex["layers"]):
        # one layout for every layer, or each layer its own (experts.slots: types that differ by layer)
        sl = ex["slots"][s] if "slots" in ex else {"offset": s * ex["n_experts"] * ex["stride"], "stride": ex["stride"],
                                                   "parts": ex["parts"]}
        for pi, part in enumerate(("gate", "up", "down")):
            deq, qt = ref[f"blk.{l}.ffn_{part}_exps.weight"]
            assert sl["parts"][pi].get("act") == ACT.get(qt), (l, part, qt.name, sl["parts"][pi])
            for e in range(deq.shape[0]):
                base = ex["offset"] + sl["offset"] + e * sl["stride"]
                got = container_f32(raw, sl["parts"][pi], base)
                assert same(got, deq[e]), (l, e, part, qt.name)
                checked += 1
    return checked


@pytest.mark.parametrize("rot", range(3))
def test_every_type_reads_back_as_gguf_py_dequantises(rot, tmp_path):
    """Every imported type (random valid blocks where gguf-py cannot quantise), tensor by tensor: the
    container's bytes, decoded by its documented layout, equal gguf.quants.dequantize bit for bit (but for
    the sign of zero); routed experts too (a part whose type differs by layer keeps each layer's type: one
    block layout per layer, experts.slots); and the model's logits equal those of an F32 GGUF of gguf-py's
    dequantisation, bitwise."""
    rng = np.random.default_rng(7 + rot)
    types = ALL_TYPES[rot:] + ALL_TYPES[:rot]
    g = str(tmp_path / "t.gguf")
    ref = write_typed_model(g, types, rng)
    assert {qt for _, qt in ref.values()} >= set(ALL_TYPES)
    p = str(tmp_path / "t.sluice")
    run(["pack", g, "-o", p])
    checked = check_tensors(p, ref)
    assert checked == 2 + 2 * 5 + 2 * 3 * 4
    dq = str(tmp_path / "dq.gguf")
    write_typed_model(dq, types, np.random.default_rng(7 + rot), dequant=True)
    pd = str(tmp_path / "dq.sluice")
    run(["pack", dq, "-o", pd])
    toks = list(range(0, 256, 7))
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(pd, toks, str(tmp_path / "b.f32"))
    assert np.isfinite(a).all() and np.array_equal(a, b), np.abs(a - b).max()
    r = run(["verify", p, "--source", g])  # every tensor and expert part re-derived from the GGUF, byte for byte
    assert b"every tensor equals the source" in r.stdout + r.stderr
    # streamed through a cache of a few blocks, O_DIRECT reads of each layer's own stride; and resident
    for opts in (["--cache", "600K", "--io", "direct"], ["--resident"]):
        out = str(tmp_path / "c.f32")
        run(["logits", "-m", p, "--exact", "--tokens", ",".join(map(str, toks)), "--out", out] + opts)
        assert np.array_equal(np.fromfile(out, dtype=np.float32), a), opts


KQ_TYPES = [QT.Q4_K, QT.Q6_K, QT.Q5_K, QT.Q3_K, QT.Q2_K, QT.IQ4_XS, QT.IQ4_NL, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S,
            QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S, QT.IQ1_M, QT.Q5_0, QT.Q5_1]


@pytest.mark.parametrize("qt", KQ_TYPES, ids=[t.name for t in KQ_TYPES])
def test_kquant_types_kept_native(qt, tmp_path):
    """A model whose every matrix is one k-quant / IQ4 type (random valid blocks) packs keeping the type
    (backbone and experts; the container about the GGUF's size), every tensor decodes bit for bit as gguf-py's
    dequantize, the exact kernels' logits equal those of an F32 GGUF of that dequantisation bitwise, and the
    default int8 activations stay close to them."""
    rng = np.random.default_rng(11)
    g = str(tmp_path / "k.gguf")
    ref = write_typed_model(g, [qt], rng)
    p = str(tmp_path / "k.sluice")
    run(["pack", g, "-o", p])
    info = json.loads(run(["info", p, "--json"]).stdout)
    name = qt.name.lower()
    assert set(info["backbone_dtypes"]) <= {name, "f32"} and name in info["backbone_dtypes"], info["backbone_dtypes"]
    assert info["experts"]["dtype"] == name, info["experts"]
    gs, cs = os.path.getsize(g), os.path.getsize(p)
    assert cs < 1.05 * gs + 64 * 1024, (gs, cs)  # headers, alignment and the tokenizer-free blobs only
    assert check_tensors(p, ref) == 2 + 2 * 5 + 2 * 3 * 4
    dq = str(tmp_path / "dq.gguf")
    write_typed_model(dq, [qt], np.random.default_rng(11), dequant=True)
    pd = str(tmp_path / "dq.sluice")
    run(["pack", dq, "-o", pd])
    toks = list(range(0, 256, 7))
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(pd, toks, str(tmp_path / "b.f32"))
    assert np.isfinite(a).all() and np.array_equal(a, b), np.abs(a - b).max()
    out = str(tmp_path / "i8.f32")
    run(["logits", "-m", p, "--tokens", ",".join(map(str, toks)), "--out", out])
    c = np.fromfile(out, dtype=np.float32)
    rel = per_token_rel(c, a, 256)
    # llama.cpp's q8_K activations (one scale per 256 values; IQ4_NL's, Q5_0's q8_0 and Q5_1's q8_1 per 32) on random
    # weights whose logits nearly cancel: medians 0.025-0.063 over the 14 types of 256-blocks
    assert np.median(rel) < 0.1, rel


@pytest.mark.parametrize("q2", ["q2", "q2v"])
def test_q2_experts_packed_from_f32(q2, tmp_path):
    """sluice's own 2-bit experts (docs/QUANT.md "q2 and q2v": blocks of 128 rotated, 4 Lloyd-Max levels or the E8P
    lattice, 2.125 bits) packed from an F32 GGUF of 256-wide rows: the experts are q2 / q2v (the rest q8), verify
    --source re-derives every byte, the expert blocks are 2.125 / 32 of the f32 ones, and the logits (exact and int8
    kernels) stay near the f32 pack's."""
    rng = np.random.default_rng(12)
    g = str(tmp_path / "f.gguf")
    write_typed_model(g, [QT.F32], rng)
    pf, p2 = str(tmp_path / "f.sluice"), str(tmp_path / "q2.sluice")
    run(["pack", g, "-o", pf])
    run(["pack", g, "-o", p2, "--quant-experts", q2, "--quant-backbone", "q8"])
    run(["verify", p2, "--source", g])
    info, inf = json.loads(run(["info", p2, "--json"]).stdout), json.loads(run(["info", pf, "--json"]).stdout)
    assert info["experts"]["dtype"] == q2 and set(info["experts"]["part_dtypes"]["down_proj"]) == {q2}, info["experts"]
    assert info["experts"]["block_bytes"] * 32 < inf["experts"]["block_bytes"] * 2.2, (info["experts"], inf["experts"])
    toks = list(range(0, 256, 7))
    f = logits(pf, toks, str(tmp_path / "f.f32"))
    a = logits(p2, toks, str(tmp_path / "a.f32"))
    out = str(tmp_path / "i8.f32")
    run(["logits", "-m", p2, "--tokens", ",".join(map(str, toks)), "--out", out])
    c = np.fromfile(out, dtype=np.float32)
    ra, rc = per_token_rel(a, f, 256), per_token_rel(c, a, 256)
    print(q2, "vs f32 median", np.median(ra), "int8 vs exact median", np.median(rc))
    assert np.isfinite(a).all() and np.isfinite(c).all()
    assert np.median(ra) < 0.6 and np.median(rc) < 0.1, (ra, rc)  # measured q2 0.42, 0.015; q2v 0.35, 0.014


# ---- tokenizer from GGUF metadata -------------------------------------------------------------------------

def gguf_tokenizer_writer(tok_dir, pre):
    """What convert_hf_to_gguf.py's _set_vocab_gpt2 writes for a HF tokenizer.json: tokens by id (added ones
    included), token types (CONTROL for special added tokens, USER_DEFINED for the others), merges "a b",
    the pre-tokenizer name, special ids and the chat template."""
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json")))
    tc = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))
    inv = {i: t for t, i in tj["model"]["vocab"].items()}
    types = {i: gguf.TokenType.NORMAL for i in inv}
    for a in tj["added_tokens"]:
        inv[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    n = max(inv) + 1
    toks = [inv.get(i, f"[PAD{i}]") for i in range(n)]
    tt = [types.get(i, gguf.TokenType.UNUSED) for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    ids = {t: i for i, t in enumerate(toks)}

    def add(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(toks)
        w.add_token_types(tt)
        w.add_token_merges(merges)
        eos = tc.get("eos_token")
        eos = eos["content"] if isinstance(eos, dict) else eos
        if eos in ids:
            w.add_eos_token_id(ids[eos])
        if tc.get("chat_template"):
            w.add_chat_template(tc["chat_template"])
    return add


def tokenize_batch(model, texts):
    r = run(["tokenize", "-m", model, "--batch"], input=json.dumps(texts).encode())
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1
    return [[int(x) for x in line.split()] for line in lines[:-1]]


TOK_TEXTS = [
    "Hello, world! It's 2024-06-01T12:34:56Z and the price is $12.50 (or €11,30).",
    "1234567890 3.14159 a1b2c3 100,000,000", "   leading spaces\tand tabs\t\there", "trailing   \n\n\nnewlines\r\n",
    "你好，世界！日本語のテキスト。한국어 문장. Привет, мир! مرحبا بالعالم", "café résumé naïve e\u0301 A\u030a \u212b",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 flags 🇺🇸", "def f(x):\n\tif x > 0:\n\t\treturn x * 2\n", "I'm sure they'll say it's what we've done",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nanswer", "", " ", "\n",
]


def test_tokenizer_from_gguf_metadata_matches_hf(qwen_dir, tmp_path):
    """Qwen3's tokenizer written as GGUF metadata (pre-tokenizer qwen2): the packed model's tokenizer gives
    HF tokenizers' ids on text with unicode, digits, spaces and newlines, and keeps the chat template."""
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(qwen_dir, "tokenizer.json"))
    g = str(tmp_path / "t.gguf")
    write_gguf("qwen3_moe", g, tokenizer=gguf_tokenizer_writer(qwen_dir, "qwen2"))
    p = str(tmp_path / "t.sluice")
    run(["pack", g, "-o", p])
    texts = TOK_TEXTS + [" ".join(TOK_TEXTS) * 3, open(os.path.join(ROOT, "src/import/gguf.c")).read()]
    assert tokenize_batch(p, texts) == [hf.encode(t).ids for t in texts]
    info = json.loads(run(["info", p, "--json"]).stdout)
    names = [b["name"] if isinstance(b, dict) else b for b in info["embedded_files"]]
    assert "tokenizer.json" in names and "tokenizer_config.json" in names
    tmpl = json.load(open(os.path.join(qwen_dir, "tokenizer_config.json")))["chat_template"]
    assert tmpl.encode() in open(p, "rb").read() or json.dumps(tmpl)[1:-1].encode() in open(p, "rb").read()


def hf_with_pre(tok_dir, regexes, nfc, ignore_merges=False):
    """HF tokenizers' Tokenizer of tok_dir's vocabulary and merges with the pre-tokenizer a GGUF's tokenizer.ggml.pre
    names: those Split regexes in turn, then ByteLevel without its own regex (and NFC or no normalizer)."""
    from tokenizers import Tokenizer
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json")))
    tj["normalizer"] = {"type": "NFC"} if nfc else None
    tj["model"]["ignore_merges"] = ignore_merges
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes] + [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    return Tokenizer.from_str(json.dumps(tj))


# The HF originals of the pre-tokenizers llama.cpp names qwen35 (Qwen3.5), gpt-4o (gpt-oss's o200k) and lfm2 (LFM2,
# llama.cpp's LLAMA3 type: Llama 3's regex, merges ignored), from the models' tokenizer.json (llama.cpp
# src/llama-vocab.cpp quotes them beside its adaptations)
PRE_REGEX = {
    "lfm2": ["(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
             "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
    "qwen35": ["(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
    "gpt-4o": ["[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
               "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
               "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
    # Kimi K2 / Kimi Linear: tokenization_kimi.py's tiktoken pattern as it is (HF tokenizers' Oniguruma has its
    # class intersections; sluice's PCRE2 rewrite of them: src/import/gguf_tokenizer.c)
    "kimi-k2": ["[\\p{Han}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
                "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?"
                "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
                "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
}


@pytest.mark.parametrize("pre", ["qwen35", "gpt-4o", "lfm2", "llama4", "kimi-k2"])
def test_tokenizer_pre_types_of_the_new_families(pre, qwen_dir, tmp_path):
    """tokenizer.ggml.pre qwen35 (Qwen3.5's GGUF), gpt-4o (gpt-oss's), lfm2 (LFM2-MoE's), llama4 (Llama 4's: gpt-4o's
    type in llama.cpp) and kimi-k2 (Kimi K2's and Kimi Linear's: merges the converter derives from the tiktoken ranks)
    on Qwen3's vocabulary: the packed model's ids equal HF tokenizers' with that pre-tokenizer."""
    hf = hf_with_pre(qwen_dir, PRE_REGEX["gpt-4o" if pre == "llama4" else pre], pre == "qwen35",
                     ignore_merges=pre == "lfm2")
    g = str(tmp_path / "t.gguf")
    write_gguf("qwen3_moe", g, tokenizer=gguf_tokenizer_writer(qwen_dir, pre))
    p = str(tmp_path / "t.sluice")
    run(["pack", g, "-o", p])
    texts = TOK_TEXTS + ["HELLO World CamelCaseWord don'T I'M x1234567y", " ".join(TOK_TEXTS) * 2,
                         "中文abc漢字Def 日本語テキストかな X中Y ΑβΓ ǅungla 'S中'T"]
    assert tokenize_batch(p, texts) == [hf.encode(t).ids for t in texts]


def test_tokenizer_deepseek_v3_from_gguf(deepseek_dir, tmp_path):
    """tokenizer.ggml.pre deepseek-v3 (DeepSeek-V3 / R1's GGUF) on DeepSeek's own vocabulary: HF tokenizers' ids of
    DeepSeek's tokenizer.json (its three Splits)."""
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(deepseek_dir, "tokenizer.json"))
    g = str(tmp_path / "t.gguf")
    write_gguf("qwen3_moe", g, tokenizer=gguf_tokenizer_writer(deepseek_dir, "deepseek-v3"))
    p = str(tmp_path / "t.sluice")
    run(["pack", g, "-o", p])
    texts = TOK_TEXTS + ["12345678 3.14159 第一章 ひらがな カタカナ 漢字テスト", " ".join(TOK_TEXTS) * 2]
    assert tokenize_batch(p, texts) == [hf.encode(t, add_special_tokens=False).ids for t in texts]


def test_tokenizer_tiny_and_refusals(tiny_dir, tmp_path):
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(tiny_dir, "tokenizer.json"))
    pre = json.load(open(os.path.join(tiny_dir, "tokenizer.json")))["pre_tokenizer"]
    name = "qwen2" if pre and pre.get("type") == "Sequence" else "gpt-2"
    g = str(tmp_path / "t.gguf")
    write_gguf("qwen3_moe", g, tokenizer=gguf_tokenizer_writer(tiny_dir, name))
    p = str(tmp_path / "t.sluice")
    run(["pack", g, "-o", p])
    assert tokenize_batch(p, TOK_TEXTS) == [hf.encode(t).ids for t in TOK_TEXTS]
    write_gguf("qwen3_moe", g, tokenizer=gguf_tokenizer_writer(tiny_dir, "deepseek-llm"))
    pack_fails(tmp_path, g, "tokenizer.ggml.pre 'deepseek-llm' is not supported (supported: qwen2")

    def wpm(w):  # BERT's WordPiece: no MoE family's
        w.add_tokenizer_model("bert")
    write_gguf("qwen3_moe", g, tokenizer=wpm)
    pack_fails(tmp_path, g, "tokenizer.ggml.model 'bert' is not supported")

    def spm(w):  # SentencePiece without its scores
        w.add_tokenizer_model("llama")
        w.add_token_list(["<unk>", "a"])
    write_gguf("qwen3_moe", g, tokenizer=spm)
    pack_fails(tmp_path, g, "tokenizer.ggml.scores must be an f32 array of one entry per token")


def test_split_gguf(st_packs, tmp_path):
    """A model in splits (gguf-py's split_max_tensors: name-0000N-of-0000M.gguf, split.* keys): the first
    split or the directory packs to the single file's logits; a missing split, or naming a later one, is
    one error."""
    d = tmp_path / "split"
    d.mkdir()
    write_gguf("mixtral", str(d / "m.gguf"), qtype=QT.Q8_0, split=8)
    files = sorted(os.listdir(d))
    assert len(files) >= 2 and files[0] == f"m-00001-of-{len(files):05d}.gguf", files
    one = str(tmp_path / "one.gguf")
    write_gguf("mixtral", one, qtype=QT.Q8_0)
    toks = ref_tokens("mixtral")
    run(["pack", one, "-o", str(tmp_path / "one.sluice")])
    ref = logits(str(tmp_path / "one.sluice"), toks, str(tmp_path / "r.f32"))
    for src in (str(d / files[0]), str(d)):
        run(["pack", src, "-o", str(tmp_path / "s.sluice")])
        assert np.array_equal(logits(str(tmp_path / "s.sluice"), toks, str(tmp_path / "s.f32")), ref)
    pack_fails(tmp_path, str(d / files[1]), "name the first split")
    os.remove(d / files[-1])
    pack_fails(tmp_path, str(d / files[0]), files[-1])
