"""GGUF import of the families whose tensors llama.cpp's converter rewrites: qwen3_next (qwen3next), qwen3_5_moe
(qwen35moe), gpt_oss (gpt-oss, bf16 and MXFP4 experts) and deepseek_v3 (deepseek2), and of dots1 (dots1). Each fixture of tests/data is
written as a GGUF at test time the way convert_hf_to_gguf.py does it (llama.cpp conversion/qwen.py Qwen3NextModel,
_LinearAttentionVReorderBase; gpt_oss.py GptOssModel; deepseek.py DeepseekV2Model; dots1.py Dots1Model; base.py TextModel's keys and
its prepare_tensors type rules), with gguf-py's own names (gguf.get_tensor_name_map) and writer, then packed.
References: the safetensors pack of the same fixture, and gguf-py's dequantisation of what was written, taken
back through the converter's rewrite by tracking element ids through it."""
import json
import os
import shutil
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402

from conftest import ROOT, run  # noqa: E402
from test_gguf import container, container_f32, finish, logits, ref_tokens, same  # noqa: E402

DATA = os.path.join(ROOT, "tests/data")
ARCH = {"qwen3_next": gguf.MODEL_ARCH.QWEN3NEXT, "qwen3_5_moe": gguf.MODEL_ARCH.QWEN35MOE,
        "gpt_oss": gguf.MODEL_ARCH.GPT_OSS, "gpt_oss_mxfp4": gguf.MODEL_ARCH.GPT_OSS,
        "deepseek_v3": gguf.MODEL_ARCH.DEEPSEEK2, "dots1": gguf.MODEL_ARCH.DOTS1}
FAMILIES = list(ARCH)
DENSE = {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def read_safetensors(d):
    """{name: (array, dtype)} of a fixture's safetensors (F32, BF16 as uint16, U8)"""
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        raw = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for k, v in json.loads(raw[8:8 + n]).items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            dt = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "U8": np.uint8, "I64": np.int64}[v["dtype"]]
            out[k] = (np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(v["shape"]), v["dtype"])
    return out


def text_cfg(family):
    cfg = json.load(open(os.path.join(DATA, family, "config.json")))
    return {**cfg, **cfg.get("text_config", {})}, cfg


def hf_tensors(family, ids=False):
    """The fixture's tensors as the converter sees them: names without the VLM wrapper, bf16 as f32 (base.py
    prepare_tensors converts before modify_tensors). ids: every element replaced by its global id (float64), to
    follow where the rewrite puts it."""
    out, n = {}, 0
    for k, (a, dt) in sorted(read_safetensors(os.path.join(DATA, family)).items()):
        if k.startswith("model.visual."):
            continue
        k = k.replace("model.language_model.", "model.")  # base.py filter_tensors
        k = k.replace("e_score_correction_bias", "e_score_correction.bias")
        if dt == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        elif a.dtype != np.uint8:
            a = a.astype(np.float32)
        if ids and a.dtype != np.uint8:
            a = np.arange(n, n + a.size, dtype=np.float64).reshape(a.shape)
            n += a.size
        out[k] = (a, dt)
    return out


def v_reorder(t, dim, nk, r, hd):
    """_LinearAttentionVReorderBase._reorder_v_heads: value heads grouped by key head -> tiled"""
    shape = list(t.shape)
    t = t.reshape(shape[:dim] + [nk, r, hd] + shape[dim + 1:])
    return np.swapaxes(t, dim, dim + 1).reshape(shape)


def nibbles_to_ggml(blocks):
    """GptOssModel.transform_nibble_layout: HF byte j holds elements 2j (low) and 2j+1 (high); ggml MXFP4's byte i
    holds elements i (low) and i + 16 (high)"""
    e = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    return (e[..., :16] | (e[..., 16:] << 4)).astype(np.uint8)


def convert(family, ids=False):
    """The fixture rewritten as convert_hf_to_gguf.py does: [(gguf name, array)] in f32 (or raw MXFP4 bytes as
    uint8 [.., blocks * 17]), and the metadata writer calls. ids: element ids, no value maps (+1, -exp)."""
    cfg, root = text_cfg(family)
    hf = hf_tensors(family, ids)
    L = cfg["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(ARCH[family], L)
    out = []

    def emit(name, a):
        g = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if g is None and ".mlp." in name and name.split(".")[-2] in DENSE:
            # gguf-py 0.19.0 lists no dense FFN for qwen3next (every released layer is MoE; the fixture has one
            # dense layer, mlp_only_layers): llama.cpp's usual ffn_gate / ffn_up / ffn_down
            g = f"blk.{name.split('.')[2]}.{DENSE[name.split('.')[-2]]}.weight"
        assert g, name
        out.append((g, a))
    experts = {}
    nk, nv = cfg.get("linear_num_key_heads", 0), cfg.get("linear_num_value_heads", 0)
    for k, (a, _) in hf.items():
        if family in ("qwen3_next", "qwen3_5_moe"):  # Qwen3NextModel.modify_tensors (+ the V reorder for 3.5)
            if family == "qwen3_5_moe" and nk != nv and "linear_attn." in k:
                dk, dv, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], nv // nk
                if ".in_proj_qkv." in k:
                    a = np.concatenate([a[:2 * nk * dk], v_reorder(a[2 * nk * dk:], 0, nk, r, dv)])
                elif ".in_proj_z." in k:
                    a = v_reorder(a, 0, nk, r, dv)
                elif ".in_proj_b." in k or ".in_proj_a." in k:
                    a = v_reorder(a, 0, nk, r, 1)
                elif ".A_log" in k or ".dt_bias" in k:
                    a = v_reorder(a[:, None], 0, nk, r, 1)[:, 0]
                elif ".conv1d" in k:
                    d = a.squeeze()
                    a = np.concatenate([d[:2 * nk * dk], v_reorder(d[2 * nk * dk:], 0, nk, r, dv)])
                elif ".out_proj." in k:
                    a = v_reorder(a, 1, nk, r, dv)
            if k.endswith(".A_log"):
                a = a if ids else -np.exp(a)
            elif k.endswith(".dt_bias"):
                k = k[:-len(".dt_bias")] + ".dt_proj.bias"
            elif "conv1d" in k:
                a = a.squeeze()
            elif k.endswith("norm.weight") and not k.endswith("linear_attn.norm.weight"):
                a = a if ids else a + np.float32(1)
            if "in_proj_qkvz.weight" in k:
                dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
                parts = [dk, dk, nv // nk * dv, nv // nk * dv]
                t = a.T.reshape(-1, nk, sum(parts))
                q, kk, v, z = np.split(t, np.cumsum(parts)[:-1], axis=-1)
                H = cfg["hidden_size"]
                qkv = np.concatenate([q.reshape(H, -1), kk.reshape(H, -1), v.reshape(H, -1)], axis=-1).T
                out.append((k.replace("model.layers.", "blk.").replace("linear_attn.in_proj_qkvz", "attn_qkv"), qkv))
                out.append((k.replace("model.layers.", "blk.").replace("linear_attn.in_proj_qkvz", "attn_gate"), z.reshape(H, -1).T))
                continue
        if family.startswith("gpt_oss"):  # GptOssModel
            if "sinks" in k:
                k += ".weight"
            if "mlp.experts." in k:
                l = int(k.split(".")[2])
                base = f"model.layers.{l}.mlp.experts."
                if k.endswith("gate_up_proj_bias"):
                    emit(base + "gate_proj.bias", a[..., ::2])
                    emit(base + "up_proj.bias", a[..., 1::2])
                elif k.endswith("down_proj_bias"):
                    emit(base + "down_proj.bias", a)
                elif k.endswith("gate_up_proj"):
                    t = np.swapaxes(a, -1, -2)
                    emit(base + "gate_proj.weight", t[:, ::2, :])
                    emit(base + "up_proj.weight", t[:, 1::2, :])
                elif k.endswith("down_proj"):
                    emit(base + "down_proj.weight", np.swapaxes(a, -1, -2))
                elif k.endswith("_scales"):  # repack_mxfp4: [E, rows, blocks, 1 + 16]
                    blk = hf[k.replace("_scales", "_blocks")][0]
                    sc = a
                    if "gate_up" in k:
                        for nm, sl in (("gate_proj", slice(0, None, 2)), ("up_proj", slice(1, None, 2))):
                            b = np.concatenate([sc[:, sl, :, None], nibbles_to_ggml(blk[:, sl])], axis=-1)
                            emit(base + nm + ".weight", b.reshape(*b.shape[:2], -1))
                    else:
                        b = np.concatenate([sc[..., None], nibbles_to_ggml(blk)], axis=-1)
                        emit(base + "down_proj.weight", b.reshape(*b.shape[:2], -1))
                continue
        if family == "deepseek_v3" and k.endswith("kv_b_proj.weight"):  # split for MLA's absorption
            nh, vd, nope = cfg["num_attention_heads"], cfg["v_head_dim"], cfg["qk_nope_head_dim"]
            kv = a.reshape(nh, vd + nope, a.shape[-1])
            emit(k.replace("kv_b_proj", "k_b_proj"), np.swapaxes(kv[:, :nope], 1, 2))
            emit(k.replace("kv_b_proj", "v_b_proj"), kv[:, nope:])
            continue
        if ".experts." in k and ".experts.gate_up" not in k:  # per-expert tensors, stacked per layer
            p = k.split(".")
            experts.setdefault((int(p[2]), p[-2]), {})[int(p[-3])] = a
            continue
        emit(k, a)
    E = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    for (l, part), es in sorted(experts.items()):
        emit(f"model.layers.{l}.mlp.experts.{part}.weight", np.stack([es[e] for e in range(E)]))
    return out


def metadata(family, w):
    """set_gguf_parameters of the family's converter class (the keys it writes for this config)"""
    cfg, root = text_cfg(family)
    rope = cfg.get("rope_parameters") or {}
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"] if "intermediate_size" in cfg else cfg["moe_intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(1 if family == "deepseek_v3" else cfg["num_key_value_heads"])
    if rope.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        if "beta_fast" in rope:
            w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        if "beta_slow" in rope:
            w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    w.add_rope_freq_base(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts"))
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if family == "dots1":  # Dots1Model (Qwen2MoeModel) and TextModel's group keys
        w.add_expert_group_count(cfg["n_group"])
        w.add_expert_group_used_count(cfg["topk_group"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
        w.add_expert_shared_count(cfg["n_shared_experts"])
        w.add_expert_weights_scale(cfg["routed_scaling_factor"])
        w.add_expert_weights_norm(cfg["norm_topk_prob"])
    if family == "deepseek_v3":
        w.add_expert_group_count(cfg["n_group"])
        w.add_expert_group_used_count(cfg["topk_group"])
        # the released config.json says scoring_func sigmoid (the fixture's transformers config does not keep it)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if cfg.get("head_dim") and family != "deepseek_v3":
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if family in ("qwen3_next", "qwen3_5_moe"):  # Qwen2MoeModel + Qwen3NextModel
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
        w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
        w.add_rope_dimension_count(int(cfg["head_dim"] * rope.get("partial_rotary_factor", 0.25)))
        if family == "qwen3_5_moe":
            w.add_rope_dimension_sections((rope["mrope_section"] + [0, 0, 0, 0])[:4])
    if family.startswith("gpt_oss"):
        w.add_sliding_window(cfg["sliding_window"])
        w.add_expert_feed_forward_length(cfg["intermediate_size"])
    if family == "deepseek_v3":
        w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
        w.add_vocab_size(cfg["vocab_size"])
        w.add_q_lora_rank(cfg["q_lora_rank"])
        w.add_kv_lora_rank(cfg["kv_lora_rank"])
        w.add_key_length(cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"])
        w.add_value_length(cfg["kv_lora_rank"])
        w.add_key_length_mla(cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"])
        w.add_value_length_mla(cfg["v_head_dim"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_shared_count(cfg["n_shared_experts"])
        w.add_expert_weights_scale(cfg["routed_scaling_factor"])
        if cfg.get("norm_topk_prob"):
            w.add_expert_weights_norm(True)
        w.add_rope_dimension_count(cfg["qk_rope_head_dim"])
        w.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])


def stays_f32(name, a):
    """base.py prepare_tensors: 1-D tensors, norms, routers, conv1d and whatever is not a .weight stay F32"""
    return (a.ndim <= 1 or name.endswith("_norm.weight") or ".ffn_gate_inp" in name or ".ssm_conv1d" in name
            or not name.endswith(".weight"))


def add_typed(w, name, a, t, dequant=False):
    """The f32 array a added to w as type t: F32, F16, or gguf-py's quantisation (Q8_0 / Q4_0 where the rows are whole
    blocks, else F16, as the converter falls back); dequant: gguf-py's dequantisation of that, as F32. Returns
    (written array, type)."""
    if t in (QT.Q8_0, QT.Q4_0) and a.shape[-1] % 32:
        t = QT.F16
    data = a if t == QT.F32 else a.astype(np.float16) if t == QT.F16 else gguf.quants.quantize(a, t)
    if dequant and t != QT.F32:
        data = np.ascontiguousarray(gguf.quants.dequantize(data, t).astype(np.float32)).reshape(a.shape)
        t = QT.F32
    if t in (QT.F32, QT.F16):
        w.add_tensor(name, data)
    else:
        w.add_tensor(name, data, raw_dtype=t)
    return data, t


def write(family, path, qtype=None, dequant=False, by_suffix=None):
    """The GGUF: matrices in the fixture's own type (qtype None: --outtype bf16 / f32), or quantised to qtype by
    gguf-py where their rows are whole blocks (else F16, as the converter falls back); dequant: gguf-py's
    dequantisation written as F32. by_suffix: {name suffix: type} overriding qtype (llama-quantize's mixes).
    MXFP4 experts as they are. Returns {name: (written array, type)}."""
    cfg, root = text_cfg(family)
    native = QT.BF16 if root.get("dtype") == "bfloat16" else QT.F32
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[ARCH[family]])
    metadata(family, w)
    written = {}
    for name, a in convert(family):
        if a.dtype == np.uint8:
            w.add_tensor(name, a, raw_dtype=QT.MXFP4)
            written[name] = (a, QT.MXFP4)
            continue
        a = np.ascontiguousarray(a, dtype=np.float32)
        t = QT.F32 if stays_f32(name, a) else (qtype or native)
        t = next((q for sfx, q in (by_suffix or {}).items() if name.endswith(sfx)), t)
        written[name] = add_typed(w, name, a, t, dequant)
    finish(w)
    return written


@pytest.fixture(scope="module")
def st_packs(tmp_path_factory):
    d = tmp_path_factory.mktemp("st")
    out = {}
    for fam in FAMILIES:
        p = str(d / f"{fam}.sluice")
        src = os.path.join(DATA, fam)
        if fam == "dots1":  # GGUF has no window for dots1 (llama.cpp runs it full): the fixture without its window
            src = str(d / "dots1-full")
            shutil.copytree(os.path.join(DATA, fam), src)
            cfg = json.load(open(os.path.join(src, "config.json")))
            cfg["layer_types"] = ["full_attention"] * cfg["num_hidden_layers"]
            json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
        run(["pack", src, "-o", p])
        out[fam] = p
    return out


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


# The native-type GGUF against the safetensors pack: bitwise, every family. Every rewrite is a permutation and
# MXFP4 blocks keep their bytes; qwen3_next / qwen3_5_moe's norms are 1 + w rounded once in f32 (where sluice
# rounds the same sum at run time) and A = -exp(A_log) goes back to the A_log whose expf is A.
@pytest.mark.parametrize("family", FAMILIES)
def test_native_gguf_equals_safetensors_pack(family, st_packs, tmp_path):
    g = str(tmp_path / "m.gguf")
    write(family, g)
    p = str(tmp_path / "m.sluice")
    run(["pack", g, "-o", p])
    toks = ref_tokens(family)
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(st_packs[family], toks, str(tmp_path / "b.f32"))
    assert a.shape == b.shape and np.isfinite(a).all()
    assert np.array_equal(a, b), f"max relative difference {rel_err(a, b):.3g}"
    # greedy tokens: the argmax of every position
    V = json.loads(run(["info", p, "--json"]).stdout)["config"]["vocab"]
    assert np.array_equal(a.reshape(-1, V).argmax(1), b.reshape(-1, V).argmax(1))


def canonical_ids(family):
    """{container tensor name, or (layer, expert, part index): HF element ids in the container's layout}"""
    hf = hf_tensors(family, ids=True)
    out = {}
    for k, (a, _) in hf.items():
        if a.dtype == np.uint8:
            continue
        name = k[len("model."):] if k.startswith("model.") else k
        name = name[:-len(".weight")] if name.endswith(".weight") else name
        name = name.replace("e_score_correction.bias", "e_score_correction_bias").replace(".mlp.router", ".mlp.gate")
        if name.endswith("conv1d"):
            a = a.squeeze()
        if ".mlp.experts." in name:
            p = name.split(".")
            l = int(p[1])
            if family.startswith("gpt_oss"):
                part = p[-1]
                for x in range(a.shape[0]):
                    if part in ("gate_up_proj", "down_proj"):
                        out[(l, x, {"gate_up_proj": 0, "down_proj": 2}[part])] = a[x].T
                    else:
                        out[(l, x, {"gate_up_proj_bias": 1, "down_proj_bias": 3}[part])] = a[x][:, None]
            else:
                out[(l, int(p[4]), {"gate_proj": 0, "up_proj": 1, "down_proj": 2}[p[5]])] = a
            continue
        out[name] = a
    return out


def test_q8_gguf_reads_back_as_gguf_py_dequantises(tmp_path):
    """Q8_0 GGUF of every family, tensor by tensor: what the container holds, decoded by its documented layout,
    is gguf-py's dequantisation of what was written, taken back through the converter's rewrite (element ids
    followed through convert()); value maps aside: A_log (-expf of it is the written A to within one f32 step)
    and the shifted norms (held as written). The logits equal those of the F32 GGUF of the same dequantised
    values, bitwise, and verify --source re-derives every tensor."""
    for family in FAMILIES:
        g = str(tmp_path / f"{family}.gguf")
        wr = write(family, g, qtype=QT.Q8_0)
        p = str(tmp_path / f"{family}.sluice")
        run(["pack", g, "-o", p])
        raw, man = container(p)
        tens = {t["name"]: t for t in man["tensors"]}
        # where each HF element id went: gguf name -> ids, then the dequantised values at those places
        val = {}
        for (name, ida), (data, qt) in zip(convert(family, ids=True), [wr[n] for n, _ in convert(family)]):
            if qt == QT.MXFP4:
                continue
            deq = data if qt == QT.F32 else gguf.quants.dequantize(data, qt)
            deq = np.asarray(deq, np.float32).reshape(ida.shape)
            for i, v in zip(ida.reshape(-1).astype(np.int64), deq.reshape(-1)):
                val[int(i)] = v
        checked = 0
        shifted = family in ("qwen3_next", "qwen3_5_moe")
        for key, ids in canonical_ids(family).items():
            ref = np.array([val[int(i)] for i in ids.reshape(-1)], np.float32).reshape(ids.shape if ids.ndim == 2 else (1, -1))
            if isinstance(key, tuple):
                l, x, pi = key
                ex = man["experts"]
                s = ex["layers"].index(l)
                got = container_f32(raw, ex["parts"][pi], ex["offset"] + (s * ex["n_experts"] + x) * ex["stride"])
            else:
                t = tens[key]
                got = container_f32(raw, t)
            got = got.reshape(ref.shape)
            if key.__class__ is str and key.endswith("A_log"):
                a = ref.astype(np.float64)
                assert np.all(np.abs(-np.exp(got.astype(np.float64)) - a) <= 2 * np.spacing(np.abs(ref)).astype(np.float64)), (family, key)
            else:
                assert same(got, ref), (family, key, np.abs(got - ref).max())
            checked += 1
        assert checked > 20, (family, checked)
        if shifted:
            assert man["config"].get("norms_shifted") or json.loads(run(["info", p, "--json"]).stdout)["config"].get("norms_shifted"), family
        dq = str(tmp_path / f"{family}-dq.gguf")
        write(family, dq, qtype=QT.Q8_0, dequant=True)
        pd = str(tmp_path / f"{family}-dq.sluice")
        run(["pack", dq, "-o", pd])
        toks = ref_tokens(family)
        a = logits(p, toks, str(tmp_path / "a.f32"))
        b = logits(pd, toks, str(tmp_path / "b.f32"))
        assert np.isfinite(a).all() and np.array_equal(a, b), (family, np.abs(a - b).max())
        r = run(["verify", p, "--source", g])
        assert b"every tensor equals the source" in r.stdout + r.stderr, family


def test_qkvz_halves_of_two_types_kept(tmp_path):
    """qwen3_next whose attn_qkv and attn_gate differ in type (llama-quantize's Q2_K gives them Q3_K and Q2_K): the
    halves kept as in_proj_qkv and in_proj_z (qkvz_split), each in its type, no f32; logits bitwise those of the
    F32 GGUF of the same dequantised values (held fused), and verify --source re-derives both. One type for both:
    one in_proj_qkvz as before."""
    mix = {"attn_qkv.weight": QT.Q8_0, "attn_gate.weight": QT.Q4_0}
    g = str(tmp_path / "mix.gguf")
    write("qwen3_next", g, qtype=QT.Q8_0, by_suffix=mix)
    p = str(tmp_path / "mix.sluice")
    run(["pack", g, "-o", p])
    raw, man = container(p)
    tens = {t["name"]: t for t in man["tensors"]}
    assert man["config"]["qkvz_split"] == 1
    lin = [l for l, t in enumerate(man["config"]["layer_types"]) if t == "linear_attention"]
    assert lin and not any("in_proj_qkvz" in n for n in tens)
    for l in lin:
        assert tens[f"layers.{l}.linear_attn.in_proj_qkv"]["dtype"] == "q8", tens[f"layers.{l}.linear_attn.in_proj_qkv"]
        assert tens[f"layers.{l}.linear_attn.in_proj_z"]["dtype"] == "q4"
    assert not any(t["dtype"] == "f32" and len(t["shape"]) == 2 and t["shape"][1] > 1 and "linear_attn.in_proj" in n
                   for n, t in tens.items())
    dq = str(tmp_path / "dq.gguf")
    write("qwen3_next", dq, qtype=QT.Q8_0, by_suffix=mix, dequant=True)
    pd = str(tmp_path / "dq.sluice")
    run(["pack", dq, "-o", pd])
    assert container(pd)[1]["config"]["qkvz_split"] == 0
    toks = ref_tokens("qwen3_next")
    a = logits(p, toks, str(tmp_path / "a.f32"))
    b = logits(pd, toks, str(tmp_path / "b.f32"))
    assert np.isfinite(a).all() and np.array_equal(a, b), np.abs(a - b).max()
    r = run(["verify", p, "--source", g])
    assert b"every tensor equals the source" in r.stdout + r.stderr
    run(["run", "-m", p, "--tokens", ",".join(map(str, toks[:4])), "-n", "4", "--temp", "0"])  # int8 kernels
    one = str(tmp_path / "one.gguf")
    write("qwen3_next", one, qtype=QT.Q8_0)
    po = str(tmp_path / "one.sluice")
    run(["pack", one, "-o", po])
    names = {t["name"]: t["dtype"] for t in container(po)[1]["tensors"]}
    assert names[f"layers.{lin[0]}.linear_attn.in_proj_qkvz"] == "q8" and not any(n.endswith("in_proj_z") for n in names)


def test_q4_experts_mxfp4_kept(tmp_path):
    """Q4_0 qwen3_next: q4 group-32 experts as written; gpt-oss MXFP4: the container's experts are mxfp4, their
    bytes those of the safetensors pack of the same blocks."""
    g = str(tmp_path / "q4.gguf")
    write("qwen3_next", g, qtype=QT.Q4_0)
    p = str(tmp_path / "q4.sluice")
    run(["pack", g, "-o", p])
    info = json.loads(run(["info", p, "--json"]).stdout)
    assert info["experts"]["dtype"] == "q4", info["experts"]
    g = str(tmp_path / "mx.gguf")
    write("gpt_oss_mxfp4", g)
    p = str(tmp_path / "mx.sluice")
    run(["pack", g, "-o", p])
    s = str(tmp_path / "st.sluice")
    run(["pack", os.path.join(DATA, "gpt_oss_mxfp4"), "-o", s])
    (ra, ma), (rb, mb) = container(p), container(s)
    ea, eb = ma["experts"], mb["experts"]
    assert [x["dtype"] for x in ea["parts"]] == [x["dtype"] for x in eb["parts"]] and ea["parts"][0]["dtype"] == "mxfp4"
    n = ea["stride"] * ea["n_experts"] * len(ea["layers"])
    assert ea["stride"] == eb["stride"] and ra[ea["offset"]:ea["offset"] + n] == rb[eb["offset"]:eb["offset"] + n]


def test_bad_family_gguf(tmp_path):
    """A split tensor without its partner, and DeepSeek-V2's softmax routing, are one clear error each."""
    from test_gguf import pack_fails
    g = str(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(g, "qwen3next")
    metadata("qwen3_next", w)
    for name, a in convert("qwen3_next"):
        if name != "blk.0.attn_gate.weight":
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    finish(w)
    pack_fails(tmp_path, g, "'blk.0.attn_gate.weight' is missing")
