"""sluice's SentencePiece-style BPE (src/text/tok_spm.c: Gemma's tokenizer.json shape) against HF tokenizers on
tests/data/spm_tokenizer (tools/make_spm_tokenizer.py: spaces as "▁", byte_fallback, the decoder Replace /
ByteFallback / Fuse), and on variants of it written here (a Metaspace pre-tokenizer with each prepend_scheme, split
or not; Llama 2's Prepend + Replace normalizer with a Strip decoder; no byte fallback): identical ids on the corpus
of test_tokenizer_hf (spaces, newlines, tabs, unicode, emoji, digits, code, long documents) and on strings around
added tokens, identical decoded text; and the same tokenizer as a GGUF (tokenizer.ggml.model gemma4, as llama.cpp's
conversion/gemma.py Gemma4Model.set_vocab writes it) gives the same ids."""
import copy
import json
import os
import re

import pytest
from tokenizers import Tokenizer

from conftest import ROOT, run
from test_tokenizer_hf import corpus

SRC = os.path.join(ROOT, "tests", "data", "spm_tokenizer")
R = "\u2581"
EXTRA = ["<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "a<eos>b", " <bos> x", "<bos>  two",
         "\x01\x02 ok", "日本語😀\t\r\n", "ǅ ǈ Ω", "\u00a0\u2009", R + "already", R + " " + R, "x" * 700,
         "tab\tnew\nline\r\nend ", "0123456789 00 000", "🇺🇸🇯🇵 👍🏽"]


def variant(name):
    j = json.load(open(os.path.join(SRC, "tokenizer.json"), encoding="utf-8"))
    j = copy.deepcopy(j)
    if name.startswith("metaspace"):  # Metaspace in place of the Replace normalizer, its decoder
        _, scheme, split = name.split("-")
        meta = {"type": "Metaspace", "replacement": R, "prepend_scheme": scheme, "split": split == "split"}
        j["normalizer"], j["pre_tokenizer"], j["decoder"] = None, meta, dict(meta)
    elif name == "llama2":  # Llama 2's: Prepend + Replace normalizer, no pre-tokenizer, Strip after the Fuse
        j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": R},
                                                               {"type": "Replace", "pattern": {"String": " "}, "content": R}]}
        j["pre_tokenizer"] = None
        j["decoder"]["decoders"].append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    elif name == "no-fallback":
        j["model"]["byte_fallback"] = False
    return j


VARIANTS = ["gemma", "metaspace-always-split", "metaspace-first-split", "metaspace-never-split",
            "metaspace-first-whole", "metaspace-always-whole", "llama2", "no-fallback"]


@pytest.fixture(scope="module", params=VARIANTS)
def tok(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    p = str(d / "tokenizer.json")
    json.dump(variant(request.param), open(p, "w", encoding="utf-8"), ensure_ascii=False)
    return p, Tokenizer.from_file(p)


def batch(path, texts):
    r = run(["tokenize", "--tokenizer", path, "--batch"], input=json.dumps(texts).encode())
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1
    return [[int(x) for x in l.split()] for l in lines[:-1]]


def test_encode_matches_hf(tok):
    path, hf = tok
    texts = corpus() + EXTRA
    got = batch(path, texts)
    bad = [(t[:40], hf.encode(t).ids[:12], g[:12]) for t, g in zip(texts, got) if hf.encode(t).ids != g]
    assert not bad, bad[:3]
    fell_back = sum(any(hf.id_to_token(i).startswith("<0x") for i in hf.encode(t).ids) for t in texts)
    assert fell_back > 20 or "no-fallback" in path  # the corpus exercises byte fallback


def test_decode_matches_hf(tok):
    path, hf = tok
    texts = corpus()[:40:2] + EXTRA + ["  leading", " ", "trailing  "]
    for t in texts:
        ids = hf.encode(t).ids
        if not ids:
            continue
        r = run(["tokenize", "--tokenizer", path, "--decode", " ".join(map(str, ids))])
        assert r.stdout.decode()[:-1] == hf.decode(ids, skip_special_tokens=False), t


def test_no_fallback_unknown_is_fused_unk(tmp_path):
    """Without byte fallback, characters outside the vocabulary are <unk>, consecutive ones one (fuse_unk)"""
    p = str(tmp_path / "tokenizer.json")
    json.dump(variant("no-fallback"), open(p, "w", encoding="utf-8"), ensure_ascii=False)
    hf = Tokenizer.from_file(p)
    unk = hf.token_to_id("<unk>")
    got = batch(p, ["a😀😀b"])[0]
    assert got == hf.encode("a😀😀b").ids and got.count(unk) == 1


def gemma4_gguf(path):
    """The tokenizer as llama.cpp's converter writes a Gemma 4 GGUF's (gguf-py vocab.py LlamaHfVocab: byte tokens
    BYTE, special tokens CONTROL, the rest NORMAL; merges from tokenizer.json; add_space_prefix false)"""
    gguf = pytest.importorskip("gguf")
    j = json.load(open(os.path.join(SRC, "tokenizer.json"), encoding="utf-8"))
    n = 1 + max(list(j["model"]["vocab"].values()) + [a["id"] for a in j["added_tokens"]])
    toks, types = [""] * n, [gguf.TokenType.NORMAL] * n
    for t, i in j["model"]["vocab"].items():
        toks[i] = t
        types[i] = gguf.TokenType.BYTE if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t) else gguf.TokenType.NORMAL
    for a in j["added_tokens"]:
        toks[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    w = gguf.GGUFWriter(path, "gemma4")
    w.add_tokenizer_model("gemma4")
    w.add_token_list(toks)
    w.add_token_scores([-1000.0] * n)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]])
    w.add_bos_token_id(j["model"]["vocab"]["<bos>"])
    w.add_eos_token_id(j["model"]["vocab"]["<eos>"])
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gemma4_gguf_tokenizer_matches_hf(tmp_path):
    g = str(tmp_path / "t.gguf")
    gemma4_gguf(g)
    hf = Tokenizer.from_file(os.path.join(SRC, "tokenizer.json"))
    texts = corpus() + EXTRA
    got = batch(g, texts)
    bad = [(t[:40], hf.encode(t).ids[:12], g[:12]) for t, g in zip(texts, got) if hf.encode(t).ids != g]
    assert not bad, bad[:3]
    ids = hf.encode("café 😀 \tx").ids
    r = run(["tokenize", "--tokenizer", g, "--decode", " ".join(map(str, ids))])
    assert r.stdout.decode()[:-1] == "café 😀 \tx"


def test_unsupported_shapes_are_named(tmp_path):
    """A Replace of another pattern, a WordPiece-like continuing prefix: refused with the field named"""
    for change, needle in [
        (lambda j: j.update(normalizer={"type": "Replace", "pattern": {"String": "a"}, "content": "b"}), b"Replace"),
        (lambda j: j["model"].update(continuing_subword_prefix="##"), b"continuing_subword_prefix"),
        (lambda j: j.update(pre_tokenizer={"type": "Whitespace"}), b"Whitespace"),
    ]:
        j = variant("gemma")
        change(j)
        p = tmp_path / "tokenizer.json"
        json.dump(j, open(p, "w", encoding="utf-8"), ensure_ascii=False)
        r = run(["tokenize", "--tokenizer", str(p), "x"], check=False)
        assert r.returncode == 1 and needle in r.stderr, r.stderr


# A SentencePiece vocabulary with scores (tokenizer.ggml.model llama: Llama 2, Mistral / Mixtral, Gemma 1-3 GGUFs,
# conversion/base.py _set_vocab_sentencepiece): spm_tokenizer's pieces, each scored -id as SentencePiece scores its
# BPE pieces in merge order, byte pieces BYTE, special added tokens CONTROL, the others USER_DEFINED.
def spm_vocab():
    j = json.load(open(os.path.join(SRC, "tokenizer.json"), encoding="utf-8"))
    n = 1 + max(list(j["model"]["vocab"].values()) + [a["id"] for a in j["added_tokens"]])
    toks, types, scores = [""] * n, ["normal"] * n, [-float(i) for i in range(n)]
    for t, i in j["model"]["vocab"].items():
        toks[i] = t
        if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t):
            types[i], scores[i] = "byte", 0.0
    for a in j["added_tokens"]:
        toks[a["id"]] = a["content"]
        types[a["id"]], scores[a["id"]] = "control" if a["special"] else "user", 0.0
    return j, toks, types, scores


def llama_gguf(path, add_space_prefix=True):
    gguf = pytest.importorskip("gguf")
    j, toks, types, scores = spm_vocab()
    tt = {"normal": gguf.TokenType.NORMAL, "byte": gguf.TokenType.BYTE, "control": gguf.TokenType.CONTROL,
          "user": gguf.TokenType.USER_DEFINED}
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types([tt[t] for t in types])
    w.add_bos_token_id(j["model"]["vocab"]["<bos>"])
    w.add_eos_token_id(j["model"]["vocab"]["<eos>"])
    w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_of_scores(add_space_prefix=True):
    """HF tokenizers' Tokenizer as transformers' LlamaConverter builds one from such a vocabulary: Prepend (when
    add_space_prefix) and Replace, BPE with byte fallback whose merges are every split of a piece into two pieces,
    ranked by the piece's score (tokenization_utils_base.py generate_merges with vocab_scores), the decoder's Replace,
    ByteFallback, Fuse, Strip"""
    j, toks, types, scores = spm_vocab()
    vocab = {t: i for i, t in enumerate(toks)}  # every piece, the added ones too (SentencePieceExtractor)
    merges = []
    for piece, i in vocab.items():
        local = [(piece[:k], piece[k:], scores[i]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]]))
    merges = [[a, b] for a, b, _ in sorted(merges, key=lambda v: (v[2], len(v[0]), len(v[1])), reverse=True)]
    j = variant("llama2")
    j["model"].update(vocab=vocab, merges=merges)
    if not add_space_prefix:
        j["normalizer"]["normalizers"] = j["normalizer"]["normalizers"][1:]
        j["decoder"]["decoders"] = j["decoder"]["decoders"][:-1]
    return Tokenizer.from_str(json.dumps(j))


def llama_cpp_spm(text, add_space_prefix=True):
    """llama.cpp's llm_tokenizer_spm (src/llama-vocab.cpp), ported: the text cut at added tokens; each raw fragment
    (prefixed with a space at the start and after a special token) as characters, the adjacent pair whose
    concatenation is the best-scored token merged first (the leftmost on a tie), what is left that is no token as its
    bytes' <0xNN> tokens"""
    import heapq
    _, toks, types, scores = spm_vocab()
    ids = {t: i for i, t in enumerate(toks) if t}
    added = sorted((t for i, t in enumerate(toks) if types[i] in ("control", "user")), key=len, reverse=True)
    out, prev_special, pos = [], True, 0
    while pos <= len(text):
        nxt = min(((text.find(a, pos), -len(a), a) for a in added if text.find(a, pos) >= 0), default=None)
        end = nxt[0] if nxt else len(text)
        if end > pos:
            s = ((" " if add_space_prefix and prev_special else "") + text[pos:end]).replace(" ", R)
            sym = list(s)
            alive, heap = [True] * len(sym), []

            def push(a, b):
                if a >= 0 and b < len(sym) and sym[a] + sym[b] in ids:
                    heapq.heappush(heap, (-scores[ids[sym[a] + sym[b]]], a, b, sym[a] + sym[b]))
            right = list(range(1, len(sym) + 1))
            left = list(range(-1, len(sym) - 1))
            for k in range(len(sym) - 1):
                push(k, k + 1)
            while heap:
                _, a, b, cat = heapq.heappop(heap)
                if not (alive[a] and alive[b] and right[a] == b and sym[a] + sym[b] == cat):
                    continue
                sym[a], alive[b] = cat, False
                right[a] = right[b]
                if right[b] < len(sym):
                    left[right[b]] = a
                push(left[a], a)
                push(a, right[a])
            for k in range(len(sym)):
                if alive[k]:
                    out += [ids[sym[k]]] if sym[k] in ids else [ids["<0x%02X>" % c] for c in sym[k].encode()]
            prev_special = False
        if not nxt:
            break
        out.append(ids[nxt[2]])
        prev_special, pos = True, end + len(nxt[2])
    return out


@pytest.mark.parametrize("prefix", [True, False], ids=["space-prefix", "no-prefix"])
def test_llama_gguf_tokenizer_matches_hf_and_llama_cpp(prefix, tmp_path):
    """A GGUF's SentencePiece vocabulary with scores (tokenizer.ggml.model llama): sluice's ids equal HF tokenizers'
    of transformers' conversion of it, which equal those of llama.cpp's algorithm (ported above), on the corpus; the
    decoded text is HF's."""
    g = str(tmp_path / "t.gguf")
    llama_gguf(g, prefix)
    hf = hf_of_scores(prefix)
    texts = corpus() + EXTRA
    ref = [hf.encode(t).ids for t in texts]
    bad = [t[:40] for t, r in zip(texts, ref) if llama_cpp_spm(t, prefix) != r]
    assert not bad, bad[:3]
    got = batch(g, texts)
    bad = [(t[:40], r[:12], o[:12]) for t, r, o in zip(texts, ref, got) if r != o]
    assert not bad, bad[:3]
    for t in ["café 😀 \tx", "  two  spaces", "a<eos>b"]:
        ids = hf.encode(t).ids
        r = run(["tokenize", "--tokenizer", g, "--decode", " ".join(map(str, ids))])
        assert r.stdout.decode()[:-1] == hf.decode(ids, skip_special_tokens=False), t
