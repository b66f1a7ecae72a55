#!/usr/bin/env python3
"""The demo model's corpus: the King James Bible from Debian's `bible-kjv` package (text in
bible-kjv-text; the 1611 translation is in the public domain, the package's copyright file says so).

Writes OUTDIR/train.txt and OUTDIR/heldout.txt: one chapter per block ("Genesis 1", a blank line, one
verse per line without its number, a blank line). Every 20th chapter (index % 20 == 10: 59 of 1189) is
held out for evaluation, never trained on. Also OUTDIR/chat.jsonl: one ChatML conversation per training
chapter (a request for some of its verses; the answer is those verses), so the model learns the chat
format. Deterministic: the same package gives the same files.

Usage: python3 tools/demo_corpus.py OUTDIR      (needs `apt-get install bible-kjv`)
"""
import json
import os
import random
import re
import subprocess
import sys

ASKS = [
    "Read me {book} chapter {ch}.",
    "What does {book} {ch} say?",
    "Tell me of {book}, chapter {ch}.",
    "Recite {book} {ch}:{a}-{b}.",
    "Give me verses {a} to {b} of {book} {ch}.",
    "What is written in {book} {ch}?",
    "Quote {book} {ch}:{a}.",
]
SYSTEMS = ["", "", "You are a helpful assistant.", "You answer in the words of the King James Bible."]


def chapters(text):
    out, cur, verse = [], None, None
    for line in text.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            verse = [m.group(2).strip()]
            cur[1].append(verse)
        elif line[0] != " " and re.match(r"^\S.* \d+$", line) and (cur is None or cur[1]):
            book, ch = line.rsplit(" ", 1)
            if cur is None or not (cur[0][0] == book and int(ch) == cur[0][1]):
                cur = ((book, int(ch)), [])
                out.append(cur)
                continue
            verse.append(line.strip())
        else:
            verse.append(line.strip())
    return [((b, c), [" ".join(v) for v in vs]) for (b, c), vs in out]


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    text = subprocess.run(["bible", "gen1:1-rev22:21"], check=True, capture_output=True, text=True).stdout
    chs = chapters(text)
    assert len(chs) == 1189, len(chs)
    assert sum(len(v) for _, v in chs) == 31102
    rng = random.Random(1611)
    train, held, chat = [], [], []
    for i, ((book, ch), verses) in enumerate(chs):
        block = f"{book} {ch}\n\n" + "\n".join(verses) + "\n"
        (held if i % 20 == 10 else train).append(block)
        if i % 20 == 10:
            continue
        a = rng.randrange(len(verses))
        b = min(len(verses), a + rng.randint(2, 6))
        ask = rng.choice(ASKS)
        if "{a}" not in ask:
            a, b = 0, min(len(verses), rng.randint(3, 8))
        elif "{b}" not in ask:
            b = a + 1
        msgs = []
        sysmsg = rng.choice(SYSTEMS)
        if sysmsg:
            msgs.append({"role": "system", "content": sysmsg})
        msgs.append({"role": "user", "content": ask.format(book=book, ch=ch, a=a + 1, b=b)})
        msgs.append({"role": "assistant", "content": "\n".join(verses[a:b])})
        chat.append(msgs)
    with open(os.path.join(outdir, "train.txt"), "w") as f:
        f.write("\n".join(train))
    with open(os.path.join(outdir, "heldout.txt"), "w") as f:
        f.write("\n".join(held))
    with open(os.path.join(outdir, "chat.jsonl"), "w") as f:
        for c in chat:
            f.write(json.dumps(c) + "\n")
    print(f"{len(train)} training chapters, {len(held)} held out, {len(chat)} conversations")


if __name__ == "__main__":
    main()
