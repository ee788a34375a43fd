"""Helpers for service tests: executing a run, a run of the suite's code task, counting model
clients, and a stand-in for a killed worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from orchestrator import providers
from orchestrator.engine.types import Completion, Message
from orchestrator.models import Run
from orchestrator.providers.simulator import load_suite
from orchestrator.services.runs import run_create, run_execute

CODE_TASK = next(task for task in load_suite() if task.grader == "code")


def code_run(pool, *, created_by=None, **kwargs) -> Run:
    """A stored run (not enqueued) of the suite's first code task, answered by one worker."""
    return run_create(
        pool=pool,
        input=CODE_TASK.question,
        strategy="single",
        reference=CODE_TASK.reference,
        grader="code",
        created_by=created_by,
        enqueue=False,
        **kwargs,
    )


@pytest.fixture
def execute(django_capture_on_commit_callbacks):
    """Execute a run as Celery or the CLI would, running on-commit work (event sends) after it."""

    def execute_run(run: Run) -> Run:
        with django_capture_on_commit_callbacks(execute=True):
            run_execute(run_id=run.pk)
        run.refresh_from_db()
        return run

    return execute_run


class SimulatedKill(BaseException):
    """Stops an execution the way SIGKILL would: nothing catches it, nothing is cleaned up."""


@dataclass
class CallLog:
    """Every model call made through ``make_client`` during a test: (model, last message)."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    kill_at_call: int | None = None

    def models(self) -> list[str]:
        return [model for model, _ in self.calls]


class CountingClient:
    def __init__(self, inner, log: CallLog) -> None:
        self.inner = inner
        self.model = inner.model
        self.log = log

    async def complete(self, messages: Sequence[Message], *, timeout: float) -> Completion:
        self.log.calls.append((self.model, messages[-1]["content"] if messages else ""))
        if self.log.kill_at_call is not None and len(self.log.calls) >= self.log.kill_at_call:
            raise SimulatedKill()
        return await self.inner.complete(messages, timeout=timeout)


@pytest.fixture
def call_log(monkeypatch) -> CallLog:
    """Wraps every client the services make, counting calls (and optionally killing one)."""
    log = CallLog()
    real_make_client = providers.make_client

    def make_counting_client(model, **kwargs):
        return CountingClient(real_make_client(model, **kwargs), log)

    monkeypatch.setattr(providers, "make_client", make_counting_client)
    return log
