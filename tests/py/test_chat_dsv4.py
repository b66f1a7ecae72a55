"""sluice's DeepSeek-V4 chat renderer (src/text/chat_dsv4.c) against the release template: llama.cpp's
models/templates/deepseek-ai-DeepSeek-V4.jinja, which llama.cpp's converter writes into every DeepSeek-V4 GGUF.

That template is not stored in this repository: tests/data/chat_dsv4/expected.json holds what jinja2 renders from
it for CONVS (configured as transformers' apply_chat_template: sandboxed, trim_blocks, lstrip_blocks, tojson =
json.dumps(ensure_ascii=False), plus the from_json filter the template uses), and sluice is checked against those
texts and against DeepSeek's tokenizer.json (the V3 vocabulary DeepSeek-V4 keeps) on their ids. With
SLUICE_LLAMA_CPP=/path/to/llama.cpp the template itself is rendered again and must give the stored texts, and
sluice renders with the real template text; `python3 tests/py/test_chat_dsv4.py LLAMA_CPP_DIR` rewrites the file."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import ROOT, run  # noqa: E402

EXPECTED = os.path.join(ROOT, "tests/data/chat_dsv4/expected.json")
TEMPLATE = "models/templates/deepseek-ai-DeepSeek-V4.jinja"
# what sluice recognises the template by (chat_is_dsv4) when the real one is not at hand
STUB = ("{# stands in for llama.cpp's " + TEMPLATE + ": <｜User｜> / <｜Assistant｜> turns, <｜DSML｜tool_calls> "
        "and <tool_result> blocks #}")
BOS = "<｜begin▁of▁sentence｜>"

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, \"quoted\" — ok",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "城市"},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
    {"type": "web_search"},
]
CALL = [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2,
                                                                                "opts": {"unit": "C", "x": [1, 2.5]}}}}]
CALL_STR = [{"type": "function", "function": {"name": "noop", "arguments": "{}"}}]
CALL_STR2 = [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"ok\": true}"}}]

CONVS = [
    {"messages": [{"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": False},
    {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": True},
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "How are you?"}]},
    {"messages": [{"role": "user", "content": "Q1"},
                  {"role": "assistant", "content": "A1", "reasoning_content": "step 1\nstep 2"},
                  {"role": "user", "content": "Q2"}], "enable_thinking": True},
    {"messages": [{"role": "user", "content": "Q1"},
                  {"role": "assistant", "content": "A1", "reasoning_content": "thought"}],
     "add_generation_prompt": False, "enable_thinking": True},
    {"messages": [{"role": "user", "content": "Q1"},
                  {"role": "assistant", "content": "<think>kept verbatim</think>A1", "reasoning_content": "r"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "system", "content": "first"}, {"role": "user", "content": "a"},
                  {"role": "assistant", "content": "b"}, {"role": "system", "content": "mid-conversation system"},
                  {"role": "user", "content": "c"}, {"role": "user", "content": "d"}]},
    {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "weather?"}], "tools": TOOLS},
    {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "weather?"}], "tools": TOOLS,
     "enable_thinking": True},
    {"messages": [{"role": "user", "content": "weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": CALL, "reasoning_content": "call it"},
                  {"role": "tool", "content": "{\"temp\": 21}"}], "tools": TOOLS, "enable_thinking": True},
    {"messages": [{"role": "user", "content": "two calls"},
                  {"role": "assistant", "content": "Let me check.", "tool_calls": CALL + CALL_STR + CALL_STR2},
                  {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "done"},
                  {"role": "assistant", "content": "It is sunny."}, {"role": "user", "content": "thanks"}],
     "tools": TOOLS},
    {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1", "reasoning_content": "t1"},
                  {"role": "user", "content": "q2"}, {"role": "assistant", "content": "", "tool_calls": CALL_STR},
                  {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a2", "reasoning_content": "t2"}],
     "add_generation_prompt": False, "enable_thinking": True},
    {"messages": [{"role": "user", "content": "多语言 😀 Привет\n\ttab"}], "enable_thinking": False},
    {"messages": [], "tools": []},
]


def render_jinja(template, conv):
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.filters["from_json"] = json.loads
    kw = {"messages": conv["messages"], "add_generation_prompt": conv.get("add_generation_prompt", True),
          "bos_token": BOS}
    for k in ("tools", "enable_thinking"):
        if k in conv:
            kw[k] = conv[k]
    return env.from_string(template).render(**kw)


def real_template():
    lc = os.environ.get("SLUICE_LLAMA_CPP")
    p = lc and os.path.join(lc, TEMPLATE)
    return open(p, encoding="utf-8").read() if p and os.path.exists(p) else None


@pytest.fixture(scope="module")
def dsv4_tok(deepseek_dir, tmp_path_factory):
    """DeepSeek's tokenizer.json with a tokenizer_config.json whose chat template is DeepSeek-V4's."""
    d = tmp_path_factory.mktemp("dsv4tok")
    cfg = json.load(open(os.path.join(deepseek_dir, "tokenizer_config.json")))
    cfg["chat_template"] = real_template() or STUB
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False), encoding="utf-8")
    (d / "tokenizer.json").write_bytes(open(os.path.join(deepseek_dir, "tokenizer.json"), "rb").read())
    return str(d / "tokenizer.json")


def test_expected_is_what_the_template_renders():
    t = real_template()
    if t is None:
        pytest.skip("SLUICE_LLAMA_CPP (llama.cpp's source, for " + TEMPLATE + ") not set")
    assert json.load(open(EXPECTED, encoding="utf-8")) == [render_jinja(t, c) for c in CONVS]


@pytest.mark.parametrize("i", range(len(CONVS)))
def test_dsv4_chat_matches_template(i, dsv4_tok):
    from tokenizers import Tokenizer
    want = json.load(open(EXPECTED, encoding="utf-8"))[i]
    conv = json.dumps(CONVS[i]).encode()
    got = run(["tokenize", "--tokenizer", dsv4_tok, "--chat", "--text"], input=conv).stdout.decode()
    assert got == want
    ids = [int(x) for x in run(["tokenize", "--tokenizer", dsv4_tok, "--chat"], input=conv).stdout.split()]
    assert ids == Tokenizer.from_file(dsv4_tok).encode(want, add_special_tokens=False).ids


def test_dsv4_chat_errors(dsv4_tok):
    def err(conv):
        r = run(["tokenize", "--tokenizer", dsv4_tok, "--chat"], input=json.dumps(conv).encode(), check=False)
        assert r.returncode == 1
        return r.stderr.decode()
    u = [{"role": "user", "content": "x"}]
    assert "tools[0] is a function without \"function\"" in err({"messages": u, "tools": [{"type": "function"}]})
    assert "tools must be a JSON array" in err({"messages": u, "tools": {"type": "function"}})
    bad = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "",
                                                "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]
    assert "tool_calls[0] needs a name and an object of arguments" in err({"messages": bad})
    assert "unknown role 'developer'" in err({"messages": [{"role": "developer", "content": "x"}]})


def test_run_chat_with_the_dsv4_template(tmp_path):
    """`sluice run --chat` on a DeepSeek-V4 model whose tokenizer carries the template (it said "not ChatML")."""
    import shutil
    src = tmp_path / "dsv4"
    shutil.copytree(os.path.join(ROOT, "tests/data/deepseek_v4"), src)
    shutil.copy(os.path.join(ROOT, "tests/data/tiny_tokenizer/tokenizer.json"), src / "tokenizer.json")
    cfg = json.load(open(os.path.join(ROOT, "tests/data/tiny_tokenizer/tokenizer_config.json")))
    cfg["chat_template"] = real_template() or STUB
    (src / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False), encoding="utf-8")
    p = str(tmp_path / "m.sluice")
    run(["pack", str(src), "-o", p])
    r = run(["run", p, "-p", "hi", "--chat", "-n", "4", "--temp", "0", "--system", "be brief"])
    assert r.returncode == 0 and r.stdout.strip()
    t = run(["tokenize", "-m", p, "--chat", "--text"],
            input=json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()).stdout.decode()
    assert t == "<｜User｜>hi<｜Assistant｜></think>"  # the tiny tokenizer has no bos_token
    # `sluice chat` joins follow-up turns as ChatML's: with this template the second turn is refused, said plainly
    c = run(["chat", "-m", p, "-n", "3", "--temp", "0"], input=b"hi\nand again\n", check=False)
    assert "takes one turn here" in c.stderr.decode(), c.stderr.decode()


def test_serve_splits_dsv4_thinking(tmp_path):
    """`sluice serve` on a DeepSeek-V4 model: its prompt opens the think block with "<think>" (no newline, as
    Qwen's has), so with thinking on the answer is reasoning (OpenAI reasoning_content, an Anthropic thinking
    block, streamed too), off it is content; either way the text is the completion of the rendered prompt."""
    from test_serve import Server
    import shutil
    src = tmp_path / "dsv4"
    shutil.copytree(os.path.join(ROOT, "tests/data/deepseek_v4"), src)
    shutil.copy(os.path.join(ROOT, "tests/data/tiny_tokenizer/tokenizer.json"), src / "tokenizer.json")
    cfg = json.load(open(os.path.join(ROOT, "tests/data/tiny_tokenizer/tokenizer_config.json")))
    cfg["chat_template"] = real_template() or STUB
    (src / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False), encoding="utf-8")
    p = str(tmp_path / "m.sluice")
    run(["pack", str(src), "-o", p])
    msgs = [{"role": "user", "content": "hi"}]
    s = Server(tmp_path, "-m", p)
    try:
        name = json.loads(s.request("GET", "/v1/models")[2])["data"][0]["id"]

        def post(path, body):
            st, _, b = s.request("POST", path, dict(model=name, temperature=0, max_tokens=6, **body))
            assert st == 200, b
            return b.decode()

        def completion(thinking):
            prompt = "<｜User｜>hi<｜Assistant｜>" + ("<think>" if thinking else "</think>")
            return json.loads(post("/v1/completions", {"prompt": prompt}))["choices"][0]["text"]

        on, off = completion(True), completion(False)
        assert "</think>" not in on and on.strip("\n")  # the tiny model never closes the block in 6 tokens
        m = json.loads(post("/v1/chat/completions", {"messages": msgs, "chat_template_kwargs": {"enable_thinking": True}}))
        m = m["choices"][0]["message"]
        assert m.get("reasoning_content") == on.strip("\n") and not m.get("content"), m
        m = json.loads(post("/v1/chat/completions", {"messages": msgs}))["choices"][0]["message"]
        assert m.get("content") == off and not m.get("reasoning_content"), m
        deltas = [json.loads(line[6:]) for line in post("/v1/chat/completions", {
            "messages": msgs, "stream": True, "chat_template_kwargs": {"enable_thinking": True}}).splitlines()
            if line.startswith("data: {")]
        got = [d["choices"][0]["delta"] for d in deltas if d.get("choices")]
        assert "".join(x.get("reasoning_content") or "" for x in got) == on.strip("\n")
        assert not "".join(x.get("content") or "" for x in got)
        a = json.loads(post("/v1/messages", {"messages": msgs, "thinking": {"type": "enabled", "budget_tokens": 6}}))
        assert [b["type"] for b in a["content"]] == ["thinking"] and a["content"][0]["thinking"] == on.strip("\n"), a
    finally:
        assert s.stop() == 0, s.stderr()


if __name__ == "__main__":  # python3 tests/py/test_chat_dsv4.py LLAMA_CPP_DIR: writes EXPECTED
    tmpl = open(os.path.join(sys.argv[1], TEMPLATE), encoding="utf-8").read()
    with open(EXPECTED, "w", encoding="utf-8") as f:
        json.dump([render_jinja(tmpl, c) for c in CONVS], f, ensure_ascii=False, indent=0)
        f.write("\n")
