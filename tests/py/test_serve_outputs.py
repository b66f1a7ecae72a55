"""`sluice serve`'s structured outputs with the official `openai` and `anthropic` clients, on the demo
model (a small model trained on scripture, which knows nothing of JSON: whatever it writes under a
schema must still parse and validate, which only the constrained decoding can give): OpenAI
response_format json_schema (raw and from a pydantic model through the client's parse helper) and
json_object, Anthropic output_config.format, forced tool calls in both APIs, validated with
`jsonschema`; unsupported schemas refused with 400 naming the keyword; constrained requests in a batch
equal to the same requests alone. Then logprobs (chat and completions, whole and streamed: the greedy
token is the top one) and n choices, whole and streamed (choice i is seed + i alone)."""
import datetime
import ipaddress
import json
import re
import threading
import uuid
from typing import List, Literal, Optional

import jsonschema
import openai
import pydantic
import pytest

from test_serve import DEMO, RUTH, Server, ant, error_of, oai

VERSE = {"type": "object", "additionalProperties": False, "required": ["book", "chapter", "ok", "tags"],
         "properties": {"book": {"type": "string", "enum": ["Ruth", "Job", "Mark"]}, "chapter": {"type": "integer"},
                        "ok": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 12},
                        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1,
                                 "maxItems": 3}}}
NESTED = {"$defs": {"ref": {"type": "object", "additionalProperties": False, "required": ["book", "verse"],
                            "properties": {"book": {"const": "Ruth"}, "verse": {"type": "number"}}}},
          "type": "object", "additionalProperties": False, "required": ["refs", "next"],
          "properties": {"refs": {"type": "array", "items": {"$ref": "#/$defs/ref"}, "maxItems": 2},
                         "next": {"anyOf": [{"$ref": "#/$defs/ref"}, {"type": "null"}]}}}
TOOLS = [{"type": "function", "function": {"name": "get_verse", "description": "Look a verse up",
                                           "parameters": {"type": "object", "additionalProperties": False,
                                                          "required": ["chapter", "verse"],
                                                          "properties": {"chapter": {"type": "integer"},
                                                                         "verse": {"type": "integer"}}}}},
         {"type": "function", "function": {"name": "search", "parameters": {
             "type": "object", "properties": {"words": {"type": "string", "maxLength": 10}}, "required": ["words"]}}}]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve-outputs"), "-m", DEMO)
    yield s
    assert s.stop() == 0, s.stderr()


def schema_format(schema, name="answer"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def ask(server, **kw):
    args = dict(model="demo", messages=RUTH, max_tokens=300, temperature=0)
    args.update(kw)
    return oai(server).chat.completions.create(**args)


def test_json_schema_validates(demo):
    """Greedy and sampled answers under a schema parse and validate; streamed equals whole."""
    for schema in (VERSE, NESTED):
        for kw in ({}, {"temperature": 1.0, "seed": 1}, {"temperature": 1.0, "seed": 2}, {"temperature": 1.5, "seed": 3}):
            r = ask(demo, response_format=schema_format(schema), **kw)
            c = r.choices[0]
            assert c.finish_reason == "stop", (kw, c)
            jsonschema.validate(json.loads(c.message.content), schema)
    whole = ask(demo, response_format=schema_format(VERSE), temperature=1.0, seed=5).choices[0].message.content
    parts = [ch.choices[0].delta.content or "" for ch in ask(demo, response_format=schema_format(VERSE), temperature=1.0,
                                                             seed=5, stream=True) if ch.choices]
    assert "".join(parts) == whole


def test_json_object_and_pydantic(demo):
    r = ask(demo, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].message.content), dict)

    class Verse(pydantic.BaseModel):
        book: Literal["Ruth", "Job"]
        chapter: int
        amen: bool
        where: Optional[Literal["here", "there"]]
        words: List[Literal["grace", "field"]]

    p = oai(demo).chat.completions.parse(model="demo", messages=RUTH, max_tokens=300, temperature=0,
                                         response_format=Verse)
    v = p.choices[0].message.parsed
    assert isinstance(v, Verse) and v.book in ("Ruth", "Job")


def test_anthropic_output_format(demo):
    schema = {"type": "object", "properties": {"book": {"enum": ["Ruth", "Job"]}, "verses": {
        "type": "array", "items": {"type": "integer"}, "maxItems": 4}}, "required": ["book", "verses"],
              "additionalProperties": False}
    m = ant(demo).messages.create(model="demo", max_tokens=300, messages=RUTH, extra_body={"temperature": 0},
                                  output_config={"format": {"type": "json_schema", "schema": schema}})
    assert m.stop_reason == "end_turn" and m.content[0].type == "text"
    jsonschema.validate(json.loads(m.content[0].text), schema)
    # the beta's output_format, as a raw request
    s, _, b = demo.request("POST", "/v1/messages", {"max_tokens": 300, "messages": RUTH, "temperature": 0,
                                                    "output_format": {"type": "json_schema", "schema": schema}})
    assert s == 200
    jsonschema.validate(json.loads(json.loads(b)["content"][0]["text"]), schema)


def test_forced_tool_calls(demo):
    """tool_choice naming a function, or "required": the answer is a call whose arguments validate."""
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for choice, want in (({"type": "function", "function": {"name": "get_verse"}}, "get_verse"),
                         ({"type": "function", "function": {"name": "search"}}, "search"), ("required", None)):
        for kw in ({}, {"temperature": 1.0, "seed": 4}):
            r = ask(demo, tools=TOOLS, tool_choice=choice, **kw)
            c = r.choices[0]
            assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c
            f = c.message.tool_calls[0].function
            assert want in (None, f.name) and f.name in by_name
            jsonschema.validate(json.loads(f.arguments), by_name[f.name])
    # Anthropic: {"type": "tool", "name"} and {"type": "any"}
    atools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for choice in ({"type": "tool", "name": "get_verse"}, {"type": "any"}):
        m = ant(demo).messages.create(model="demo", max_tokens=300, messages=RUTH, tools=atools, tool_choice=choice,
                                      extra_body={"temperature": 0})
        use = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and len(use) == 1
        jsonschema.validate(use[0].input, by_name[use[0].name])
    # a name that is not a tool
    with pytest.raises(openai.BadRequestError) as e:
        ask(demo, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "nope" in str(e.value)


KEYWORDS = {"type": "object", "additionalProperties": False,
            "required": ["code", "day", "at", "id", "mail", "ip", "chapter", "verse", "score", "ref"],
            "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                           "day": {"type": "string", "format": "date"},
                           "at": {"type": "string", "format": "date-time"},
                           "id": {"type": "string", "format": "uuid"},
                           "mail": {"type": "string", "format": "email"},
                           "ip": {"type": "string", "format": "ipv4"},
                           "chapter": {"type": "integer", "minimum": 1, "maximum": 4},
                           "verse": {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 23},
                           "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                           "ref": {"type": "string", "pattern": "^(Ruth|Boaz) \\d{1,2}:\\d{1,2}$"}}}


def test_schema_keywords_pattern_format_bounds(demo):
    """pattern, format and integer bounds: every sampled answer validates, as checked by Python itself
    (re.search, datetime, uuid, ipaddress, the bounds)."""
    for seed in range(4):
        r = ask(demo, response_format=schema_format(KEYWORDS), temperature=1.0, seed=seed, max_tokens=600)
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        v = json.loads(c.message.content)
        jsonschema.validate(v, KEYWORDS)  # pattern and the bounds (formats are annotations to it)
        datetime.date.fromisoformat(v["day"])
        datetime.datetime.fromisoformat(v["at"])
        assert str(uuid.UUID(v["id"])) == v["id"].lower()
        assert "@" in v["mail"] and "." in v["mail"].split("@")[1]
        ipaddress.IPv4Address(v["ip"])
        assert 1 <= v["chapter"] <= 4 and -3 < v["verse"] < 23 and 0 < v["score"] <= 1 and re.search(r"^(Ruth|Boaz) \d{1,2}:\d{1,2}$", v["ref"])


def test_strict_tools_with_auto(demo):
    """tool_choice auto with a strict tool: the answer is free text or calls whose arguments validate
    (the demo model rarely calls; the grammar itself is tests/test_serve.c serve_parse_strict_tools_auto)."""
    strict = [dict(TOOLS[0], function=dict(TOOLS[0]["function"], strict=True)), TOOLS[1]]
    for seed in range(3):
        r = ask(demo, tools=strict, temperature=1.0, seed=seed, max_tokens=60)
        c = r.choices[0]
        assert c.finish_reason in ("stop", "length", "tool_calls")
        for call in c.message.tool_calls or []:
            if call.function.name == "get_verse":
                jsonschema.validate(json.loads(call.function.arguments), TOOLS[0]["function"]["parameters"])
        assert "<tool_call>" not in (c.message.content or "")
    m = ant(demo).messages.create(model="demo", max_tokens=40, messages=RUTH, tools=[
        {"name": "get_verse", "strict": True, "input_schema": TOOLS[0]["function"]["parameters"]}])
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_unsupported_schemas_refused(demo):
    cases = [({"type": "object", "properties": {"id": {"type": "string", "pattern": "^(?=a)[a-z]+$"}}}, "lookaround",
              "/properties/id"),
             ({"type": "number", "minimum": 0.5}, "'minimum' on a number must be an integer", "(at /)"),
             ({"type": "object", "properties": {"d": {"type": "string", "format": "hostname"}}}, "format 'hostname'",
              "/properties/d"),
             ({"type": "object", "properties": {"n": {"multipleOf": 3}}}, "'multipleOf'", "/properties/n"),
             ({"$ref": "#/$defs/none"}, "names nothing", "")]
    for schema, keyword, where in cases:
        s, _, b = demo.request("POST", "/v1/chat/completions", {"messages": RUTH, "response_format": schema_format(schema)})
        err = error_of(b)
        assert s == 400 and keyword in err["message"] and where in err["message"], err
        assert err["param"] == "response_format.json_schema.schema" and err["type"] == "invalid_request_error"
    s, _, b = demo.request("POST", "/v1/chat/completions", {"messages": RUTH, "response_format": {"type": "yaml"}})
    assert s == 400 and error_of(b)["param"] == "response_format.type"
    s, _, b = demo.request("POST", "/v1/messages", {"max_tokens": 9, "messages": RUTH, "output_config": {
        "format": {"type": "json_schema", "schema": {"type": "string", "pattern": "(x)\\1"}}}})
    assert s == 400 and "'pattern'" in error_of(b, True)["message"]
    assert ask(demo, max_tokens=3).choices[0].finish_reason == "length"  # the server goes on


def test_constrained_batch_equals_alone(demo):
    """Constrained sequences sampled together in batched steps give what each gives alone."""
    def one(seed, out, i):
        out[i] = ask(demo, response_format=schema_format(VERSE), temperature=1.0, seed=seed).choices[0].message.content
    alone = [None] * 6
    for i in range(6):
        one(10 + i, alone, i)
    together = [None] * 6
    ts = [threading.Thread(target=one, args=(10 + i, together, i)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert together == alone and len(set(alone)) > 1


# ---- logprobs and n -----------------------------------------------------------------------------------


def test_logprobs_chat(demo):
    """Greedy: each token is the top one of its step, with the same log-probability; the alternatives are
    sorted and their probabilities sum to at most 1; streamed logprobs equal whole ones."""
    r = ask(demo, max_tokens=20, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) >= 15
    for e in content:
        top = [t.logprob for t in e.top_logprobs]
        assert len(top) == 3 and e.top_logprobs[0].token == e.token and top[0] == e.logprob <= 0
        assert top == sorted(top, reverse=True) and sum(2.718281828 ** t for t in top) <= 1.0001
        assert bytes(e.bytes).decode(errors="replace") == e.token
    assert content[-1].token in r.choices[0].message.content
    # sampled: the drawn token's log-probability is at most the best one's
    s = ask(demo, max_tokens=20, logprobs=True, top_logprobs=1, temperature=1.0, seed=3)
    assert all(e.logprob <= e.top_logprobs[0].logprob for e in s.choices[0].logprobs.content)
    streamed = []
    for ch in ask(demo, max_tokens=20, logprobs=True, top_logprobs=3, stream=True):
        if ch.choices and ch.choices[0].logprobs:
            streamed += ch.choices[0].logprobs.content
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    # without logprobs: null, as before
    assert ask(demo, max_tokens=2).choices[0].logprobs is None


def test_logprobs_completions(demo):
    c = oai(demo)
    r = c.completions.create(model="demo", prompt="And it came to pass", max_tokens=12, temperature=0, logprobs=2,
                             echo=True)
    lp = r.choices[0].logprobs
    text = r.choices[0].text
    assert text.startswith("And it came to pass") and "".join(lp.tokens) == text[len("And it came to pass"):]
    assert lp.text_offset[0] == len("And it came to pass")
    for tok, p, top, off in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert max(top.values()) == p == top[tok] and len(top) <= 2 and text[off:].startswith(tok)


def test_n_choices(demo):
    """n choices: greedy ones equal; sampled choice i is what seed + i gives alone."""
    r = ask(demo, max_tokens=16, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2] and len({c.message.content for c in r.choices}) == 1
    one = ask(demo, max_tokens=16)
    assert r.usage.completion_tokens == 3 * one.usage.completion_tokens
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    s = ask(demo, max_tokens=16, n=3, temperature=1.0, seed=7)
    alone = [ask(demo, max_tokens=16, temperature=1.0, seed=7 + i).choices[0].message.content for i in range(3)]
    assert [c.message.content for c in s.choices] == alone and len(set(alone)) > 1
    p = oai(demo).completions.create(model="demo", prompt="And it came to pass", max_tokens=8, temperature=1.0, seed=9,
                                     n=2, logprobs=1)
    assert [c.index for c in p.choices] == [0, 1] and all(c.logprobs.tokens for c in p.choices)
    # constrained choices are each valid
    v = ask(demo, n=2, response_format=schema_format(VERSE), temperature=1.0, seed=1)
    for c in v.choices:
        jsonschema.validate(json.loads(c.message.content), VERSE)


def test_n_choices_share_the_prompt(demo):
    """n choices evaluate the prompt once: the scheduler's evaluated rows grow by one prompt and the
    choices' decoded tokens (each choice's last token is never evaluated), not n prompts."""
    rows = 'sluice_batch_rows_total{model="demo"}'
    args = dict(model="demo", prompt="And it came to pass, " * 100, max_tokens=4, temperature=1.0, seed=3)
    before = demo.metrics()[rows]
    r = oai(demo).completions.create(n=4, **args)
    got = demo.metrics()[rows] - before
    assert r.usage.prompt_tokens > 500 and len(r.choices) == 4
    assert got == r.usage.prompt_tokens + r.usage.completion_tokens - 4, (got, r.usage)
    alone = [oai(demo).completions.create(**dict(args, seed=3 + i)).choices[0].text for i in range(4)]
    assert [c.text for c in r.choices] == alone


def test_n_choices_streamed(demo):
    """n choices streamed: each chunk names its choice; choice i's deltas joined are the whole answer's
    choice i; one usage chunk (summed) and one [DONE] at the end."""
    whole = ask(demo, max_tokens=12, n=3, temperature=1.0, seed=7)
    chunks = list(oai(demo).chat.completions.create(model="demo", messages=RUTH, max_tokens=12, n=3, temperature=1.0,
                                                    seed=7, stream=True, stream_options={"include_usage": True}))
    text, finish = ["", "", ""], [None] * 3
    for c in chunks[:-1]:
        assert len(c.choices) == 1 and c.usage is None and len({c.id for c in chunks}) == 1
        k = c.choices[0]
        assert finish[k.index] is None  # nothing after a choice's finish chunk
        text[k.index] += k.delta.content or ""
        finish[k.index] = k.finish_reason
    assert text == [c.message.content for c in whole.choices] and len(set(text)) > 1
    assert finish == [c.finish_reason for c in whole.choices]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # completions, with logprobs: per choice too
    args = dict(model="demo", prompt="And it came to pass", max_tokens=6, temperature=1.0, seed=9, n=2, logprobs=1)
    w = oai(demo).completions.create(**args)
    got = ["", ""]
    toks = [[], []]
    for c in oai(demo).completions.create(stream=True, **args):
        got[c.choices[0].index] += c.choices[0].text
        if c.choices[0].logprobs:
            toks[c.choices[0].index] += c.choices[0].logprobs.tokens
    assert got == [c.text for c in w.choices] and toks == [c.logprobs.tokens for c in w.choices]
    # the raw stream ends with exactly one [DONE]
    st, _, b = demo.request("POST", "/v1/chat/completions", {"messages": RUTH, "n": 2, "max_tokens": 3, "stream": True})
    assert st == 200 and b.count(b"data: [DONE]") == 1 and b.rstrip().endswith(b"data: [DONE]")
