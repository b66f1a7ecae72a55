"""Writes tests/data/spm_tokenizer/tokenizer.json: a tiny SentencePiece-style BPE tokenizer as Gemma releases ship
theirs (transformers 5.25 models/gemma/tokenization_gemma.py GemmaTokenizer): spaces normalised to "▁", a Split on
" " merged with the previous piece (a no-op once spaces are gone), BPE with byte_fallback (<0x00>..<0xFF> right
after the specials, as Gemma's vocabulary has them) and fuse_unk, the decoder Replace("▁", " "), ByteFallback,
Fuse. Trained with HF tokenizers on a small fixed corpus (a few hundred merges), so that most of a test text
merges, and characters outside the corpus's alphabet fall back to bytes.
    python tools/make_spm_tokenizer.py OUT_DIR"""
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
WORDS = ("the of and to in is that for it with as was on be by this are from at or an have not which one all "
         "model token expert layer memory stream read write weight tensor batch cache state sluice engine "
         "Hello hello world World The quick brown fox jumps over lazy dog 1 2 3 10 42 100 2024 3.14 a b c x y z "
         "café naïve über 中文 日本 , . ; : ! ? ( ) [ ] { } \" ' - _ = + * / # <div> </div> def return if else")


def corpus():
    rnd = random.Random(26)
    words = WORDS.split()
    lines = []
    for _ in range(400):
        sep = rnd.choice([" ", " ", " ", "  ", "\n", " \n"])
        lines.append(sep.join(rnd.choice(words) for _ in range(rnd.randint(3, 12))))
    return lines


def main(out):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=520, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    j = json.loads(tok.to_str())
    # the vocabulary renumbered: specials, the 256 byte tokens, then the trained pieces in their order
    trained = [t for t, _ in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1]) if t not in SPECIALS]
    order = SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + [t for t in trained if not (t.startswith("<0x") and len(t) == 6)]
    j["model"]["vocab"] = {t: i for i, t in enumerate(order)}
    for a in j["added_tokens"]:
        a["id"] = j["model"]["vocab"][a["content"]]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "add_bos_token": True}, f)
    Tokenizer.from_file(os.path.join(out, "tokenizer.json"))  # loads back


if __name__ == "__main__":
    main(sys.argv[1])
