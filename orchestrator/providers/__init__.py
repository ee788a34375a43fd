"""Worker clients behind the engine's ModelClient protocol: litellm and the offline simulator.

Importing this package never imports litellm (it takes seconds); the litellm client imports it
on its first call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from orchestrator.engine.types import ModelClient, Slots, WorkerInfo

SIMULATED_PREFIX = "sim/"


def is_simulated(model: str) -> bool:
    """Whether ``model`` names the offline simulator (``sim/...``)."""
    return model.startswith(SIMULATED_PREFIX)


def make_client(
    model: str,
    *,
    api_base: str = "",
    api_key_env: str = "",
    params: Mapping[str, Any] | None = None,
    price_in: float = 0.0,
    price_out: float = 0.0,
    json_dialect: str = "auto",
) -> ModelClient:
    """The client for one worker (or conductor). Prices are per million tokens.

    ``sim/...`` models get the simulator; anything else goes through litellm, with the API key
    read at call time from the environment variable named ``api_key_env``, and a schema asked
    for in ``json_dialect`` (``dialects.resolve_dialect``).
    """
    if is_simulated(model):
        from orchestrator.providers.simulator import make_simulated_client

        return make_simulated_client(model, params=params, price_in=price_in, price_out=price_out)
    from orchestrator.providers.litellm_client import LiteLLMClient

    return LiteLLMClient(
        model=model,
        api_base=api_base,
        api_key_env=api_key_env,
        params=dict(params or {}),
        price_in=price_in,
        price_out=price_out,
        json_dialect=json_dialect,
    )


class WorkerDefinition(Protocol):
    """What a worker is made of, whether a stored Worker row or a definition in code
    (``simulator.DemoWorker``)."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def price_in(self) -> float: ...
    @property
    def price_out(self) -> float: ...
    @property
    def api_base(self) -> str: ...
    @property
    def api_key_env(self) -> str: ...


OUTPUT_BOUND_PARAMS: Final = frozenset(
    {"max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict"}
)
"""Call parameters that bound a call's output: one given explicitly wins over a default."""


def bounded_params(params: Mapping[str, Any], max_tokens: int | None) -> dict[str, Any]:
    """``params`` with ``max_tokens`` added unless they already bound the output themselves
    (explicit parameters win) or ``max_tokens`` is None (no default bound)."""
    bounded = dict(params)
    if max_tokens is not None and not OUTPUT_BOUND_PARAMS & bounded.keys():
        bounded["max_tokens"] = max_tokens
    return bounded


def worker_info(
    worker: WorkerDefinition,
    *,
    extra_params: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    slots: Slots | None = None,
) -> WorkerInfo:
    """The engine's view of ``worker``: its name, model, description and a client for it, called
    with the worker's parameters overridden by ``extra_params``, and ``max_tokens`` when
    neither bounds the output; ``slots``: its concurrency bound."""
    client = make_client(
        worker.model,
        api_base=worker.api_base,
        api_key_env=worker.api_key_env,
        params=bounded_params(
            {**dict(worker.params or {}), **dict(extra_params or {})}, max_tokens
        ),
        price_in=worker.price_in,
        price_out=worker.price_out,
    )
    return WorkerInfo(
        name=worker.name,
        model=worker.model,
        description=worker.description,
        client=client,
        slots=slots,
    )


def missing_key_variables(model: str, *, api_base: str = "", api_key_env: str = "") -> list[str]:
    """The environment variables a worker (or conductor) needs for its key and that are not set
    in this process: names only, never values. Empty for the simulator and for a worker whose
    key is there. May import litellm (seconds, once) for a worker that names no variable."""
    if is_simulated(model):
        return []
    from orchestrator.providers.litellm_client import missing_key_variables as missing

    return missing(model, api_base=api_base, api_key_env=api_key_env)
