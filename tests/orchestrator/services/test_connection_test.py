"""Testing a connection: one tiny call through the client runs use, against a real local
OpenAI-compatible server; the answer, tokens and latency, or the exact error, never a key."""

from __future__ import annotations

import socket

import pytest

from orchestrator.services.connections import (
    conductor_connection_test,
    connection_test,
    worker_connection_test,
)
from tests.factories import make_pool, make_worker
from tests.openai_server import KEY_ENV, SECRET, FakeOpenAI, running_openai_server


@pytest.fixture
def server():
    with running_openai_server() as url:
        yield url


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_working_worker_answers_with_tokens_and_latency(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    result = connection_test(model="openai/guarded", api_base=server, api_key_env=KEY_ENV)
    assert result.ok and result.error == ""
    assert result.answer.startswith("echo: ") and (result.tokens_in, result.tokens_out) == (21, 7)
    assert 0 < result.latency < 10
    # One small call: a short reply is asked for.
    assert FakeOpenAI.requests[-1]["body"]["max_tokens"] == 16


def test_a_provider_error_is_shown_exactly_without_the_key(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key-0123456789")
    result = connection_test(model="openai/guarded", api_base=server, api_key_env=KEY_ENV)
    assert not result.ok and "401" in result.error
    assert "sk-wrong-key-0123456789" not in result.error


def test_a_closed_port_is_an_error_that_says_so(monkeypatch):
    result = connection_test(
        model="openai/any", api_base=f"http://127.0.0.1:{closed_port()}/v1", timeout=5
    )
    assert not result.ok and "Connection error" in result.error


def test_an_unset_key_variable_is_named_and_no_call_is_made(server, monkeypatch):
    monkeypatch.delenv("KEY_NOBODY_SET", raising=False)
    result = connection_test(model="openai/tiny", api_base=server, api_key_env="KEY_NOBODY_SET")
    assert not result.ok and result.missing_keys == ["KEY_NOBODY_SET"]
    assert "KEY_NOBODY_SET" in result.error and FakeOpenAI.requests == []


@pytest.mark.django_db
def test_stored_workers_and_conductors_are_tested_as_runs_call_them(server, project):
    pool = make_pool(project=project, workers=0)
    worker = make_worker(pool=pool, model="openai/tiny", api_base=server, params={"temperature": 0})
    assert worker_connection_test(worker=worker).ok
    assert FakeOpenAI.requests[-1]["body"]["temperature"] == 0
    simulated = conductor_connection_test(pool=pool)
    assert simulated.model == "sim/conductor"
