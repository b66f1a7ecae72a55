"""sluice's built-in ChatML formatter against jinja2 rendering the real Qwen3 chat template the way
transformers' apply_chat_template does (trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False))."""
import json
import os

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from conftest import run

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, \"quoted\" — ok",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "城市"},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
]
CALL = [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]
CALL_STR = [{"name": "noop", "arguments": "{}"}]

CONVS = [
    {"messages": [{"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": False},
    {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": True},
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "How are you?"}]},
    {"messages": [{"role": "user", "content": "Q1"},
                  {"role": "assistant", "content": "<think>\nstep 1\nstep 2\n</think>\n\nA1"},
                  {"role": "user", "content": "Q2"}], "enable_thinking": False},
    {"messages": [{"role": "user", "content": "Q1"},
                  {"role": "assistant", "content": "<think>\nr\n</think>\n\nA1"}], "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "Q1"},
                  {"role": "assistant", "content": "A1", "reasoning_content": "\nthought\n"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "\n\nA with leading newlines"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "pre<think>a</think>b</think>c"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "weather?"}], "tools": TOOLS},
    {"messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS},
    {"messages": [{"role": "user", "content": "weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": CALL},
                  {"role": "tool", "content": "{\"temp\": 21}"}], "tools": TOOLS},
    {"messages": [{"role": "user", "content": "two calls"},
                  {"role": "assistant", "content": "Let me check.", "tool_calls": CALL + CALL_STR},
                  {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "done"},
                  {"role": "assistant", "content": "It is sunny."}, {"role": "user", "content": "thanks"}],
     "tools": TOOLS, "enable_thinking": False},
    {"messages": [{"role": "user", "content": "<tool_response>\nfake\n</tool_response>"},
                  {"role": "assistant", "content": "<think>\nx\n</think>\n\ny"}], "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                  {"role": "system", "content": "mid-conversation system"}, {"role": "user", "content": "c"}]},
    {"messages": [{"role": "user", "content": "多语言 😀 Привет\n\ttab"}], "enable_thinking": False},
    {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
                  {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>t2</think>a2"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": CALL},
                  {"role": "tool", "content": "r1"}, {"role": "assistant", "content": "<think>\nafter tool\n</think>\n\nfinal"}],
     "tools": TOOLS, "add_generation_prompt": False},
]


def render_jinja(template, conv):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    kw = {"messages": conv["messages"], "add_generation_prompt": conv.get("add_generation_prompt", True)}
    if "tools" in conv:
        kw["tools"] = conv["tools"]
    if "enable_thinking" in conv:
        kw["enable_thinking"] = conv["enable_thinking"]
    return env.from_string(template).render(**kw)


@pytest.mark.parametrize("i", range(len(CONVS)))
def test_chat_matches_jinja2(i, qwen_dir):
    conv = CONVS[i]
    template = json.load(open(os.path.join(qwen_dir, "tokenizer_config.json")))["chat_template"]
    want = render_jinja(template, conv)
    path = os.path.join(qwen_dir, "tokenizer.json")
    got = run(["tokenize", "--tokenizer", path, "--chat", "--text"], input=json.dumps(conv).encode()).stdout.decode()
    assert got == want
    ids = [int(x) for x in run(["tokenize", "--tokenizer", path, "--chat"], input=json.dumps(conv).encode()).stdout.split()]
    assert ids == Tokenizer.from_file(path).encode(want).ids


def test_chat_errors(tiny_dir, tmp_path):
    path = os.path.join(tiny_dir, "tokenizer.json")
    conv = {"messages": [{"role": "narrator", "content": "x"}]}
    r = run(["tokenize", "--tokenizer", path, "--chat"], input=json.dumps(conv).encode(), check=False)
    assert r.returncode == 1 and b"unknown role 'narrator'" in r.stderr
    # a tokenizer without a template, and one whose template is not ChatML
    d = tmp_path / "t"
    d.mkdir()
    (d / "tokenizer.json").write_text(open(path).read())
    r = run(["tokenize", "--tokenizer", str(d / "tokenizer.json"), "--chat"],
            input=json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), check=False)
    assert r.returncode == 1 and b"no chat template" in r.stderr
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ bos_token }}[INST] {{ m }} [/INST]"}))
    r = run(["tokenize", "--tokenizer", str(d / "tokenizer.json"), "--chat"],
            input=json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), check=False)
    assert r.returncode == 1 and b"not ChatML" in r.stderr
