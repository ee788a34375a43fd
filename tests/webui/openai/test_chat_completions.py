"""/v1 with the real ``openai`` package as the client, against a real Daphne server."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.webui.openai.v1server import DEMO_MODEL, RATE_LIMIT, V1Server

QUESTION = "What is 17 * 23?"


def client(v1: V1Server, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=v1.base_url, api_key=key or v1.key, max_retries=0, timeout=60)


def async_client(v1: V1Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=v1.base_url, api_key=v1.key, max_retries=0, timeout=60)


def ask(question: str = QUESTION) -> list[dict]:
    return [{"role": "user", "content": question}]


def test_a_completion_is_the_runs_answer_with_its_totals_and_link(v1):
    raw = client(v1).chat.completions.with_raw_response.create(model=DEMO_MODEL, messages=ask())
    completion = raw.parse()
    run_id = int(raw.headers["X-Conductor-Run-Id"])
    run = v1.run(run_id)

    assert run["status"] == "succeeded"
    assert completion.id == f"chatcmpl-run-{run_id}"
    assert completion.object == "chat.completion"
    assert completion.model == DEMO_MODEL
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == run["answer"]
    assert completion.choices[0].message.content.rstrip().endswith("Answer: 391")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == run["tokens_in"] > 0
    assert completion.usage.completion_tokens == run["tokens_out"] > 0
    assert completion.usage.total_tokens == run["tokens_in"] + run["tokens_out"]
    run_url = f"{v1.server.url}/runs/{run_id}/"
    assert raw.headers["X-Conductor-Run-Url"] == run_url
    assert completion.model_extra["conductor"]["run_url"] == run_url
    assert run["strategy"] == "conductor"


def test_a_model_name_picks_the_strategy_and_its_argument(v1):
    raw = client(v1).chat.completions.with_raw_response.create(
        model=f"{DEMO_MODEL}:single:2", messages=ask()
    )
    run = v1.run(int(raw.headers["X-Conductor-Run-Id"]))
    assert (run["strategy"], run["strategy_options"]) == ("single", {"worker": 2})


def test_streaming_sends_progress_then_the_answer_then_usage(v1):
    stream = client(v1).chat.completions.create(
        model=f"{DEMO_MODEL}:moa",
        messages=ask(),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    progress = [c.model_extra["conductor"] for c in chunks if "conductor" in (c.model_extra or {})]
    run_id = progress[0]["run_id"]
    run = v1.run(run_id)

    assert content == run["answer"] and content.rstrip().endswith("Answer: 391")
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {f"chatcmpl-run-{run_id}"}
    started = [p["step"]["index"] for p in progress if p["event"] == "step.started"]
    finished = [p["step"]["index"] for p in progress if p["event"] == "step.finished"]
    assert sorted(started) == sorted(finished) == list(range(len(started)))
    assert len(started) >= 2  # proposers and the aggregator
    # Progress comes before the answer; the finish reason after it; usage last, with no choice.
    first_content = next(
        i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content
    )
    assert all(
        i < first_content
        for i, c in enumerate(chunks)
        if (c.model_extra or {}).get("conductor", {}).get("event") == "step.finished"
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == run["tokens_in"]
    assert chunks[-1].usage.completion_tokens == run["tokens_out"]
    assert all(c.usage is None for c in chunks[:-1])


def test_without_stream_options_there_is_no_usage_chunk(v1):
    chunks = list(
        client(v1).chat.completions.create(
            model=f"{DEMO_MODEL}:single", messages=ask(), stream=True
        )
    )
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks).endswith("Answer: 391")


async def test_the_async_client_streams_and_completes_concurrently(v1):
    async def streamed() -> str:
        stream = await async_client(v1).chat.completions.create(
            model=f"{DEMO_MODEL}:single", messages=ask("What is 12 + 30?"), stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def plain() -> str:
        completion = await async_client(v1).chat.completions.create(
            model=DEMO_MODEL, messages=ask("What is 12 + 30?")
        )
        return completion.choices[0].message.content

    answers = await asyncio.gather(streamed(), plain(), streamed(), plain())
    assert all(answer.rstrip().endswith("Answer: 42") for answer in answers), answers


async def test_the_async_client_lists_models(v1):
    models = await async_client(v1).models.list()
    assert DEMO_MODEL in [m.id for m in models.data]


def test_models_lists_what_the_key_may_use_and_nothing_else(v1):
    ids = [m.id for m in client(v1).models.list()]
    assert {DEMO_MODEL, f"{DEMO_MODEL}:moa", f"{DEMO_MODEL}:single:0", "broken", "loop"} <= set(ids)
    assert not any(i.startswith("secret-pool") for i in ids)
    assert client(v1).models.retrieve(f"{DEMO_MODEL}:reflection").id == f"{DEMO_MODEL}:reflection"
    other_ids = [m.id for m in client(v1, v1.other_key).models.list()]
    assert other_ids[0] == "secret-pool" and DEMO_MODEL not in other_ids


def test_earlier_messages_are_context_for_the_last_question(v1):
    raw = client(v1).chat.completions.with_raw_response.create(
        model=f"{DEMO_MODEL}:single",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Let us do sums."},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": QUESTION},
        ],
    )
    run = v1.run(int(raw.headers["X-Conductor-Run-Id"]))
    assert run["input"].startswith("Conversation so far:\n[system] Be brief.")
    assert "[assistant] Sure." in run["input"]
    assert run["input"].endswith("\n\n" + QUESTION)


def test_temperature_user_and_max_tokens_are_honoured(v1):
    raw = client(v1).chat.completions.with_raw_response.create(
        model=f"{DEMO_MODEL}:single",
        messages=ask(),
        temperature=0.25,
        user="end-user-7",
        max_tokens=3,
    )
    completion = raw.parse()
    run = v1.run(int(raw.headers["X-Conductor-Run-Id"]))
    assert run["worker_params"] == {"temperature": 0.25}
    assert run["end_user"] == "end-user-7"
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content == run["answer"][:12]


# Errors ------------------------------------------------------------------------------------------


def test_a_bad_or_revoked_key_is_401(v1):
    with pytest.raises(openai.AuthenticationError) as error:
        client(v1, "cs-not-a-key").models.list()
    assert error.value.status_code == 401
    assert error.value.code == "invalid_api_key"
    key = v1.new_key()
    assert client(v1, key).models.list()
    key_id = v1.query(
        "from orchestrator.models import ApiKey\n"
        f"result = ApiKey.objects.get(prefix={key[:10]!r}).pk"
    )
    v1.server.manage("api_key", "revoke", "admin", str(key_id))
    with pytest.raises(openai.AuthenticationError):
        client(v1, key).chat.completions.create(model=DEMO_MODEL, messages=ask())


def test_an_unknown_model_or_another_projects_pool_is_404(v1):
    for model in (
        "no-such-pool",
        "secret-pool",
        f"{DEMO_MODEL}:bogus",
        f"{DEMO_MODEL}:conductor:1",
    ):
        with pytest.raises(openai.NotFoundError) as error:
            client(v1).chat.completions.create(model=model, messages=ask())
        assert error.value.code == "model_not_found", model
    with pytest.raises(openai.NotFoundError):
        client(v1).models.retrieve("secret-pool")


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"n": 2}, "n"),
        ({"temperature": 5}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
        ({"model": f"{DEMO_MODEL}:single:40"}, "model"),
    ],
)
def test_a_request_that_cannot_be_served_is_400_naming_the_parameter(v1, extra, param):
    arguments = {"model": DEMO_MODEL, "messages": ask(), **extra}
    with pytest.raises(openai.BadRequestError) as error:
        client(v1).chat.completions.create(**arguments)
    assert error.value.body["param"] == param


def test_a_call_nested_beyond_the_depth_limit_is_400(v1):
    with pytest.raises(openai.BadRequestError) as error:
        client(v1).chat.completions.create(
            model=DEMO_MODEL, messages=ask(), extra_headers={"X-Conductor-Depth": "3"}
        )
    assert error.value.code == "depth_limit_exceeded"


def test_a_viewer_has_no_key(v1):
    with pytest.raises(RuntimeError, match="Only admins and reviewers"):
        v1.new_key(username="vic")


def test_a_failed_run_is_500_with_its_link_streamed_or_not(v1):
    with pytest.raises(openai.InternalServerError) as error:
        client(v1).chat.completions.create(model="broken:single", messages=ask())
    assert error.value.status_code == 500
    run_url = error.value.response.headers["X-Conductor-Run-Url"]
    assert error.value.body["run_url"] == run_url and run_url in error.value.message
    assert "CONDUCTOR_TEST_UNSET_KEY" in error.value.message  # why, named
    run_id = int(run_url.rstrip("/").rsplit("/", 1)[1])
    assert v1.run(run_id)["status"] == "failed"

    with pytest.raises(openai.APIError) as streamed:
        list(client(v1).chat.completions.create(model="broken", messages=ask(), stream=True))
    assert "/runs/" in streamed.value.message


def test_too_many_requests_is_429(v1):
    key = v1.new_key()
    limited = client(v1, key)
    with pytest.raises(openai.RateLimitError) as error:
        # Twice the limit: a minute's window is passed even if the requests straddle two.
        for _ in range(2 * RATE_LIMIT + 1):
            limited.models.list()
    assert error.value.status_code == 429
    assert int(error.value.response.headers["Retry-After"]) <= 60
    assert client(v1).models.list()  # other keys are not held back


def test_a_body_that_is_not_json_or_too_deep_or_too_big_is_400(v1):
    headers = {"Authorization": f"Bearer {v1.key}", "Content-Type": "application/json"}
    for body in (b"{not json", b"[" * 100_000 + b"]" * 100_000, b'{"model": "' + b"x" * 1_100_000):
        response = httpx.post(f"{v1.base_url}/chat/completions", content=body, headers=headers)
        assert response.status_code == 400, response.text[:200]
        assert response.json()["error"]["type"] == "invalid_request_error"
    for header in ("X-Conductor-Step", "X-Conductor-Depth"):
        response = httpx.post(
            f"{v1.base_url}/chat/completions",
            json={"model": DEMO_MODEL, "messages": [{"role": "user", "content": "Hi"}]},
            headers={**headers, header: "9" * 40},
        )
        assert response.status_code == 400, response.text[:200]


def test_other_openai_routes_answer_404_in_openais_shape(v1):
    with pytest.raises(openai.NotFoundError) as error:
        client(v1).embeddings.create(model=DEMO_MODEL, input="hello")
    assert error.value.code == "unknown_url"
    assert "/v1/chat/completions" in error.value.message
