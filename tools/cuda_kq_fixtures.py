"""tools/cuda_kq_fixtures.py SLUICE DIR: the GGUF block-type fixtures of tests/cuda/test_model.c (docs/CUDA.md "GGUF
block types"), written by tests/py/test_gguf.py's write_typed_model (a 2-layer qwen3moe of 256-wide rows, 4 experts,
random valid blocks; gguf-py needed: build/venv) and packed by SLUICE into DIR:
  kq_q4km: Q4_K and Q6_K by turns (llama-quantize's Q4_K_M mixes these two), kq_mix: every block type sluice keeps
  (Q4_K, Q6_K, Q5_K, Q3_K, Q2_K, IQ4_XS, IQ4_NL, the grid i-quants, Q5_0, Q5_1), one a matrix in turn, so the
  embedding, the LM head, attention and the experts all meet several; kq_q40: Q4_0 and Q8_0 by turns, which import to
  q4 / q8 whose biases are -8 / -128 times their scales (tn_mat bias_implied), packed as NAME.ib.sluice instead of
  NAME.kq.sluice (test_model's run_ib: decode with SLUICE_CUDA_IBIAS on bitwise off);
  NAME.kq.sluice the GGUF packed as it is (the types kept), NAME.sluice the same weights dequantised by gguf-py to an
  F32 GGUF and packed (test_model's f32 checks), NAME.ref the prompt (tokens 0, 7, .. 252) and an empty greedy line.
Prints the names."""
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests/py"))
import test_gguf  # noqa: E402  (write_typed_model; imports gguf, or skips)
from gguf import GGMLQuantizationType as QT  # noqa: E402

SETS = {"kq_q4km": [QT.Q4_K, QT.Q6_K], "kq_mix": test_gguf.KQ_TYPES, "kq_q40": [QT.Q4_0, QT.Q8_0]}


def main():
    sl, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, types in SETS.items():
        g, gd = os.path.join(out, name + ".gguf"), os.path.join(out, name + ".dq.gguf")
        test_gguf.write_typed_model(g, types, np.random.default_rng(27))
        test_gguf.write_typed_model(gd, types, np.random.default_rng(27), dequant=True)
        native = name + (".ib.sluice" if name == "kq_q40" else ".kq.sluice")
        for src, dst in ((g, native), (gd, name + ".sluice")):
            subprocess.run([sl, "pack", src, "-o", os.path.join(out, dst)], check=True, capture_output=True)
        os.remove(g), os.remove(gd)
        with open(os.path.join(out, name + ".ref"), "w") as f:
            f.write(" ".join(str(t) for t in range(0, 256, 7)) + "\n\n")
    print(" ".join(SETS))


if __name__ == "__main__":
    main()
