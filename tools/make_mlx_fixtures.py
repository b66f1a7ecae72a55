#!/usr/bin/env python3
"""Build MLX-quantized fixtures with mlx-lm itself, plus mlx-lm's own logits for them.

Runs on Linux CPU with PyPI `mlx[cpu]` + `mlx-lm` (pip install "mlx[cpu]" mlx-lm). For each source fixture
tests/data/NAME it does what `mlx_lm.convert --dtype bfloat16 -q --q-bits B --q-group-size G` does (load,
sanitize, cast to bf16, quantize_model with the model's own quant_predicate, save_model + save_config); the
fixtures have no tokenizer, so the mlx_lm functions are called directly instead of the convert CLI. It then
loads the saved checkpoint back with mlx_lm.utils.load_model, upcasts every floating parameter (bf16
norms, scales, biases) to float32 -- exact -- and records the logits mlx-lm computes for the 90 reference
tokens of tests/data/NAME/ref.json. Output OUTDIR/mlx_NAME/:
  config.json, model.safetensors, model.safetensors.index.json   -- the MLX checkpoint as mlx-lm writes it
  ref.json        {"tokens": [...], "vocab": V, "bits": B, "group_size": G, "mlx": ver, "mlx_lm": ver}
  ref_logits.f32  float32 [n_tokens][vocab]: mlx-lm's logits (CPU, float32 activations)

Usage: python3 tools/make_mlx_fixtures.py [OUTDIR=tests/data]
"""
import json, os, shutil, sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map
import mlx_lm
from mlx_lm.utils import load_model, quantize_model, save_model, save_config

FIXTURES = [  # (source fixture, bits, group size)
    ("qwen3_next", 4, 64),
    ("qwen3_5_fused", 4, 64),
    ("qwen3_moe", 4, 32),
]


def build(src, out, bits, group):
    if out.exists():
        shutil.rmtree(out)
    # transformers 5 writes rope_theta inside rope_parameters; mlx-lm's ModelArgs wants it at the top
    cfg = json.load(open(src / "config.json"))
    extra = {}
    for c in (cfg, cfg.get("text_config", {})):
        if "rope_theta" not in c and "rope_parameters" in c:
            c["rope_theta"] = c["rope_parameters"]["rope_theta"]
        # mlx-lm's qwen3_5 knows only full_attention_interval; derive it from layer_types
        lt = c.get("layer_types")
        if lt and "full_attention_interval" not in c:
            iv = lt.index("full_attention") + 1
            assert all((t == "full_attention") == ((i + 1) % iv == 0) for i, t in enumerate(lt)), lt
            c["full_attention_interval"] = iv
    if "num_local_experts" in cfg and "num_experts" not in cfg:  # transformers 5 qwen3_moe spelling
        cfg["num_experts"] = cfg["num_local_experts"]
    extra = {k: cfg[k] for k in ("rope_theta", "text_config", "num_experts") if k in cfg}
    model, config = load_model(src, lazy=False, model_config=extra)
    model.update(tree_map(lambda v: v.astype(mx.bfloat16) if mx.issubdtype(v.dtype, mx.floating) else v,
                          model.parameters()))
    model, config = quantize_model(model, config, group, bits)
    save_model(out, model)
    save_config(config, out / "config.json")
    ref = json.load(open(src / "ref.json"))
    model, _ = load_model(out, lazy=False)
    model.update(tree_map(lambda v: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v,
                          model.parameters()))
    toks = ref["tokens"]
    logits = model(mx.array(toks, dtype=mx.int32)[None]).astype(mx.float32)
    mx.eval(logits)
    arr = np.array(logits[0], dtype=np.float32)
    arr.tofile(out / "ref_logits.f32")
    json.dump({"tokens": toks, "vocab": int(arr.shape[1]), "bits": bits, "group_size": group,
               "source": src.name, "mlx": mx.__version__, "mlx_lm": mlx_lm.__version__},
              open(out / "ref.json", "w"), indent=1)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{out}: {size} bytes, logits {arr.shape}")


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
    for name, bits, group in FIXTURES:
        build(Path("tests/data") / name, root / f"mlx_{name}", bits, group)


if __name__ == "__main__":
    main()
