"""`sluice serve` through the client libraries people point at a local server besides the official
ones: LangChain's ChatOpenAI (invoke and stream equal to the openai client's answer, usage, and
with_structured_output from a pydantic model by json_schema and by a forced function call) and litellm
(its openai/ provider on /v1/chat/completions, whole and streamed, with a JSON schema; its anthropic/
provider on /v1/messages). Greedy answers on the demo model, so each library's text can be compared
with the official client's."""
import json
import os
from typing import Literal

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of litellm's price list at import

import litellm  # noqa: E402
import pydantic  # noqa: E402
import pytest  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from test_serve import DEMO, RUTH, THINK, Server, ant, oai  # noqa: E402

ASK = RUTH[0]["content"]


class Verse(pydantic.BaseModel):
    book: Literal["Ruth", "Job"]
    chapter: int
    words: list[str] = pydantic.Field(max_length=3)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve-clients"), "-m", DEMO)
    yield s
    assert s.stop() == 0, s.stderr()


def official(server, n=24):
    return oai(server).chat.completions.create(model="demo", messages=RUTH, max_tokens=n, temperature=0).choices[0].message.content


def langchain(server, **kw):
    return ChatOpenAI(base_url=server.base + "/v1", api_key="none", model="demo", temperature=0, max_tokens=24,
                      max_retries=0, **kw)


def test_langchain_invoke_and_stream(demo):
    want = official(demo)
    r = langchain(demo).invoke(ASK)
    assert r.content == want and r.usage_metadata["output_tokens"] == THINK + 24
    assert r.usage_metadata["input_tokens"] == 16 and r.response_metadata["finish_reason"] == "length"
    assert "".join(c.content for c in langchain(demo).stream(ASK)) == want


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(demo, method):
    llm = ChatOpenAI(base_url=demo.base + "/v1", api_key="none", model="demo", temperature=0, max_tokens=200,
                     max_retries=0)
    v = llm.with_structured_output(Verse, method=method).invoke("Which verse?")
    assert isinstance(v, Verse) and len(v.words) <= 3


def test_litellm_openai_provider(demo):
    want = official(demo)
    args = dict(model="openai/demo", api_base=demo.base + "/v1", api_key="none", messages=RUTH, max_tokens=24,
                temperature=0)
    r = litellm.completion(**args)
    assert r.choices[0].message.content == want and r.usage.completion_tokens == THINK + 24
    chunks = litellm.completion(stream=True, **args)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    r = litellm.completion(**{**args, "max_tokens": 200}, response_format=Verse)
    Verse.model_validate(json.loads(r.choices[0].message.content))


def test_litellm_anthropic_provider(demo):
    want = ant(demo).messages.create(model="demo", max_tokens=24, messages=RUTH, extra_body={"temperature": 0})
    r = litellm.completion(model="anthropic/demo", api_base=demo.base, api_key="none", messages=RUTH, max_tokens=24,
                           temperature=0)
    assert r.choices[0].message.content == want.content[-1].text
    assert r.usage.completion_tokens == want.usage.output_tokens == THINK + 24
