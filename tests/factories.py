"""Factories: stored objects with sensible defaults; a test overrides only what it cares about."""

from __future__ import annotations

import itertools
from typing import Any

from django.contrib.auth import get_user_model

from orchestrator.models import Membership, Plan, Pool, Project, Run, Step, Worker

_counter = itertools.count(1)


def _next() -> int:
    return next(_counter)


def make_user(*, username: str | None = None, password: str = "pw-for-tests", **fields: Any):
    """A user with a usable password (``password``)."""
    user = get_user_model().objects.create_user(
        username=username or f"user{_next()}", password=password, **fields
    )
    return user


def make_project(*, name: str | None = None) -> Project:
    number = _next()
    name = name or f"Project {number}"
    return Project.objects.create(name=name, slug=f"project-{number}")


def make_member(*, project: Project, role: str = Membership.Role.VIEWER, **user_fields: Any):
    """A new user who is a member of ``project`` with ``role``."""
    user = make_user(**user_fields)
    Membership.objects.create(project=project, user=user, role=role)
    return user


def make_pool(*, project: Project, workers: int = 2, **fields: Any) -> Pool:
    """A simulated pool with ``workers`` simulated workers, no latency."""
    defaults = {"name": f"Pool {_next()}", "conductor_params": {"latency": 0}}
    pool = Pool.objects.create(project=project, **{**defaults, **fields})
    for position in range(workers):
        make_worker(pool=pool, position=position)
    return pool


def make_worker(*, pool: Pool, **fields: Any) -> Worker:
    number = _next()
    defaults = {
        "name": f"Worker {number}",
        "model": "sim/swift",
        "description": "A simulated worker.",
        "params": {"latency": 0},
        "position": number,
    }
    return Worker.objects.create(pool=pool, **{**defaults, **fields})


def make_run(*, pool: Pool, **fields: Any) -> Run:
    """A stored run (no execution, no events)."""
    defaults = {"input": f"Question {_next()}?", "strategy": "conductor"}
    return Run.objects.create(project_id=pool.project_id, pool=pool, **{**defaults, **fields})


def make_plan(*, run: Run, round: int = 0, **fields: Any) -> Plan:
    defaults = {"strategy": run.strategy, "workflow": []}
    return Plan.objects.create(run=run, round=round, **{**defaults, **fields})


def make_step(*, run: Run, round: int = 0, index: int = 0, **fields: Any) -> Step:
    defaults = {
        "instruction": f"Do part {index}.",
        "worker_index": 0,
        "worker_name": "Worker",
        "model": "sim/swift",
    }
    return Step.objects.create(run=run, round=round, index=index, **{**defaults, **fields})
