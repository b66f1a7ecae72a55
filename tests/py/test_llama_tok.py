"""sluice's tokenizer against llama.cpp's ids (tests/data/llama_tok, written by tools/llama_tok_ref.py with
llama-tokenize; llama.cpp is not needed here). Each tokenizer is loaded twice: as its HF tokenizer.json, and as
the vocab-only GGUF llama.cpp's converter writes for it (tokenizer.ggml.*, imported by src/import/gguf_tokenizer.c).
Both must give llama.cpp's ids, except where llama.cpp differs from HF tokenizers (the fixture records HF's ids
there): then both give HF's, and the difference must be one docs/TEXT.md explains (llama.cpp applies no NFC)."""
import glob
import json
import os
import sys
import unicodedata

import pytest
from tokenizers import Tokenizer

from conftest import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tools"))
import llama_tok_ref as L  # noqa: E402

FIXTURES = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "llama_tok", "*.json")))


def batch(path, texts):
    r = run(["tokenize", "--tokenizer", path, "--batch"], input=json.dumps(texts).encode())
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1
    return [[int(x) for x in l.split()] for l in lines[:-1]]


def test_fixtures_cover_the_families():
    pres = {json.load(open(f))["pre"] for f in FIXTURES}
    assert {"qwen2", "llama-bpe", "deepseek-v3", "gpt-4o", "glm4", "olmo"} <= pres
    assert {os.path.basename(f)[:-5] for f in FIXTURES} == set(L.SOURCES)


@pytest.mark.parametrize("fx", FIXTURES, ids=[os.path.basename(f)[:-5] for f in FIXTURES])
def test_matches_llama_cpp(fx, tmp_path):
    rec = json.load(open(fx))
    assert rec["cases_sha"] == L.cases_sha(), "tools/llama_tok_ref.py's CASES changed: rerun it"
    d, pre, vocab_size = L.source_dir(rec["source"], str(tmp_path))
    tj = os.path.join(d, "tokenizer.json")
    assert L.file_sha(tj) == rec["tokenizer_sha"], f"{rec['source']}'s tokenizer.json changed: rerun the tool"
    gg = str(tmp_path / "vocab.gguf")
    L.write_gguf(d, pre, vocab_size, gg)
    w = rec["width"]
    llama = L.fixture_ids(rec)
    hf_fix = {int(k): L.decode_ids(v, w) for k, v in rec["hf_differs"].items()}
    assert len(llama) == len(L.CASES) and sum(map(len, llama)) > 3 * len(L.CASES)
    hf = Tokenizer.from_file(tj)
    for i, text in enumerate(L.CASES):  # HF today gives what was recorded
        assert hf.encode(text, add_special_tokens=False).ids == hf_fix.get(i, llama[i]), f"case {i} {text!r}"
        if i in hf_fix:  # the one known llama.cpp difference: its BPE path applies no NFC
            assert pre == "qwen2" and unicodedata.normalize("NFC", text) != text, f"case {i} {text!r}"
    for route, path in (("tokenizer.json", tj), ("GGUF", gg)):
        ours = batch(path, L.CASES)
        bad = [i for i, o in enumerate(ours) if o != hf_fix.get(i, llama[i])]
        assert not bad, (f"{rec['source']} via {route}: {len(bad)} of {len(L.CASES)} differ; first {L.CASES[bad[0]]!r}\n"
                         f" sluice    {ours[bad[0]][:40]}\n llama.cpp {llama[bad[0]][:40]}\n"
                         f" HF        {hf_fix.get(bad[0], llama[bad[0]])[:40]}")


def test_gguf_tokenizer_errors(tmp_path):
    # a GGUF without tokenizer.ggml.*, and one with a pre-tokenizer sluice does not know: errors naming them
    import gguf
    p = str(tmp_path / "none.gguf")
    g = gguf.GGUFWriter(p, "qwen3moe")
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.close()
    r = run(["tokenize", "--tokenizer", p, "x"], check=False)
    assert r.returncode != 0 and b"has no tokenizer" in r.stderr
    d, pre, vs = L.source_dir("tiny_qwen2", str(tmp_path))
    q = str(tmp_path / "pre.gguf")
    L.write_gguf(d, "tekken", vs, q)
    r = run(["tokenize", "--tokenizer", q, "x"], check=False)
    assert r.returncode != 0 and b"tokenizer.ggml.pre 'tekken' is not supported" in r.stderr
