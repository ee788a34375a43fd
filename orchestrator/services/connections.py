"""Testing a worker's or a conductor's connection: one tiny call, as a run would make it.

An admin checks a model string, an API base and a key variable before a run fails on them. The
call goes through ``providers.make_client`` (the client runs use), outside any transaction; the
result says what came back (answer, tokens, latency) or the exact error, never a key.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from orchestrator.engine.types import ModelError
from orchestrator.models import Pool, Worker
from orchestrator.providers import make_client, missing_key_variables

PROMPT = "This is a connection test. Reply with the single word: ok"
MAX_TEST_TOKENS = 16
TEST_TIMEOUT = 20.0
MAX_ANSWER_CHARS = 500


@dataclass(frozen=True, slots=True)
class ConnectionResult:
    """What one test call gave: ``ok`` with the answer, tokens and latency, or the error.
    ``missing_keys`` names the key variables this server lacks (names, never values)."""

    ok: bool
    model: str
    answer: str
    tokens_in: int
    tokens_out: int
    latency: float | None
    error: str
    missing_keys: list[str]


def _without_secret(text: str, api_key_env: str) -> str:
    secret = os.environ.get(api_key_env) if api_key_env else None
    return text.replace(secret, "***") if secret else text


def connection_test(
    *,
    model: str,
    api_base: str = "",
    api_key_env: str = "",
    params: dict[str, Any] | None = None,
    timeout: float = TEST_TIMEOUT,
) -> ConnectionResult:
    """One call of ``model`` with a one-word prompt and few output tokens."""
    missing = missing_key_variables(model, api_base=api_base, api_key_env=api_key_env)
    if missing:
        names = ", ".join(missing)
        return ConnectionResult(
            ok=False, model=model, answer="", tokens_in=0, tokens_out=0, latency=None,
            error=f"Not set in the server's environment: {names}.", missing_keys=missing,
        )  # fmt: skip
    call_params = {**(params or {})}
    if not model.startswith("sim/"):
        call_params.setdefault("max_tokens", MAX_TEST_TOKENS)
    client = make_client(model, api_base=api_base, api_key_env=api_key_env, params=call_params)
    started = time.perf_counter()
    try:
        completion = async_to_sync(client.complete)(
            [{"role": "user", "content": PROMPT}], timeout=timeout
        )
    except ModelError as error:
        return ConnectionResult(
            ok=False, model=model, answer="", tokens_in=0, tokens_out=0,
            latency=time.perf_counter() - started,
            error=_without_secret(str(error), api_key_env), missing_keys=[],
        )  # fmt: skip
    return ConnectionResult(
        ok=True,
        model=model,
        answer=_without_secret(completion.text, api_key_env)[:MAX_ANSWER_CHARS],
        tokens_in=completion.tokens_in,
        tokens_out=completion.tokens_out,
        latency=completion.latency,
        error="",
        missing_keys=[],
    )


def worker_connection_test(*, worker: Worker) -> ConnectionResult:
    """Test a stored worker as its runs would call it."""
    return connection_test(
        model=worker.model,
        api_base=worker.api_base,
        api_key_env=worker.api_key_env,
        params=dict(worker.params or {}),
    )


def conductor_connection_test(*, pool: Pool) -> ConnectionResult:
    """Test a pool's conductor (the simulated conductor answers too)."""
    return connection_test(
        model=pool.conductor_model,
        api_base=pool.conductor_api_base,
        api_key_env=pool.conductor_api_key_env,
        params=dict(pool.conductor_params or {}),
    )
