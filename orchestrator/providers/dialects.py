"""How each kind of server is asked for output constrained to a JSON schema.

The same request means different parameters on different servers:

- ``openai``: OpenAI's structured outputs, ``response_format: {"type": "json_schema",
  "json_schema": {"name", "schema", "strict": true}}`` (also vLLM's recent versions, LM Studio,
  and most hosted providers behind litellm);
- ``llamacpp``: llama.cpp's server (``llama-cpp-python``'s too), ``response_format: {"type":
  "json_object", "schema": ...}`` (llama-cpp-python refuses the ``json_schema`` form);
- ``vllm``: vLLM's guided decoding, ``guided_json: <schema>`` in the request body;
- ``ollama``: Ollama's native API, ``format: <schema>``.

``auto`` picks one from the model string and the API base, in this order: ``ollama/`` or
``ollama_chat/`` models speak ``ollama``, ``hosted_vllm/`` models ``vllm``, any other model with
an API base (a local OpenAI-compatible server) ``llamacpp``, and the rest ``openai``. A pool
names its dialect where ``auto`` guesses wrong (a vLLM server behind ``openai/...``, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

Dialect: TypeAlias = Literal["openai", "llamacpp", "vllm", "ollama"]
DIALECTS: Final = ("openai", "llamacpp", "vllm", "ollama")
"""Every dialect a pool may name, besides ``auto``."""
AUTO: Final = "auto"
SCHEMA_NAME: Final = "workflow"


def resolve_dialect(dialect: str, *, model: str, api_base: str = "") -> Dialect:
    """The dialect ``dialect`` ("auto" or one of ``DIALECTS``) means for this model."""
    named: dict[str, Dialect] = {
        "openai": "openai",
        "llamacpp": "llamacpp",
        "vllm": "vllm",
        "ollama": "ollama",
    }
    if dialect in named:
        return named[dialect]
    if dialect != AUTO:
        raise ValueError(f"unknown JSON output dialect {dialect!r}")
    if model.startswith(("ollama/", "ollama_chat/")):
        return "ollama"
    if model.startswith("hosted_vllm/"):
        return "vllm"
    if api_base:
        return "llamacpp"
    return "openai"


def schema_params(dialect: Dialect, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The call parameters that ask a server speaking ``dialect`` for output following
    ``schema`` (litellm passes them on as they are)."""
    schema = dict(schema)
    if dialect == "openai":
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True},
            }
        }
    if dialect == "llamacpp":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if dialect == "vllm":
        return {"extra_body": {"guided_json": schema}}
    return {"format": schema}
