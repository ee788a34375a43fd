"""Output constrained to the plan's JSON schema, asked of each kind of server in its own dialect,
seen by a real local HTTP server (OpenAI-compatible, and Ollama's own API)."""

from __future__ import annotations

import pytest

from orchestrator.engine.plan import parse_plan, plan_schema
from orchestrator.providers import make_client
from orchestrator.providers.dialects import resolve_dialect
from tests.openai_server import FakeOpenAI, running_openai_server
from tests.orchestrator.providers.test_litellm_client import requested_schema


@pytest.fixture
def server():
    with running_openai_server() as url:
        yield url


MESSAGES = [{"role": "user", "content": "Plan it."}]
SCHEMA = plan_schema(pool_size=3, max_steps=4, access_mode="fine")


@pytest.mark.parametrize(
    ("model", "dialect", "spoken", "path"),
    [
        ("openai/planner", "auto", "llamacpp", "/v1/chat/completions"),
        ("openai/planner", "llamacpp", "llamacpp", "/v1/chat/completions"),
        ("openai/planner", "openai", "openai", "/v1/chat/completions"),
        ("openai/planner", "vllm", "vllm", "/v1/chat/completions"),
        ("hosted_vllm/planner", "auto", "vllm", "/v1/chat/completions"),
        ("ollama/planner", "auto", "ollama", "/api/generate"),
        ("ollama_chat/planner", "auto", "ollama", "/api/chat"),
    ],
)
async def test_each_dialect_asks_for_the_schema_its_own_way(server, model, dialect, spoken, path):
    api_base = server.removesuffix("/v1") if model.startswith("ollama") else server
    client = make_client(model, api_base=api_base, json_dialect=dialect)
    completion = await client.complete(MESSAGES, timeout=10, schema=SCHEMA)
    (request,) = FakeOpenAI.requests
    assert request["path"] == path
    assert requested_schema(request["body"]) == (spoken, SCHEMA)
    assert completion.constrained == spoken
    # The server followed the schema: worker 2 is its enum's last.
    parsed = parse_plan(completion.text, pool_size=3, max_steps=4)
    assert parsed.form == "json" and parsed.workflow.steps[0].worker == 2


async def test_the_vllm_schema_goes_beside_what_the_parameters_put_in_the_body(server):
    client = make_client(
        "hosted_vllm/planner",
        api_base=server,
        params={"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
    )
    await client.complete(MESSAGES, timeout=10, schema=SCHEMA)
    body = FakeOpenAI.requests[-1]["body"]
    assert body["guided_json"] == SCHEMA
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_without_a_schema_nothing_is_constrained(server):
    completion = await make_client("openai/planner", api_base=server).complete(MESSAGES, timeout=10)
    body = FakeOpenAI.requests[-1]["body"]
    assert requested_schema(body) is None and "response_format" not in body
    assert completion.constrained == ""
    assert completion.text.startswith("I would ask")


def test_auto_reads_the_model_string_and_the_api_base():
    assert resolve_dialect("auto", model="openai/gpt-5") == "openai"
    assert resolve_dialect("auto", model="anthropic/claude-x") == "openai"
    assert resolve_dialect("auto", model="openai/smollm2", api_base="http://h/v1") == "llamacpp"
    assert resolve_dialect("auto", model="hosted_vllm/m", api_base="http://h/v1") == "vllm"
    assert resolve_dialect("auto", model="ollama_chat/m") == "ollama"
    assert resolve_dialect("openai", model="ollama/m") == "openai"
    with pytest.raises(ValueError, match="unknown"):
        resolve_dialect("xml", model="openai/gpt-5")


def test_the_plan_schema_holds_workers_to_an_enum_and_steps_to_the_pool_s_bounds():
    schema = plan_schema(pool_size=2, max_steps=3, access_mode="fine", first_round=False)
    steps = schema["properties"]["steps"]
    assert (steps["minItems"], steps["maxItems"]) == (0, 3)
    step = steps["items"]["properties"]
    assert step["worker"] == {"type": "integer", "enum": [0, 1]}
    assert step["instruction"] == {"type": "string", "minLength": 1}
    assert step["access"]["anyOf"][1]["items"]["enum"] == [0, 1]
    binary = plan_schema(pool_size=2, max_steps=3, access_mode="binary")
    access = binary["properties"]["steps"]["items"]["properties"]["access"]["anyOf"]
    assert access == [{"type": "string", "enum": ["all"]}, {"type": "array", "maxItems": 0}]
    assert binary["properties"]["steps"]["minItems"] == 1
