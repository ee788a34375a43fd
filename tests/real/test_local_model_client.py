"""The litellm client against the real llama.cpp server: the usage it reports is what we keep."""

from __future__ import annotations

import httpx
import pytest

from orchestrator.providers import make_client
from tests.real_model import KEY_ENV, MODEL, LocalModel, local_model  # noqa: F401

pytestmark = pytest.mark.real_model

MESSAGES = [{"role": "user", "content": "Name one colour."}]


async def test_completion_tokens_are_the_servers_usage(local_model: LocalModel) -> None:  # noqa: F811
    client = make_client(
        MODEL,
        api_base=local_model.base_url,
        api_key_env=KEY_ENV,
        params={"temperature": 0, "seed": 7, "max_tokens": 16},
    )
    completion = await client.complete(MESSAGES, timeout=120)
    direct = httpx.post(
        f"{local_model.base_url}/chat/completions",
        json={
            "model": "smollm2",
            "messages": MESSAGES,
            "temperature": 0,
            "seed": 7,
            "max_tokens": 16,
        },
        headers={"Authorization": "Bearer local"},
        timeout=120,
    ).json()
    assert completion.text.strip()
    assert completion.tokens_in == direct["usage"]["prompt_tokens"] > 0
    assert 0 < completion.tokens_out == direct["usage"]["completion_tokens"] <= 16
