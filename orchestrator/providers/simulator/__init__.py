"""The offline simulator: a bundled task suite, simulated workers and a simulated conductor.

It lets the whole product run and be tested with no network and no keys. Everything it writes
is labelled as simulated; it never pretends to be a language model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.providers.simulator.conductor import SimulatedConductor
from orchestrator.providers.simulator.pool import (
    CONDUCTOR_MODEL,
    DEMO_POOL_NAME,
    PROFILES,
    DemoPool,
    DemoWorker,
    Profile,
    demo_pool,
    profile_skills,
)
from orchestrator.providers.simulator.suite import DOMAINS, Task, load_suite, task_for_question
from orchestrator.providers.simulator.worker import SimulatedWorker

__all__ = [
    "CONDUCTOR_MODEL",
    "DEMO_POOL_NAME",
    "DOMAINS",
    "PROFILES",
    "DemoPool",
    "DemoWorker",
    "Profile",
    "SimulatedConductor",
    "SimulatedWorker",
    "Task",
    "demo_pool",
    "load_suite",
    "make_simulated_client",
    "task_for_question",
]


def make_simulated_client(
    model: str,
    *,
    params: Mapping[str, Any] | None = None,
    price_in: float = 0.0,
    price_out: float = 0.0,
) -> SimulatedWorker | SimulatedConductor:
    """The client for a ``sim/...`` model: the conductor for ``sim/conductor``, else a worker.

    ``params`` may hold ``latency`` (seconds per call), ``seed`` and, for workers, ``skills``
    (domain -> probability of a correct answer, overriding the profile's).
    """
    params = dict(params or {})
    latency = float(params.get("latency", 0.0))
    seed = int(params.get("seed", 0))
    if model == CONDUCTOR_MODEL:
        return SimulatedConductor(
            model=model, latency=latency, seed=seed, price_in=price_in, price_out=price_out
        )
    skills = profile_skills(model)
    skills.update({str(k): float(v) for k, v in dict(params.get("skills") or {}).items()})
    return SimulatedWorker(
        model=model,
        skills=skills,
        latency=latency,
        seed=seed,
        price_in=price_in,
        price_out=price_out,
    )
