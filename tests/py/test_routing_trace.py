"""`--record-routing FILE` on every command that runs a model (issue 25): run, chat, serve, bench, perplexity
write the experts each routed row chose as a routing trace (src/model/rtrace.h) that `bench --routing trace:FILE`
replays. The demo model (6 MoE layers, 32 experts, 4 a token) answers deterministically (greedy), so its traces
can be compared: a prompt's rows do not depend on what is generated after it."""
import struct

from conftest import run
from test_serve import DEMO, Server, oai

TOKENS = "1,872,198,3838,374,264,1273,30"


def trace(path):
    """(tokens, layers, experts, k, rows[token][layer] = tuple of k experts) of a trace file."""
    b = open(path, "rb").read()
    assert b[:8] == b"SLRTRACE"
    ver, t, layers, e, k, width = struct.unpack_from("<6I", b, 8)
    assert ver == 1 and width in (1, 2)
    vals = struct.unpack_from("<%d%s" % (t * layers * k, "B" if width == 1 else "H"), b, 32)
    assert len(b) == 32 + t * layers * k * width
    rows = [[tuple(vals[(i * layers + l) * k:(i * layers + l + 1) * k]) for l in range(layers)] for i in range(t)]
    for r in rows:
        for c in r:
            assert len(set(c)) == k and all(0 <= x < e for x in c)
    return t, layers, e, k, rows


def test_run_records_its_rows(tmp_path):
    n = len(TOKENS.split(","))
    a, b = tmp_path / "a.rtrace", tmp_path / "b.rtrace"
    r = run(["run", "-m", DEMO, "--tokens", TOKENS, "-n", "1", "--threads", "1", "--record-routing", str(a)])
    assert b"wrote" in r.stderr
    run(["run", "-m", DEMO, "--tokens", TOKENS, "-n", "6", "--threads", "1", "--record-routing", str(b)])
    ta, tb = trace(a), trace(b)
    assert ta[:4] == (n, 6, 32, 4) and tb[:4] == (n + 5, 6, 32, 4)  # the prompt, then one row a generated token
    assert tb[4][:n] == ta[4]  # the prompt routes the same whatever follows it
    r = run(["bench", "-m", DEMO, "--threads", "1", "--prompt", "4", "--gen", "4", "--routing", f"trace:{b}"])
    assert b"replayed as recorded" in r.stderr


def test_text_run_bench_and_errors(tmp_path):
    p = tmp_path / "t.rtrace"
    run(["run", "-m", DEMO, "-p", "And it came to pass", "-n", "4", "--threads", "1", "--record-routing", str(p)])
    t = trace(p)
    assert t[1:4] == (6, 32, 4) and t[0] >= 5
    q = tmp_path / "q.rtrace"
    run(["bench", "-m", DEMO, "--threads", "1", "--prompt", "8", "--gen", "4", "--record-routing", str(q)])
    assert trace(q)[0] >= 12
    # a file that cannot be written: the command says so and fails, the text is still printed
    r = run(["run", "-m", DEMO, "--tokens", TOKENS, "-n", "2", "--threads", "1", "--record-routing",
             str(tmp_path / "no" / "such" / "dir.rtrace")], check=False)
    assert r.returncode != 0 and b"--record-routing" in r.stderr and r.stdout.strip()
    # recording and replaying at once is refused
    r = run(["bench", "-m", DEMO, "--threads", "1", "--prompt", "4", "--gen", "2", "--routing", f"trace:{q}",
             "--record-routing", str(tmp_path / "x.rtrace")], check=False)
    assert r.returncode != 0 and b"replayed or recorded" in r.stderr


def test_serve_writes_at_exit(tmp_path):
    p = tmp_path / "s.rtrace"
    s = Server(tmp_path, "-m", DEMO, "--threads", "1", "--record-routing", str(p))
    try:
        r = oai(s).completions.create(model="demo", prompt="And it came to pass", max_tokens=8, temperature=0)
        assert r.usage.completion_tokens == 8
        n = r.usage.prompt_tokens
    finally:
        assert s.stop() == 0, s.stderr()
    assert "wrote" in s.stderr()
    t = trace(p)
    assert t[1:4] == (6, 32, 4) and t[0] >= n + 7
    # two models, one trace: refused before anything opens
    r = run(["serve", "-m", DEMO, "-m", f"b={DEMO}", "--record-routing", str(tmp_path / "two.rtrace")], check=False)
    assert r.returncode != 0 and b"records one model" in r.stderr
