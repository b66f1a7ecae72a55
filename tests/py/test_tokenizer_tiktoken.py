"""Kimi K2 / Kimi Linear's Hugging Face tokenizer: tiktoken.model (no tokenizer.json) read as tokenization_kimi.py
(the releases' TikTokenTokenizer) reads it: tiktoken with its pattern, 258 special ids after the ranks named by
tokenizer_config.json's added_tokens_decoder, special text allowed (src/import/tiktoken.c).

tests/data/kimi_tiktoken holds a small tiktoken.model (256 bytes + merges learned by BPE on TRAIN, split by the
Kimi pattern), a tokenizer_config.json shaped as Kimi's, and expected.json: TEXTS with the ids tiktoken itself gives
(tiktoken.Encoding with tokenization_kimi.py's pat_str, encode(allowed_special="all")). The test needs no tiktoken;
where it is installed the ids are recomputed too. `python3 tests/py/test_tokenizer_tiktoken.py` (with tiktoken and
regex) rewrites the three files."""
import base64
import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import ROOT, run  # noqa: E402

DIR = os.path.join(ROOT, "tests/data/kimi_tiktoken")
# tokenization_kimi.py TikTokenTokenizer.pat_str (Kimi-K2-Instruct / Kimi-Linear-48B-A3B-Instruct)
PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# Kimi's tokenizer_config.json names these of the 258 ids after the ranks (offsets from the first)
NAMED = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>", 6: "<|start_header_id|>",
         7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>", 17: "<|im_middle|>", 256: "[UNK]", 257: "[PAD]"}
TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's what they'll say: we've done it, I'm sure, you'd agree.",
    "HTTPServer parses JSONData; XMLHttpRequest and McDonald's iPhone ÉCOLE naïve café résumé Straße ΑΒΓ αβγ Привет мир",
    "你好，世界！我们今天学习自然语言处理。日本語のテキストとカタカナ。中文English混合mixed文本123。한국어 문장입니다.",
    "def tokenize(text):\n    for i in range(100):\n        yield text[i] * 2  # 1234567 3.14159 2024-06-01\n\treturn None\r\n",
    "   leading spaces\tand tabs\t\there\n\n\ntrailing  \n  emoji 😀👍🏽 flags 🇺🇸 $12.50 €11,30 100,000,000 a1b2c3",
] * 3
TEXTS = [
    "Hello, world! It's 2024-06-01T12:34:56Z and the price is $12.50 (or €11,30).",
    "1234567890 3.14159 a1b2c3 100,000,000", "   leading spaces\tand tabs\t\there", "trailing   \n\n\nnewlines\r\n",
    "你好，世界！日本語のテキスト。한국어 문장. Привет, мир! مرحبا بالعالم", "café résumé naïve e\u0301 A\u030a \u212b",
    "中文English混合mixed文本，HTTPServer和XMLHttpRequest。漢字かなカナ", "Straße STRASSE ΑΒΓ αβγ McDonald's iPhone ÉCOLE",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 flags 🇺🇸", "def f(x):\n\tif x > 0:\n\t\treturn x * 2\n", "I'm sure they'll say it's what we've done",
    "I'M SURE THEY'LL SAY IT'S", "[BOS]<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user"
    "<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>", "a<|reserved_token_%d|>b[EOS]",
    "<|im_end|><|im_end|>[PAD] [UNK]", "", " ", "\n", "\r\n\r\n  \t", "x" * 300, "ab " * 50 + "你" * 40,
]


def load():
    return json.load(open(os.path.join(DIR, "expected.json"), encoding="utf-8"))


def tiktoken_ids(texts):
    import tiktoken
    ranks = {}
    for line in open(os.path.join(DIR, "tiktoken.model"), "rb").read().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    cfg = json.load(open(os.path.join(DIR, "tokenizer_config.json")))
    names = {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()}
    n = len(ranks)
    special = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + 258)}
    enc = tiktoken.Encoding(name="kimi-test", pat_str=PAT, mergeable_ranks=ranks, special_tokens=special)
    return [enc.encode(t, allowed_special="all") for t in texts]


def sluice_ids(args, texts):
    r = run(["tokenize"] + args + ["--batch"], input=json.dumps(texts).encode())
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def test_expected_is_tiktokens():
    pytest.importorskip("tiktoken")
    e = load()
    assert tiktoken_ids(e["texts"]) == e["ids"]


def test_tiktoken_model_tokenizes_as_tiktoken():
    e = load()
    assert sluice_ids(["--tokenizer", os.path.join(DIR, "tiktoken.model")], e["texts"]) == e["ids"]


def test_kimi_checkpoint_packs_its_tiktoken_tokenizer(tmp_path):
    """A Kimi Linear checkpoint directory with tiktoken.model and no tokenizer.json: the pack holds the tokenizer.json
    it means, which tokenizes as tiktoken; the config's eos_token ends a generation."""
    src = tmp_path / "kimi"
    shutil.copytree(os.path.join(ROOT, "tests/data/kimi_linear"), src)
    for f in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(DIR, f), src / f)
    p = str(tmp_path / "k.sluice")
    run(["pack", str(src), "-o", p])
    info = json.loads(run(["info", p, "--json"]).stdout)
    names = [b["name"] if isinstance(b, dict) else b for b in info["embedded_files"]]
    assert "tokenizer.json" in names and "tokenizer_config.json" in names
    e = load()
    assert sluice_ids(["-m", p], e["texts"]) == e["ids"]


def test_bad_tiktoken_model(tmp_path):
    for body, msg in ((b"QQ== 0\nnot-base64! 1\n", "line 2: not \"base64-token rank\""),
                      (b"QQ== 0\nQg== 0\n", "line 2: rank 0 or its token seen before"),
                      (b"QQ== 0\nQg== 2\nQw== 3\n", "no token of rank 1")):
        (tmp_path / "tiktoken.model").write_bytes(body)
        r = run(["tokenize", "--tokenizer", str(tmp_path / "tiktoken.model")], input=b"A", check=False)
        assert r.returncode == 1 and msg in r.stderr.decode(), r.stderr


def make():
    """The fixture: byte ranks 0-255, then 600 merges learned on TRAIN split by the pattern (most frequent pair
    first, ties by the pair's bytes), the config, and tiktoken's ids of TEXTS."""
    import regex
    from collections import Counter
    ranks = {bytes([b]): b for b in range(256)}
    words = Counter(m.encode() for t in TRAIN for m in regex.findall(PAT, t, flags=regex.V1))
    seqs = {w: [bytes([b]) for b in w] for w in words}
    while len(ranks) < 256 + 600:
        pairs = Counter()
        for w, s in seqs.items():
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += words[w]
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        ranks[a + b] = len(ranks)
        for w, s in seqs.items():
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    with open(os.path.join(DIR, "tiktoken.model"), "wb") as f:
        for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(tok) + b" %d\n" % r)
    n = len(ranks)
    cfg = {"added_tokens_decoder": {str(n + k): {"content": v, "lstrip": False, "normalized": False, "rstrip": False,
                                                 "single_word": False, "special": True} for k, v in NAMED.items()},
           "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
           "tokenizer_class": "TikTokenTokenizer", "model_max_length": 1048576}
    json.dump(cfg, open(os.path.join(DIR, "tokenizer_config.json"), "w"), indent=1)
    texts = [t % (n + 100) if "%d" in t else t for t in TEXTS]
    json.dump({"texts": texts, "ids": tiktoken_ids(texts)}, open(os.path.join(DIR, "expected.json"), "w",
                                                                    encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    make()
