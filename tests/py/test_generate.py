"""`sluice run -p` and `sluice chat` end to end on the tiny Qwen3-Next fixture packed with the 256-id
tokenizer: determinism by seed, greedy == --tokens path, stop strings, max tokens, bad input, and the
chat REPL keeping its state between turns."""
import json
import os
import signal
import subprocess
import time

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
    ids = hf.encode("the lazy dog").ids
    want = gen(tiny_model, "--tokens", ",".join(map(str, ids)), "-n", "12", "--temp", "0", "--ids").stdout.split()
    got = gen(tiny_model, "-p", "the lazy dog", "-n", "12", "--temp", "0", "--ids").stdout.split()
    assert got == want
    text = gen(tiny_model, "-p", "the lazy dog", "-n", "12", "--temp", "0").stdout.decode()
    assert text[:-1] == hf.decode([int(x) for x in want], skip_special_tokens=True)


def test_sampling_flags_and_stats(tiny_model):
    r = gen(tiny_model, "-p", "x", "-n", "8", "--seed", "1", "--top-k", "5", "--top-p", "0.9", "--min-p", "0.1",
            "--repeat-penalty", "1.3", "--presence-penalty", "0.5", "--ids", "--stats")
    assert len(r.stdout.split()) == 8 and b"8 generated" in r.stderr and b"stop: length" in r.stderr
    r = gen(tiny_model, "-p", "x", "--top-p", "2", check=False)
    assert r.returncode == 1 and b"out of range" in r.stderr


def test_text_with_streaming_options(tiny_model):
    # the model options of every command work with text prompts: a tiny expert cache, direct I/O,
    # LFU, one thread -- same greedy text as the all-resident model, and the stats line reports the cache
    want = gen(tiny_model, "-p", "the lazy dog", "-n", "12", "--temp", "0", "--resident").stdout
    r = gen(tiny_model, "-p", "the lazy dog", "-n", "12", "--temp", "0", "--cache", "100K", "--io", "direct",
            "--policy", "lfu", "--threads", "1", "--stats")
    assert r.stdout == want
    assert b"hit rate" in r.stderr and b"streamed" in r.stderr
    r = gen(tiny_model, "-p", "x", "--cache", "lots", check=False)
    assert r.returncode == 1 and b"--cache" in r.stderr


def test_stop_string(tiny_model):
    full = gen(tiny_model, "-p", "the", "-n", "60", "--temp", "0").stdout.decode()[:-1]
    # a stop string taken from the middle of the greedy text cuts it right there
    mid = full[len(full) // 2:len(full) // 2 + 2]
    if len(mid.encode()) == 2 and "\ufffd" not in mid:
        cut = gen(tiny_model, "-p", "the", "-n", "60", "--temp", "0", "--stop", mid, "--stats")
        assert cut.stdout.decode()[:-1] == full[:full.index(mid)]
        assert b"stop: stop string" in cut.stderr


def test_chat_prompt_and_think(tiny_model):
    r = gen(tiny_model, "-p", "Hi", "--chat", "--think", "off", "-n", "4", "--stats", "--temp", "0")
    # the prompt is the rendered template: <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>...
    assert b"prompt" in r.stderr
    n_off = int(r.stderr.split(b"tokens: ")[1].split()[0])
    r = gen(tiny_model, "-p", "Hi", "--chat", "-n", "4", "--stats", "--temp", "0")
    n_on = int(r.stderr.split(b"tokens: ")[1].split()[0])
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


def test_chat_keeps_state_between_turns(tiny_model):
    out = chat(tiny_model, ["Hello there", "/stats", "And again", "/stats"])
    stats = [l for l in out.splitlines() if l.startswith("context:") or l.startswith("last turn:")]
    ctx1, ctx2 = (int(l.split()[1]) for l in stats if l.startswith("context:"))
    p1, p2 = (int(l.split()[2]) for l in stats if l.startswith("last turn:"))
    # the second turn evaluates only its own tokens: context grows by exactly its prompt + answer
    assert p2 < ctx1 + p2 and ctx2 > ctx1
    assert p2 <= len("<|im_end|>\n<|im_start|>user\nAnd again<|im_end|>\n<|im_start|>assistant\n") + 2
    # same seed, same transcript (timings aside)
    def answers(o):
        return [l for l in o.splitlines() if not l.startswith("last turn:")]
    assert answers(out) == answers(chat(tiny_model, ["Hello there", "/stats", "And again", "/stats"]))


def test_chat_commands(tiny_model):
    out = chat(tiny_model, ["/think off", "hi", "/system Be brief.", "hi", "/stats", "/reset", "/stats", "/nope", "/quit",
                            "never read"])
    assert "[thinking off]" in out and "[system prompt set; conversation reset]" in out
    assert "[conversation reset]" in out and "context: 0 of" in out and "unknown command /nope" in out


def test_chat_ctrl_c_stops_the_answer(tiny_model):
    # the random tiny model may end its answer by itself before the signal arrives: try a few seeds
    stopped = False
    for seed in range(1, 16):
        p = subprocess.Popen([sluice_bin(), "chat", "-m", tiny_model, "-n", "4000", "--seed", str(seed)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(b"tell me a long story\n")
        p.stdin.flush()
        time.sleep(0.15)
        p.send_signal(signal.SIGINT)
        time.sleep(0.05)
        out, err = p.communicate(b"/stats\n", timeout=120)
        assert p.returncode == 0, err  # the program goes on after Ctrl-C
        assert b"context:" in out     # and answers the next command
        if b"[stopped]" in out:
            stopped = True
            break
    assert stopped
