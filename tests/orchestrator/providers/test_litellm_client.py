"""The litellm client against a real OpenAI-compatible HTTP server on 127.0.0.1 (no mocks)."""

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from orchestrator.engine.scheduler import call_with_retries
from orchestrator.engine.types import ConfigurationError, ModelError, RunSettings
from orchestrator.providers import make_client, missing_key_variables

KEY_ENV = "CONDUCTOR_TEST_API_KEY"
SECRET = "sk-test-0123456789abcdef-secret"


class FakeOpenAI(BaseHTTPRequestHandler):
    """POST /v1/chat/completions; the model name picks the behaviour. A model whose name
    starts with ``queue`` takes ``QUEUE_SECONDS`` per call and is counted: ``active`` and
    ``peak`` hold, per model, the calls it is answering now and the most it answered at once."""

    requests: ClassVar[list[dict]] = []
    # The model ``slow`` answers only once ``release`` is set (or after 30 s); ``slow_answered``
    # is set when it has.
    release: ClassVar[threading.Event] = threading.Event()
    slow_answered: ClassVar[threading.Event] = threading.Event()
    active: ClassVar[dict[str, int]] = {}
    peak: ClassVar[dict[str, int]] = {}
    counting: ClassVar[threading.Lock] = threading.Lock()
    QUEUE_SECONDS: ClassVar[float] = 0.3

    @classmethod
    def reset(cls) -> None:
        cls.requests.clear()
        with cls.counting:
            cls.active.clear()
            cls.peak.clear()

    def _counted(self, model: str, reply) -> None:
        with FakeOpenAI.counting:
            now = FakeOpenAI.active[model] = FakeOpenAI.active.get(model, 0) + 1
            FakeOpenAI.peak[model] = max(FakeOpenAI.peak.get(model, 0), now)
        try:
            time.sleep(FakeOpenAI.QUEUE_SECONDS)
            reply()
        finally:
            with FakeOpenAI.counting:
                FakeOpenAI.active[model] -= 1

    def log_message(self, *args):  # keep test output quiet
        pass

    def _reply(self, status: int, body: dict) -> None:
        payload = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (the timeout test)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, {"error": {"message": message, "type": "test_error", "code": status}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        authorization = self.headers.get("Authorization", "")
        FakeOpenAI.requests.append(
            {"path": self.path, "body": body, "authorization": authorization}
        )
        if self.path in ("/api/generate", "/api/chat"):
            return self._ollama(body)
        if self.path != "/v1/chat/completions":
            return self._error(404, f"no route {self.path}")
        model = body["model"]
        if model == "planner":
            return self._completion(model, plan_reply(requested_schema(body)))
        if model.startswith("queue"):
            requested = requested_schema(body)
            text = plan_reply(requested) if requested else f"Answer: {model}"
            return self._counted(model, lambda: self._completion(model, text))
        if model == "broken":
            return self._error(500, "the server fell over")
        if model == "busy":
            return self._error(429, "slow down")
        if model == "missing":
            return self._error(404, "no such model")
        if model == "picky":
            return self._error(400, "max_tokens is too large")
        if model == "slow":
            FakeOpenAI.release.wait(30)
            FakeOpenAI.slow_answered.set()
        if model == "guarded" and authorization != f"Bearer {SECRET}":
            return self._error(
                401, f"Incorrect API key provided: {authorization.removeprefix('Bearer ')}"
            )
        content = None if model == "silent" else f"echo: {body['messages'][-1]['content']}"
        self._completion(model, content)

    def _ollama(self, body: dict) -> None:
        """Ollama's own API (``/api/generate``, ``/api/chat``): ``planner`` as above."""
        text = plan_reply(requested_schema(body)) if body["model"] == "planner" else "echo"
        reply = {"model": body["model"], "created_at": "2026-01-01T00:00:00Z", "done": True}
        reply.update({"prompt_eval_count": 21, "eval_count": 7, "done_reason": "stop"})
        if self.path == "/api/chat":
            reply["message"] = {"role": "assistant", "content": text}
        else:
            reply["response"] = text
        self._reply(200, reply)

    def _completion(self, model: str, content: str | None) -> None:
        self._reply(
            200,
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28},
            },
        )


def requested_schema(body: dict) -> tuple[str, dict] | None:
    """The JSON schema a request asks its output to follow, and the dialect it is asked in."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return "openai", response_format["json_schema"]["schema"]
    if response_format.get("type") == "json_object" and "schema" in response_format:
        return "llamacpp", response_format["schema"]
    if "guided_json" in body:
        return "vllm", body["guided_json"]
    if isinstance(body.get("format"), dict):
        return "ollama", body["format"]
    return None


def plan_reply(requested: tuple[str, dict] | None) -> str:
    """What the ``planner`` model writes: free text, as a small model does unasked, or, when a
    schema is asked for, a one-step plan that follows it (its worker the enum's last)."""
    if requested is None:
        return "I would ask the strongest model to answer the question directly."
    _, schema = requested
    step = schema["properties"]["steps"]["items"]["properties"]
    worker = step["worker"]["enum"][-1]
    return json.dumps({"steps": [{"worker": worker, "instruction": "Answer it.", "access": []}]})


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Fail the test if anything tries to resolve a host other than this machine."""
    for proxy in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    outside: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def local_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", None, b"127.0.0.1"):
            outside.append(str(host))
            raise socket.gaierror(f"test blocks lookups of {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)
    FakeOpenAI.requests.clear()
    yield
    assert outside == [], f"tried to reach {outside}"


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "ping"}]


async def test_a_completion_brings_text_usage_cost_and_latency(server):
    client = make_client(
        "openai/tiny",
        api_base=server,
        params={"temperature": 0.2, "max_tokens": 64},
        price_in=2,
        price_out=8,
    )
    completion = await client.complete(MESSAGES, timeout=10)
    assert completion.text == "echo: ping"
    assert (completion.tokens_in, completion.tokens_out) == (21, 7)
    assert completion.cost == pytest.approx((21 * 2 + 7 * 8) / 1e6)
    assert 0 < completion.latency < 10
    sent = FakeOpenAI.requests[-1]["body"]
    assert sent["model"] == "tiny"
    assert sent["messages"] == MESSAGES
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 64


async def test_without_prices_an_unknown_model_costs_nothing(server):
    completion = await make_client("openai/tiny", api_base=server).complete(MESSAGES, timeout=10)
    assert completion.cost == 0.0


async def test_the_key_is_read_from_the_named_variable_at_call_time(server, monkeypatch):
    client = make_client("openai/guarded", api_base=server, api_key_env=KEY_ENV)
    monkeypatch.setenv(KEY_ENV, SECRET)
    completion = await client.complete(MESSAGES, timeout=10)
    assert completion.text == "echo: ping"
    assert FakeOpenAI.requests[-1]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(client)


async def test_a_rejected_key_is_not_retryable_and_never_shown(server, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    wrong = "sk-wrong-key-that-must-not-leak-42"
    monkeypatch.setenv(KEY_ENV, wrong)
    client = make_client("openai/guarded", api_base=server, api_key_env=KEY_ENV)
    with pytest.raises(ModelError) as failure:
        await client.complete(MESSAGES, timeout=10)
    assert (
        FakeOpenAI.requests[-1]["authorization"] == f"Bearer {wrong}"
    )  # the server echoed it back
    assert not failure.value.retryable and failure.value.status == 401
    assert wrong not in str(failure.value) and "must-not-leak" not in str(failure.value)
    captured = capfd.readouterr()
    assert "must-not-leak" not in caplog.text + captured.out + captured.err


async def test_a_missing_key_variable_fails_clearly_without_a_call(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    client = make_client("openai/guarded", api_base=server, api_key_env=KEY_ENV)
    with pytest.raises(ModelError, match=KEY_ENV) as failure:
        await client.complete(MESSAGES, timeout=10)
    assert not failure.value.retryable
    assert FakeOpenAI.requests == []


@pytest.mark.parametrize(
    "model, status, retryable",
    [("broken", 500, True), ("busy", 429, True), ("missing", 404, False), ("picky", 400, False)],
)
async def test_error_statuses_map_to_model_errors(server, model, status, retryable):
    client = make_client(f"openai/{model}", api_base=server)
    with pytest.raises(ModelError) as failure:
        await client.complete(MESSAGES, timeout=10)
    assert failure.value.retryable is retryable
    assert failure.value.status == status
    assert len([r for r in FakeOpenAI.requests if r["body"]["model"] == model]) == 1, (
        "litellm retried"
    )


async def test_a_slow_reply_times_out_as_a_retryable_error(server):
    client = make_client("openai/slow", api_base=server)
    FakeOpenAI.release.clear()
    FakeOpenAI.slow_answered.clear()
    try:
        with pytest.raises(ModelError) as failure:
            await client.complete(MESSAGES, timeout=0.5)
        assert failure.value.retryable
        assert not FakeOpenAI.slow_answered.is_set()  # it gave up before the server answered
    finally:
        FakeOpenAI.release.set()


async def test_an_unreachable_server_is_a_retryable_connection_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client("openai/tiny", api_base=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ModelError) as failure:
        await client.complete(MESSAGES, timeout=5)
    assert failure.value.retryable


async def test_an_empty_reply_is_a_model_error(server):
    with pytest.raises(ModelError, match="empty reply"):
        await make_client("openai/silent", api_base=server).complete(MESSAGES, timeout=10)


class Waits:
    """The scheduler's sleep, recording how long it was asked to wait instead of waiting."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


RETRYING = RunSettings(max_attempts=3, backoff=0.01, step_timeout=10)


async def test_an_unset_key_variable_fails_the_step_at_once_naming_it(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    client = make_client("openai/guarded", api_base=server, api_key_env=KEY_ENV)
    waits = Waits()
    outcome = await call_with_retries(client, MESSAGES, settings=RETRYING, sleep=waits)
    assert outcome.completion is None
    assert outcome.attempts == 1 and waits.seconds == []
    assert outcome.error.startswith(f"environment variable {KEY_ENV} is not set")
    assert FakeOpenAI.requests == []


async def test_a_provider_default_key_that_is_unset_is_named_too(monkeypatch):
    # No variable named by the worker and no API base: litellm would read OPENAI_API_KEY, and
    # the OpenAI SDK used to report its absence as a retryable "500 Missing credentials".
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = make_client("openai/gpt-4o-mini")
    waits = Waits()
    outcome = await call_with_retries(client, MESSAGES, settings=RETRYING, sleep=waits)
    assert outcome.attempts == 1 and waits.seconds == []
    assert outcome.error.startswith("environment variable OPENAI_API_KEY is not set")


async def test_a_rejected_key_is_tried_once(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key-0123456789")
    client = make_client("openai/guarded", api_base=server, api_key_env=KEY_ENV)
    waits = Waits()
    outcome = await call_with_retries(client, MESSAGES, settings=RETRYING, sleep=waits)
    assert outcome.completion is None and outcome.attempts == 1 and waits.seconds == []
    assert "(401)" in outcome.error and "wrong-key" not in outcome.error
    assert len(FakeOpenAI.requests) == 1


async def test_a_server_error_is_still_retried(server):
    waits = Waits()
    client = make_client("openai/broken", api_base=server)
    outcome = await call_with_retries(client, MESSAGES, settings=RETRYING, sleep=waits)
    assert outcome.attempts == 3 and len(waits.seconds) == 2
    assert len(FakeOpenAI.requests) == 3


async def test_a_model_string_without_a_provider_is_a_configuration_error(server):
    with pytest.raises(ConfigurationError, match="not a model string litellm knows"):
        await make_client("nonsense/model", api_base=server).complete(MESSAGES, timeout=10)
    assert FakeOpenAI.requests == []


def test_missing_key_variables_names_what_is_unset_and_nothing_else(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert missing_key_variables("openai/x", api_base="http://h/v1", api_key_env=KEY_ENV) == [
        KEY_ENV
    ]
    assert missing_key_variables("anthropic/claude-x") == ["ANTHROPIC_API_KEY"]
    assert missing_key_variables("openai/local", api_base="http://127.0.0.1:1/v1") == []
    assert missing_key_variables("sim/arith", api_key_env=KEY_ENV) == []
    monkeypatch.setenv(KEY_ENV, SECRET)
    assert missing_key_variables("openai/x", api_key_env=KEY_ENV) == []
