"""Worker clients behind the engine's ModelClient protocol: litellm and the offline simulator.

Importing this package never imports litellm (it takes seconds); the litellm client imports it
on its first call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from orchestrator.engine.types import ModelClient, WorkerInfo

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
) -> ModelClient:
    """The client for one worker (or conductor). Prices are per million tokens.

    ``sim/...`` models get the simulator; anything else goes through litellm, with the API key
    read at call time from the environment variable named ``api_key_env``.
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


def worker_info(
    worker: WorkerDefinition, *, extra_params: Mapping[str, Any] | None = None
) -> WorkerInfo:
    """The engine's view of ``worker``: its name, model, description and a client for it, called
    with the worker's parameters overridden by ``extra_params``."""
    client = make_client(
        worker.model,
        api_base=worker.api_base,
        api_key_env=worker.api_key_env,
        params={**dict(worker.params or {}), **dict(extra_params or {})},
        price_in=worker.price_in,
        price_out=worker.price_out,
    )
    return WorkerInfo(
        name=worker.name, model=worker.model, description=worker.description, client=client
    )


def missing_key_variables(model: str, *, api_base: str = "", api_key_env: str = "") -> list[str]:
    """The environment variables a worker (or conductor) needs for its key and that are not set
    in this process: names only, never values. Empty for the simulator and for a worker whose
    key is there. May import litellm (seconds, once) for a worker that names no variable."""
    if is_simulated(model):
        return []
    from orchestrator.providers.litellm_client import missing_key_variables as missing

    return missing(model, api_base=api_base, api_key_env=api_key_env)
