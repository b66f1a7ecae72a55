"""tools/demo_gguf.py: the demo model (models/demo.sluice, qwen3_next) as an F32 GGUF that llama.cpp runs and
llama-quantize quantizes, for the comparisons of docs/QUANT.md ("GGUF block types", "Against llama.cpp").

The container's weights are decoded by its documented layout (docs/FORMAT.md, src/quant/quant.h: q8 / q4 codes,
bf16 scales and biases; norms stored as 1 + w), written as a transformers-style checkpoint (HF names, f32
safetensors, the config without its MLX "quantization", the tokenizer files) and converted the way
convert_hf_to_gguf.py's Qwen3NextModel does (tests/py/test_gguf_families.py write: the same rewrite and keys), plus
the tokenizer metadata (tests/py/test_gguf.py gguf_tokenizer_writer, pre-tokenizer "qwen2").
Usage: build/venv/bin/python tools/demo_gguf.py [--model models/demo.sluice] [--hf-dir DIR] OUT.gguf
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def bf16(raw, n, off):
    return (np.frombuffer(raw, np.uint16, n, off).astype(np.uint32) << 16).view(np.float32)


def decode(raw, t, base=0):
    """A tensor of the container as f32 (f32, q8, q4 with bf16 / f16 / f32 scales)."""
    shape = t["shape"]
    rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
    off, dt = base + t["offset"], t["dtype"]
    if dt == "f32":
        return np.frombuffer(raw, np.float32, rows * cols, off).reshape(shape).copy()
    bits, g = (8 if dt == "q8" else 4), t["group"]
    cb = rows * cols * bits // 8
    c = np.frombuffer(raw, np.uint8, cb, off)
    if bits == 4:
        c = np.stack([c & 15, c >> 4], axis=-1).reshape(-1)
    q = c.reshape(rows, cols).astype(np.float32)
    ng, sd = rows * cols // g, t["scale_dtype"]
    size = {"bf16": 2, "f16": 2, "f32": 4}[sd]

    def sc(at):
        if sd == "bf16":
            return bf16(raw, ng, at)
        return np.frombuffer(raw, np.float16 if sd == "f16" else np.float32, ng, at).astype(np.float32)
    s, b = sc(off + cb).reshape(rows, -1), sc(off + cb + ng * size).reshape(rows, -1)
    return (np.repeat(s, g, axis=1) * q + np.repeat(b, g, axis=1)).reshape(shape)


def manifest(raw):
    """A container's manifest (the JSON its header points at) and the manifest's offset."""
    mo, ml = struct.unpack("<QQ", raw[24:40])
    return json.loads(raw[mo:mo + ml]), mo


def experts(raw, man):
    """Every routed expert's matrices of a container as f32: (layer, expert, part name, array), layer by layer in
    the manifest's order (one layout for all layers: experts.offset + (slot * n_experts + expert) * stride)."""
    ex = man["experts"]
    for s, layer in enumerate(ex["layers"]):
        for e in range(ex["n_experts"]):
            base = ex["offset"] + (s * ex["n_experts"] + e) * ex["stride"]
            for p in ex["parts"]:
                yield layer, e, p["name"], decode(raw, p, base)


def write_safetensors(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k, a in tensors.items():
        b = np.ascontiguousarray(a, np.float32).tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def to_hf(model, d):
    """The container as a transformers checkpoint in directory d (family "qwen3_next")."""
    raw = open(model, "rb").read()
    man, _ = manifest(raw)
    assert man["config"]["arch"] == "qwen3_next" and man["config"]["norms_shifted"] == 1
    for b in man["blobs"]:
        data = raw[b["offset"]:b["offset"] + b["size"]]
        if b["name"] == "config.json":
            cfg = json.loads(data)
            cfg.pop("quantization", None)
            cfg.pop("quantization_config", None)
            cfg["dtype"] = "float32"
            # the converter writes full_attention_interval (default 4); the demo's is 3 (layer_types)
            lt = cfg.get("layer_types", [])
            full = [i for i, t in enumerate(lt) if t == "full_attention"]
            if full and all(i % (full[0] + 1) == full[0] for i in full):
                cfg["full_attention_interval"] = full[0] + 1
            data = json.dumps(cfg, indent=2).encode()
        open(os.path.join(d, b["name"]), "wb").write(data)
    out = {}
    for t in man["tensors"]:
        a = decode(raw, t)
        n = t["name"]
        # stored as 1 + w (MLX); transformers' zero-centred w, which the converter turns back into 1 + w exactly
        # (s - 1 and (s - 1) + 1 are exact in f32 for s in [0.5, 2])
        if n.endswith("norm") and not n.endswith("linear_attn.norm"):
            a = (a - np.float32(1)).astype(np.float32)
        hf = n if n == "lm_head" else "model." + n
        if n.endswith("conv1d"):
            a = a.reshape(a.shape[0], 1, a.shape[1])
        out[hf + ("" if n.endswith(("A_log", "dt_bias")) else ".weight")] = a
    for layer, e, part, a in experts(raw, man):
        out[f"model.layers.{layer}.mlp.experts.{e}.{part}.weight"] = a
    write_safetensors(os.path.join(d, "model.safetensors"), out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo.sluice"))
    ap.add_argument("--hf-dir", help="keep the transformers checkpoint here (a directory named qwen3_next)")
    a = ap.parse_args()
    import test_gguf
    import test_gguf_families as fam
    tmp = tempfile.TemporaryDirectory()
    d = a.hf_dir or os.path.join(tmp.name, "qwen3_next")
    assert os.path.basename(os.path.normpath(d)) == "qwen3_next", "the checkpoint directory must be named qwen3_next"
    os.makedirs(d, exist_ok=True)
    to_hf(a.model, d)
    fam.DATA = os.path.dirname(os.path.normpath(d))
    tok = test_gguf.gguf_tokenizer_writer(d, "qwen2")
    orig = fam.metadata

    def metadata(family, w):
        orig(family, w)
        tok(w)
    fam.metadata = metadata
    fam.write("qwen3_next", a.out)
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes)")


if __name__ == "__main__":
    main()
