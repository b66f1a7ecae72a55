"""`sluice serve`'s OpenAI Responses API (POST /v1/responses) with the official `openai` client, on the
demo model: the same greedy text as chat completions for the same conversation (instructions, input
as a string or as items), streamed events in order with consecutive sequence numbers whose deltas make
the whole text, the client's stream helper, function tools (a forced call, then its output sent back as
input items), text.format json_schema, previous_response_id (a conversation continued from a kept
response equals the same conversation sent whole; store false keeps nothing), and the refusals."""
import json

import jsonschema
import openai
import pytest

from test_serve import DEMO, RUTH, THINK, Server, error_of, oai

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["book", "ok"],
          "properties": {"book": {"enum": ["Ruth", "Job"]}, "ok": {"type": "boolean"}}}
TOOL = {"type": "function", "name": "get_verse", "description": "Look a verse up",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["chapter"],
                       "properties": {"chapter": {"type": "integer"}}}}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve-responses"), "-m", DEMO)
    yield s
    assert s.stop() == 0, s.stderr()


def create(server, **kw):
    args = dict(model="demo", input="Read me Ruth chapter 2.", max_output_tokens=24, temperature=0)
    args.update(kw)
    return oai(server).responses.create(**args)


def test_responses_equal_chat(demo):
    r = create(demo)
    c = oai(demo).chat.completions.create(model="demo", messages=RUTH, max_tokens=24, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "demo"
    assert r.output_text == c.choices[0].message.content and len(r.output_text) > 5
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == THINK + 24 and r.usage.input_tokens == c.usage.prompt_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + THINK + 24
    # instructions are the system message; items are the same conversation as the string
    sys = oai(demo).chat.completions.create(model="demo", max_tokens=24, temperature=0,
                                            messages=[{"role": "system", "content": "You read scripture."}] + RUTH)
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Read me Ruth chapter 2."}]}]
    assert create(demo, instructions="You read scripture.").output_text == sys.choices[0].message.content
    assert create(demo, input=items).output_text == r.output_text
    assert create(demo, input=[{"type": "message", "role": "user", "content": "Read me Ruth chapter 2."}]).output_text == r.output_text


def test_responses_stream_events(demo):
    whole = create(demo, max_output_tokens=30)
    events = list(create(demo, max_output_tokens=30, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.incomplete"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.output_item.added" in types and "response.output_text.done" in types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    done = [e for e in events if e.type == "response.output_text.done"]
    assert done[-1].text == text and events[-1].response.output_text == text
    assert events[-1].response.usage.output_tokens == THINK + 30
    # the client's helper, on an answer that ends by itself (a schema keeps it short)
    with oai(demo).responses.stream(model="demo", input="Read me Ruth chapter 2.", temperature=0,
                                    text={"format": {"type": "json_schema", "name": "v", "schema": SCHEMA}}) as s:
        deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert final.status == "completed" and final.output_text == deltas
    jsonschema.validate(json.loads(deltas), SCHEMA)


def test_responses_tools_and_formats(demo):
    r = create(demo, max_output_tokens=200, tools=[TOOL], tool_choice="required")
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1 and calls[0].name == "get_verse"
    jsonschema.validate(json.loads(calls[0].arguments), TOOL["parameters"])
    # the call and its output sent back as items: the conversation goes on
    follow = create(demo, tools=[TOOL], input=[
        {"role": "user", "content": "Read me Ruth chapter 2."},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_verse", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "And Naomi had a kinsman."}])
    assert follow.usage.input_tokens > r.usage.input_tokens and follow.output_text
    f = create(demo, max_output_tokens=200, text={"format": {"type": "json_schema", "name": "v", "schema": SCHEMA,
                                                               "strict": True}})
    jsonschema.validate(json.loads(f.output_text), SCHEMA)
    j = create(demo, max_output_tokens=200, text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(j.output_text), dict)


def test_responses_refusals(demo):
    cases = [({"input": "x", "previous_response_id": "resp_1"}, 400, "previous_response_id"),
             ({"input": "x", "tools": [{"type": "web_search"}]}, 400, "tools"),
             ({"model": "demo"}, 400, "input"),
             ({"input": []}, 400, "input"),
             ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400,
              "input[0].content"),
             ({"input": "x", "text": {"format": {"type": "json_schema", "name": "v", "schema": {"pattern": "(?=a)"}}}}, 400,
              "text.format.schema"),
             ({"input": "x", "tool_choice": "required"}, 400, "tool_choice"),
             ({"input": "x", "model": "gpt-5"}, 404, None)]
    for body, status, param in cases:
        s, _, b = demo.request("POST", "/v1/responses", body)
        e = error_of(b)
        assert s == status and (param is None or e["param"] == param), (body, s, e)
    with pytest.raises(openai.BadRequestError) as ex:
        create(demo, previous_response_id="resp_0")
    assert ex.value.code == "previous_response_not_found"
    assert demo.request("GET", "/v1/responses")[0] == 405


def test_previous_response_id(demo):
    """Turn 2 by previous_response_id gives what the whole conversation (turn 1's input and output items,
    then turn 2's input) gives as input; instructions are not carried over (as OpenAI's); a chain of
    three works, streamed too; a response made with store false cannot be continued."""
    t1 = create(demo, instructions="Answer briefly.")
    t2 = create(demo, previous_response_id=t1.id, input="And chapter 3?")
    whole = create(demo, input=[{"role": "user", "content": "Read me Ruth chapter 2."},
                                {"role": "assistant", "content": t1.output_text},
                                {"role": "user", "content": "And chapter 3?"}])
    assert t2.output_text == whole.output_text and t2.usage.input_tokens == whole.usage.input_tokens
    assert t2.usage.input_tokens > t1.usage.input_tokens
    events = list(oai(demo).responses.create(model="demo", input="Go on.", max_output_tokens=8, temperature=0,
                                             previous_response_id=t2.id, stream=True))
    t3 = events[-1].response  # response.incomplete (max_output_tokens): kept all the same
    t4 = create(demo, previous_response_id=t3.id, input=[{"role": "user", "content": "Amen."}], max_output_tokens=4)
    assert t4.usage.input_tokens > t3.usage.input_tokens > t2.usage.input_tokens
    n = create(demo, store=False)
    with pytest.raises(openai.BadRequestError):
        create(demo, previous_response_id=n.id)

