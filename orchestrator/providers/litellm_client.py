"""The litellm client: any model litellm speaks to, or any OpenAI-compatible server.

The only module that imports litellm, and only inside the first call (the import takes seconds),
with the bundled price table so nothing is fetched from the internet. The API key is read from
the environment variable *named* by the worker at every call; it is never stored on the client
and never appears in an error message. litellm's own retries are off: the scheduler retries.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine.types import Completion, ConfigurationError, Message, ModelError
from orchestrator.providers.calls import outgoing_headers
from orchestrator.providers.dialects import AUTO, resolve_dialect, schema_params

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
MAX_ERROR_LENGTH = 300
# OpenAI-compatible servers that need no key (a local vLLM or Ollama) still get a non-empty one,
# because the OpenAI SDK refuses to send a request without.
NO_KEY_PLACEHOLDER = "no-key"
_KEY_LIKE = re.compile(r"\b(sk|pk|rk|cs)[-_][A-Za-z0-9_\-]{8,}")
# What the OpenAI SDK says (and litellm passes on as a 500) when it was given no key at all.
_NO_CREDENTIALS = ("Missing credentials", "api_key client option must be set")

_litellm: Any = None


def _load_litellm() -> Any:
    """Import litellm once, configured to stay offline and quiet and not to retry."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.num_retries = 0
        litellm.set_verbose = False
        _litellm = litellm
    return _litellm


def missing_key_variables(model: str, *, api_base: str = "", api_key_env: str = "") -> list[str]:
    """The names of the environment variables that should hold this worker's key and are not
    set (never their values). A worker that names its variable needs that one; one that names
    none and has no API base uses litellm's default for its provider (``OPENAI_API_KEY``, ...);
    one with an API base and no variable needs no key (a local server)."""
    if api_key_env:
        return [] if os.environ.get(api_key_env) else [api_key_env]
    if api_base:
        return []
    found = _load_litellm().validate_environment(model=model)
    if found.get("keys_in_environment"):
        return []
    # Only the key itself: an unset OLLAMA_API_BASE or VERTEXAI_PROJECT has a working default.
    return [name for name in found.get("missing_keys", []) if "KEY" in name or "TOKEN" in name]


def missing_key_message(model: str, names: Sequence[str]) -> str:
    """What a worker whose key variables ``names`` are unset fails with."""
    if len(names) == 1:
        return f"environment variable {names[0]} is not set (it should hold the key for {model})"
    return (
        f"environment variables {', '.join(names)} are not set "
        f"(they should hold the key for {model})"
    )


def redact(text: str, secret: str | None) -> str:
    """``text`` with the secret, and anything that looks like a key, masked; shortened."""
    if secret:
        text = text.replace(secret, "***")
    text = _KEY_LIKE.sub("***", text)
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 3] + "..."


@dataclass(slots=True)
class LiteLLMClient:
    """A ``ModelClient`` over ``litellm.acompletion``. Prices are per million tokens; when both
    are zero the cost is litellm's own estimate (0 when it does not know the model)."""

    model: str
    api_base: str = ""
    api_key_env: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    price_in: float = 0.0
    price_out: float = 0.0
    json_dialect: str = AUTO
    """How a schema is asked for (``dialects.resolve_dialect``)."""

    def _api_key(self) -> str | None:
        missing = missing_key_variables(
            self.model, api_base=self.api_base, api_key_env=self.api_key_env
        )
        if missing:
            raise ConfigurationError(missing_key_message(self.model, missing))
        if not self.api_key_env:
            return NO_KEY_PLACEHOLDER if self.api_base else None
        return os.environ[self.api_key_env]

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        timeout: float,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        litellm = _load_litellm()
        api_key = self._api_key()
        arguments: dict[str, Any] = {
            **dict(self.params),
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "timeout": timeout,
            "num_retries": 0,
            "max_retries": 0,
        }
        constrained = ""
        if schema is not None:
            dialect = resolve_dialect(self.json_dialect, model=self.model, api_base=self.api_base)
            for name, value in schema_params(dialect, schema).items():
                if name == "extra_body":  # beside what the parameters put there
                    value = {**dict(arguments.get("extra_body") or {}), **value}
                arguments[name] = value
            constrained = dialect
        if self.api_base:
            arguments["api_base"] = self.api_base
            # Another Conductor Studio server (or this one) reads them: depth limit, step link.
            nesting = outgoing_headers()
            if nesting:
                extra = dict(arguments.get("extra_headers") or {})
                arguments["extra_headers"] = {**extra, **nesting}
        if api_key is not None:
            arguments["api_key"] = api_key
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(**arguments)
        except Exception as error:
            model_error = _as_model_error(litellm, error, self.model, api_key)
            if model_error is None:
                raise
            raise model_error from None
        latency = time.perf_counter() - started
        return self._completion(litellm, response, latency, api_key, constrained)

    def _completion(
        self, litellm: Any, response: Any, latency: float, api_key: str | None, constrained: str
    ) -> Completion:
        try:
            text = response.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            text = None
        if not isinstance(text, str) or not text.strip():
            raise ModelError(f"{self.model} returned an empty reply", retryable=True)
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        if self.price_in or self.price_out:
            cost = (tokens_in * self.price_in + tokens_out * self.price_out) / 1_000_000
        else:
            try:
                cost = float(litellm.completion_cost(completion_response=response) or 0.0)
            except Exception:  # noqa: BLE001 - litellm raises plain Exception for unpriced models
                cost = 0.0
        return Completion(text, tokens_in, tokens_out, cost, latency, constrained)


def _as_model_error(
    litellm: Any, error: Exception, model: str, api_key: str | None
) -> ModelError | None:
    """The ModelError for a provider failure, or None when ``error`` is not one (a bug)."""
    exceptions = litellm.exceptions
    status = getattr(error, "status_code", None)
    status = status if isinstance(status, int) else None
    detail = redact(str(error), api_key)
    if any(phrase in str(error) for phrase in _NO_CREDENTIALS):
        return ConfigurationError(f"{model} was called without an API key: {detail}")
    if isinstance(error, exceptions.Timeout):
        return ModelError(f"{model} timed out: {detail}", retryable=True, status=status)
    if isinstance(error, exceptions.RateLimitError):
        return ModelError(f"{model} is rate limited (429): {detail}", retryable=True, status=429)
    if isinstance(error, exceptions.APIConnectionError) and status in (None, 500):
        return ModelError(f"cannot reach {model}: {detail}", retryable=True, status=None)
    if isinstance(error, exceptions.AuthenticationError):
        return ConfigurationError(f"{model} rejected the API key (401): {detail}", status=401)
    if isinstance(error, exceptions.PermissionDeniedError):
        return ConfigurationError(f"{model} denied access (403): {detail}", status=403)
    if isinstance(error, exceptions.NotFoundError):
        return ConfigurationError(f"{model} was not found (404): {detail}", status=404)
    if isinstance(error, exceptions.BadRequestError) and "LLM Provider NOT provided" in str(error):
        return ConfigurationError(
            f"{model} is not a model string litellm knows (write provider/model, such as "
            f"openai/gpt-5): {detail}",
            status=400,
        )
    if isinstance(error, exceptions.BadRequestError):
        return ModelError(
            f"{model} rejected the request (400): {detail}", retryable=False, status=400
        )
    known = tuple(
        getattr(exceptions, name)
        for name in ("APIError", "OpenAIError", "InternalServerError", "ServiceUnavailableError")
        if isinstance(getattr(exceptions, name, None), type)
    )
    if isinstance(error, known) or status is not None:
        retryable = status is None or status in RETRYABLE_STATUSES or status >= 500
        shown = f" ({status})" if status else ""
        return ModelError(f"{model} failed{shown}: {detail}", retryable=retryable, status=status)
    return None
