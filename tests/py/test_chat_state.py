"""sluice chat --save / --load: a conversation saved after a turn and loaded by a new process goes on
exactly as the uninterrupted one (greedy), without evaluating its history again; damaged or foreign
state files are refused with one line naming the file, and a failed save never leaves a half file."""
import os

from conftest import ROOT, run

DEMO = os.path.join(ROOT, "models/demo.sluice")
ARGS = ["chat", "-m", DEMO, "-n", "24", "--temp", "0", "--think", "off"]
T1, T2 = "Read me Ruth chapter 1.", "And chapter 2?"


def answers(out):
    # one answer per turn, then /stats lines: keep the text lines
    return [l for l in out.decode().split("\n") if l and not l.startswith(("context:", "last turn:"))]


def test_save_then_load_continues_exactly(tmp_path):
    state = str(tmp_path / "conv.state")
    both = run(ARGS, input=f"{T1}\n{T2}\n".encode()).stdout
    first = run(ARGS + ["--save", state], input=f"{T1}\n".encode()).stdout
    assert os.path.getsize(state) > 0
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]
    second = run(ARGS + ["--load", state], input=f"{T2}\n/stats\n".encode()).stdout
    text = second.decode()
    assert both.decode().startswith(first.decode())
    assert both.decode() == first.decode() + text.split("context:")[0], (both, first, second)
    # the loaded context holds the first turn; the second turn evaluated only its own tokens
    ctx = int(text.split("context: ")[1].split(" of")[0])
    evaluated = int(text.split("last turn: ")[1].split(" prompt")[0])
    assert ctx > evaluated + 24


def test_bad_state_files(tmp_path, tiny_model):
    state = tmp_path / "conv.state"
    run(ARGS + ["--save", str(state)], input=f"{T1}\n".encode())
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 1
    bad = tmp_path / "bad.state"
    bad.write_bytes(bytes(data))
    r = run(ARGS + ["--load", str(bad)], input=b"", check=False)
    assert r.returncode != 0 and b"bad.state" in r.stderr and b"checksum" in r.stderr
    junk = tmp_path / "junk.state"
    junk.write_bytes(b"not a state at all")
    r = run(ARGS + ["--load", str(junk)], input=b"", check=False)
    assert r.returncode != 0 and b"junk.state" in r.stderr
    r = run(["chat", "-m", tiny_model, "--load", str(state)], input=b"", check=False)
    assert r.returncode != 0 and b"another model" in r.stderr, r.stderr
    # a save into a directory that does not exist: an error, and no file
    nodir = tmp_path / "no" / "such" / "x.state"
    r = run(ARGS + ["--save", str(nodir)], input=f"{T1}\n".encode(), check=False)
    assert b"x.state" in r.stderr and not nodir.exists()


def test_an_answer_cut_at_the_limit_says_so():
    # an answer that reaches -n ends with a mark (it ended mid-sentence with none); one that ends by
    # itself, or by Ctrl-C ([stopped]), does not get it
    out = run(["chat", "-m", DEMO, "-n", "5", "--temp", "0", "--think", "off"], input=f"{T1}\n".encode()).stdout.decode()
    assert out.endswith("\n[cut at 5 tokens: -n sets the limit]\n"), out
    assert out.count("[cut at") == 1
