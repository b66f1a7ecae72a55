"""`sluice run -p` and `sluice chat` end to end on the tiny Qwen3-Next fixture packed with the 256-id
tokenizer: determinism by seed, greedy == --tokens path, stop strings, max tokens, bad input, and the
chat REPL keeping its state between turns."""
import json
import os
import select
import signal
import subprocess

from tokenizers import Tokenizer

from conftest import ROOT, run, sluice_bin


def gen(model, *args, check=True):
    return run(["run", "-m", model] + list(args), check=check)


def test_same_seed_same_text(tiny_model):
    a = gen(tiny_model, "-p", "Hello world", "-n", "40", "--seed", "7", "--temp", "1.0").stdout
    b = gen(tiny_model, "-p", "Hello world", "-n", "40", "--seed", "7", "--temp", "1.0").stdout
    c = gen(tiny_model, "-p", "Hello world", "-n", "40", "--seed", "8", "--temp", "1.0").stdout
    assert a == b and a != c and len(a) > 1


def test_greedy_text_matches_token_path(tiny_model, tiny_dir):
    hf = Tokenizer.from_file(os.path.join(tiny_dir, "tokenizer.json"))
    ids = hf.encode("the quick brown fox").ids
    want = gen(tiny_model, "--tokens", ",".join(map(str, ids)), "-n", "12", "--temp", "0", "--ids").stdout.split()
    got = gen(tiny_model, "-p", "the quick brown fox", "-n", "12", "--temp", "0", "--ids").stdout.split()
    assert got == want
    text = gen(tiny_model, "-p", "the quick brown fox", "-n", "12", "--temp", "0").stdout.decode()
    assert text[:-1] == hf.decode([int(x) for x in want], skip_special_tokens=True)


def test_sampling_flags_and_stats(tiny_model):
    r = gen(tiny_model, "-p", "x", "-n", "8", "--seed", "1", "--top-k", "5", "--top-p", "0.9", "--min-p", "0.1",
            "--repeat-penalty", "1.3", "--presence-penalty", "0.5", "--ids", "--stats")
    assert len(r.stdout.split()) == 8 and b"8 generated" in r.stderr and b"stop: length" in r.stderr
    # one stats line (there were two, saying the token counts and speeds twice)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.count(b"generated") == 1, r.stderr
    r = gen(tiny_model, "-p", "x", "--top-p", "2", check=False)
    assert r.returncode == 1 and b"option '--top-p' must be between 0 and 1, not '2'" in r.stderr


def test_text_with_streaming_options(tiny_model):
    # the model options of every command work with text prompts: a tiny expert cache, direct I/O,
    # LFU, one thread -- same greedy text as the all-resident model, and the stats line reports the cache
    want = gen(tiny_model, "-p", "the quick brown fox", "-n", "12", "--temp", "0", "--resident").stdout
    r = gen(tiny_model, "-p", "the quick brown fox", "-n", "12", "--temp", "0", "--cache", "100K", "--io", "direct",
            "--policy", "lfu", "--threads", "1", "--stats")
    assert r.stdout == want
    assert b"hit rate" in r.stderr and b"streamed" in r.stderr
    r = gen(tiny_model, "-p", "x", "--cache", "lots", check=False)
    assert r.returncode == 1 and b"--cache" in r.stderr


def test_stop_string(tiny_model):
    r = gen(tiny_model, "-p", "the", "-n", "60", "--temp", "0", "--stats")
    assert b"stop: length" in r.stderr
    full = r.stdout.decode()[:-1]
    # a stop string taken from the second half of the greedy text (two printable characters, no U+FFFD:
    # the random model's invalid bytes come out as U+FFFD) cuts it at its first occurrence
    starts = [i for i in range(len(full) // 2, len(full) - 1)
              if all(c.isprintable() and c != "\ufffd" for c in full[i:i + 2])]
    assert starts, f"no two printable characters in the second half of {full!r}"
    mid = full[starts[0]:starts[0] + 2]
    cut = gen(tiny_model, "-p", "the", "-n", "60", "--temp", "0", "--stop", mid, "--stats")
    assert cut.stdout.decode()[:-1] == full[:full.index(mid)]
    assert b"stop: stop string" in cut.stderr


def test_chat_prompt_and_think(tiny_model):
    r = gen(tiny_model, "-p", "Hi", "--chat", "--think", "off", "-n", "4", "--stats", "--temp", "0")
    # the prompt is the rendered template: <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>...
    assert b"prompt" in r.stderr
    n_off = int(r.stderr.split(b"stats: ")[1].split()[0])
    r = gen(tiny_model, "-p", "Hi", "--chat", "-n", "4", "--stats", "--temp", "0")
    n_on = int(r.stderr.split(b"stats: ")[1].split()[0])
    assert n_off > n_on


def test_bad_prompts(tiny_model):
    r = subprocess.run([sluice_bin(), "run", "-m", tiny_model, "-p", b"ab\xffcd", "-n", "2", "--ids"],
                       capture_output=True)
    assert r.returncode == 0  # invalid UTF-8 is replaced by U+FFFD (docs/TEXT.md)
    long = "word " * 5000  # the fixture's context is 4096 positions
    r = gen(tiny_model, "-p", long, "-n", "2", check=False)
    assert r.returncode == 1 and b"does not fit the context" in r.stderr
    r = gen(tiny_model, "-p", "", check=False)
    assert r.returncode == 1 and b"empty" in r.stderr
    r = run(["run", "-m", os.path.join(ROOT, "README.md"), "-p", "x"], check=False)
    assert r.returncode == 1


def test_model_without_tokenizer(tmp_path):
    out = str(tmp_path / "plain.sluice")
    run(["pack", os.path.join(ROOT, "tests/data/qwen3_next"), "-o", out])
    r = gen(out, "-p", "x", check=False)
    assert r.returncode == 1 and b"no tokenizer.json" in r.stderr


def chat(model, lines, *args):
    r = run(["chat", "-m", model, "-n", "12", "--seed", "5"] + list(args), input="".join(l + "\n" for l in lines).encode())
    return r.stdout.decode()


def test_chat_keeps_state_between_turns(tiny_model, tiny_dir):
    n = 12  # chat() passes -n 12
    out = chat(tiny_model, ["Hello there", "/stats", "And again", "/stats"])
    stats = [l for l in out.splitlines() if l.startswith("context:") or l.startswith("last turn:")]
    ctx1, ctx2 = (int(l.split()[1]) for l in stats if l.startswith("context:"))
    (p1, g1), (p2, g2) = ((int(l.split()[2]), int(l.split()[8])) for l in stats if l.startswith("last turn:"))
    # a turn evaluates its prompt and every answer token but the last, which is evaluated at the start
    # of the next turn -- unless it was the end-of-turn token (then the answer was shorter than -n)
    eog1 = ctx1 == p1 + g1
    assert eog1 or ctx1 == p1 + g1 - 1, (ctx1, p1, g1)
    assert eog1 or g1 == n
    eog2 = ctx2 - ctx1 == p2 + g2
    assert eog2 or (ctx2 - ctx1 == p2 + g2 - 1 and g2 == n), (ctx1, ctx2, p2, g2)
    # the second turn's prompt is exactly what is new: the held answer token, the end of the first
    # answer, and the new user turn with the generation prompt -- never the history again
    hf = Tokenizer.from_file(os.path.join(tiny_dir, "tokenizer.json"))

    def count(text):
        return len(hf.encode(text).ids)
    assert p1 == count("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")
    new = count("<|im_start|>user\nAnd again<|im_end|>\n<|im_start|>assistant\n")
    assert p2 == (0 if eog1 else 1) + count("\n" if eog1 else "<|im_end|>\n") + new, (p2, ctx1, new)
    # same seed, same transcript (timings aside)
    def answers(o):
        return [l for l in o.splitlines() if not l.startswith("last turn:")]
    assert answers(out) == answers(chat(tiny_model, ["Hello there", "/stats", "And again", "/stats"]))


def test_chat_commands(tiny_model):
    out = chat(tiny_model, ["/think off", "hi", "/system Be brief.", "hi", "/stats", "/reset", "/stats", "/nope", "/quit",
                            "never read"])
    assert "[thinking off]" in out and "[system prompt set; conversation reset]" in out
    assert "[conversation reset]" in out and "context: 0 of" in out and "unknown command /nope" in out


def read_some(f, timeout):
    """The first bytes that f (a pipe) gives within timeout seconds, or b"" at its end or on timeout."""
    r, _, _ = select.select([f], [], [], timeout)
    return os.read(f.fileno(), 4096) if r else b""


def test_chat_ctrl_c_stops_the_answer(tiny_model):
    # SIGINT goes when the answer has begun (its first bytes are out), so neither a slow start nor a
    # loaded machine decides the outcome; the random tiny model may still end its answer by itself
    # before the signal arrives: try a few seeds
    stopped = False
    for seed in range(1, 16):
        p = subprocess.Popen([sluice_bin(), "chat", "-m", tiny_model, "-n", "4000", "--seed", str(seed)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(b"tell me a long story\n")
        p.stdin.flush()
        first = read_some(p.stdout, 60)
        assert first, "no answer within 60 s"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(b"/stats\n", timeout=120)
        out = first + out
        assert p.returncode == 0, err  # the program goes on after Ctrl-C
        assert b"context:" in out     # and answers the next command
        if b"[stopped]" in out:
            stopped = True
            # stopped early: far fewer than the 4000 tokens asked for were generated
            assert int(out.split(b"context: ")[1].split()[0]) < 2000
            break
    assert stopped
