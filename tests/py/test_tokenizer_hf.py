"""sluice's tokenizer against HF tokenizers on the real Qwen3 and DeepSeek tokenizer.json files: identical ids on
a varied corpus (>= 200 cases + long documents), decode round trips, and the tiny 256-id fixture tokenizer."""
import json
import os
import random

import pytest
from tokenizers import Tokenizer

from conftest import ROOT, run

BASE = [
    "Hello, world!", "hello world", "Hello World HELLO", "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's what we've done; you'd think I'd've known.", "DON'T SHOUT, IT'S RUDE", "It's",
    "e-mail: someone@example.com, url: https://example.org/a/b?c=d&e=f#g", "price: $12.50 (or €11,30)",
    "1234567890", "3.14159265358979", "a1b2c3", "Room 101, floor 7", "2024-06-01T12:34:56Z", "0x1F 0b1010 1e-9",
    "100,000,000 people", "   leading spaces", "trailing spaces   ", "a    b     c", "tabs\there\t\tand\t\t\tthere",
    "line one\nline two\n\nline four\n\n\n", "\r\nwindows\r\nline endings\r\n", " ", "  ", "\n", "\t", "",
    "def f(x):\n\tif x > 0:\n\t\treturn x * 2\n\n\treturn -x\n",
    "for (int i = 0; i < n; i++) {\n    sum += a[i];\n}\n", "#include <stdio.h>\nint main(void) { return 0; }",
    "    def __init__(self):\n        self.x = {'a': [1, 2, 3]}\n", "x=>x**2;;;;;;", "if (a&&b||!c) {}",
    "```python\nprint('hi')\n```", "<div class=\"a\">text</div>", "SELECT * FROM t WHERE id = 42;",
    "你好，世界！", "我爱自然语言处理。今天天气很好。", "日本語のテキストです。カタカナとひらがな。", "한국어 문장입니다.",
    "Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок.", "Ελληνικά γράμματα αβγ",
    "مرحبا بالعالم", "السلام عليكم ورحمة الله", "שלום עולם", "हिन्दी पाठ", "ภาษาไทย", "Tiếng Việt có dấu",
    "café résumé naïve façade jalapeño", "Ångström Øresund Ærø", "Zürich Straße Müller", "e\u0301 (decomposed é)",
    "A\u030a (decomposed Å) and \u212b (Angstrom sign)", "ﬁ ligature ½ fraction ² super", "Å\u0301",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️", "🤷🏽‍♀️🤷‍♂️", "flags 🇺🇸🇯🇵🇫🇷", "kaomoji (╯°□°）╯︵ ┻━┻",
    "math ∑∫∂√∞ ≤ ≥ ≠ ±", "arrows → ← ↑ ↓ ⇒", "box ┌─┐│└┘", "zero\u200bwidth\u200cjoiner\u200d",
    "nbsp\u00a0here\u202fthin", "ideographic\u3000space", "soft\u00adhyphen", "control\x01\x02chars\x7f",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "text<|endoftext|>more text", "<|im_end|>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<|fake_token|>",
    "<|im_start|><|im_start|><|im_end|>", "a<|im_start|>b", "<|im_start", "im_start|>", "<tool_response>x</tool_response>",
    "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "''''", "\"quoted\" 'single'", "a'b", "won't can't",
    "!!!???...", "---===+++", "____init____", "~`@#$%^&*()", "a.b.c.d", "end.", "...start",
]


def corpus():
    rnd = random.Random(1234)
    cases = list(BASE)
    words = [w for s in BASE for w in s.split()] + ["\n", "\t", "  ", "\n\n", " \n ", "😀", "中文", "é"]
    while len(cases) < 260:
        k = rnd.randint(1, 14)
        sep = rnd.choice([" ", "", "\n", "  ", "\t", " \n"])
        cases.append(sep.join(rnd.choice(words) for _ in range(k)))
    # long documents: every base case joined, code, multilingual prose, and a long whitespace run
    cases.append("\n\n".join(BASE) * 3)
    cases.append(open(os.path.join(ROOT, "src/text/tokenizer.c")).read())
    cases.append(("Multilingual paragraph. 多语言段落。 Многоязычный абзац. فقرة متعددة اللغات. " * 200))
    cases.append(" " * 3000 + "x" + "\n" * 500 + "\t" * 100)
    return cases


def batch(model_args, texts):
    r = run(["tokenize"] + model_args + ["--batch"], input=json.dumps(texts).encode())
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1
    return [[int(x) for x in l.split()] for l in lines[:-1]]


def test_qwen_tokenizer_matches_hf(qwen_dir):
    path = os.path.join(qwen_dir, "tokenizer.json")
    hf = Tokenizer.from_file(path)
    cases = corpus()
    assert len(cases) >= 200
    ours = batch(["--tokenizer", path], cases)
    bad = [(c, o, hf.encode(c).ids) for c, o in zip(cases, ours) if o != hf.encode(c).ids]
    assert not bad, f"{len(bad)} of {len(cases)} differ; first: {bad[0][0]!r}\n ours {bad[0][1][:40]}\n hf   {bad[0][2][:40]}"


def test_deepseek_tokenizer_matches_hf(deepseek_dir):
    # DeepSeek-V3's pre-tokenizer: Split digits (1-3), Split CJK runs, Split its own regex, ByteLevel without
    # regex, each on the pieces of the one before; an empty Sequence normalizer; its 818 added tokens
    path = os.path.join(deepseek_dir, "tokenizer.json")
    spec = json.load(open(path))
    assert [p["type"] for p in spec["pre_tokenizer"]["pretokenizers"]] == ["Split", "Split", "Split", "ByteLevel"]
    hf = Tokenizer.from_file(path)
    cases = corpus() + ["<｜begin▁of▁sentence｜>User: 1234567 + 89 = ?<｜Assistant｜>", "价格是12345元。カタカナ漢字ひらがな",
                        "x1y22z333w4444", "Hello世界123abc"]
    ours = batch(["--tokenizer", path], cases)
    bad = [(c, o, hf.encode(c).ids) for c, o in zip(cases, ours) if o != hf.encode(c).ids]
    assert not bad, f"{len(bad)} of {len(cases)} differ; first: {bad[0][0]!r}\n ours {bad[0][1][:40]}\n hf   {bad[0][2][:40]}"


def test_qwen_decode_matches_hf(qwen_dir):
    path = os.path.join(qwen_dir, "tokenizer.json")
    hf = Tokenizer.from_file(path)
    for text in ["Hello 世界 👨‍👩‍👧‍👦 <|im_end|> café", "def f():\n\treturn 1\n"]:
        ids = hf.encode(text).ids
        r = run(["tokenize", "--tokenizer", path, "--decode", " ".join(map(str, ids))])
        assert r.stdout.decode()[:-1] == hf.decode(ids, skip_special_tokens=False)
    # a split multi-byte character decodes to U+FFFD exactly as HF does
    ids = hf.encode("😀").ids[:1]
    r = run(["tokenize", "--tokenizer", path, "--decode", str(ids[0])])
    assert r.stdout.decode()[:-1] == hf.decode(ids)


def test_tiny_tokenizer_matches_hf(tiny_dir):
    path = os.path.join(tiny_dir, "tokenizer.json")
    hf = Tokenizer.from_file(path)
    assert hf.get_vocab_size() == 256
    cases = corpus()[:120]
    ours = batch(["--tokenizer", path], cases)
    assert ours == [hf.encode(c).ids for c in cases]


def test_tokenizer_from_container(tiny_model, tiny_dir):
    hf = Tokenizer.from_file(os.path.join(tiny_dir, "tokenizer.json"))
    r = run(["tokenize", "-m", tiny_model, "the quick <|im_end|> fox"])
    assert [int(x) for x in r.stdout.split()] == hf.encode("the quick <|im_end|> fox").ids
    r = run(["tokenize", "-m", tiny_model], input="from stdin\n".encode())
    assert [int(x) for x in r.stdout.split()] == hf.encode("from stdin\n").ids


def test_invalid_utf8_is_replaced(qwen_dir):
    path = os.path.join(qwen_dir, "tokenizer.json")
    hf = Tokenizer.from_file(path)
    for raw in [b"ab\xffcd", b"\xe4\xb8", b"x\xe4\xb8y", b"\xc0\xaf", b"\xed\xa0\x80", b"ok\xf0\x9f\x98"]:
        r = run(["tokenize", "--tokenizer", path], input=raw)
        assert [int(x) for x in r.stdout.split()] == hf.encode(raw.decode("utf-8", "replace")).ids, raw
    r = run(["tokenize", "--tokenizer", path, "--strict-utf8"], input=b"ab\xffcd", check=False)
    assert r.returncode == 1 and b"not valid UTF-8" in r.stderr


def test_bad_tokenizer_files(tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text("{not json")
    r = run(["tokenize", "--tokenizer", str(p), "x"], check=False)
    assert r.returncode == 1 and b"not valid JSON" in r.stderr
    p.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {}}}))
    r = run(["tokenize", "--tokenizer", str(p), "x"], check=False)
    assert r.returncode == 1 and b"not supported" in r.stderr
    r = run(["tokenize", "--tokenizer", str(tmp_path / "missing.json"), "x"], check=False)
    assert r.returncode == 1 and b"missing.json" in r.stderr
