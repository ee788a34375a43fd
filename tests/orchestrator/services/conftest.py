"""Helpers for service tests: counting model clients, and a stand-in for a killed worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from orchestrator import providers
from orchestrator.engine.types import Completion, Message


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
