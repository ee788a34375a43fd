"""Test doubles for the engine: a scripted model client, worker pools, a recording observer and a
strategy that hands out given workflows. Nothing here touches the network."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.engine.types import (
    Completion,
    Message,
    ModelError,
    PlanRecord,
    RunResult,
    RunSettings,
    StepRecord,
    StepSpec,
    WorkerInfo,
    Workflow,
)

Reply = str | Completion | BaseException
"""What a scripted call gives: text, a full completion, or an exception to raise."""


@dataclass(slots=True)
class FakeCall:
    """One call the fake received: what it was sent and when it ran (``time.perf_counter``)."""

    messages: list[Message]
    started: float
    finished: float = 0.0

    @property
    def prompt(self) -> str:
        """The last message's text: where a step's own instruction is."""
        return self.messages[-1]["content"] if self.messages else ""


class FakeClient:
    """A scripted ModelClient.

    ``replies`` is either a list used one per call (the last one repeats) or a function of the
    messages. Each call sleeps ``delay`` seconds first; the first ``fail_first`` calls raise
    ``error`` instead (a retryable ModelError by default). Replies given as text get
    ``tokens_in``/``tokens_out``/``cost`` as usage.
    """

    def __init__(
        self,
        replies: Sequence[Reply] | Callable[[list[Message]], Reply] = ("Answer: 42",),
        *,
        model: str = "fake/model",
        delay: float = 0.0,
        fail_first: int = 0,
        error: BaseException | None = None,
        tokens_in: int = 10,
        tokens_out: int = 5,
        cost: float = 0.001,
    ) -> None:
        self.replies = replies
        self.model = model
        self.delay = delay
        self.fail_first = fail_first
        self.error = error or ModelError("rate limited", retryable=True, status=429)
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.cost = cost
        self.calls: list[FakeCall] = []
        self.timeouts: list[float] = []

    @property
    def call_count(self) -> int:
        return len(self.calls)

    @property
    def prompts(self) -> list[str]:
        return [call.prompt for call in self.calls]

    async def complete(self, messages: Sequence[Message], *, timeout: float) -> Completion:
        call = FakeCall(
            messages=[dict(message) for message in messages], started=time.perf_counter()
        )
        self.calls.append(call)
        self.timeouts.append(timeout)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if len(self.calls) <= self.fail_first:
                raise self.error
            reply = self._reply(call.messages)
            if isinstance(reply, BaseException):
                raise reply
            if isinstance(reply, Completion):
                return reply
            return Completion(
                text=reply, tokens_in=self.tokens_in, tokens_out=self.tokens_out, cost=self.cost
            )
        finally:
            call.finished = time.perf_counter()

    def _reply(self, messages: list[Message]) -> Reply:
        if callable(self.replies):
            return self.replies(messages)
        index = min(len(self.calls) - 1 - self.fail_first, len(self.replies) - 1)
        return self.replies[max(index, 0)]


def make_workers(
    count: int = 3, *, client: FakeClient | None = None, clients: Sequence[FakeClient] = ()
) -> list[WorkerInfo]:
    """A pool of ``count`` workers named ``w0``, ``w1``, ...: each with its own client from
    ``clients``, or all sharing ``client``, or each with a fresh FakeClient."""
    if clients:
        count = len(clients)
    workers = []
    for index in range(count):
        worker_client = clients[index] if clients else client or FakeClient(model=f"fake/m{index}")
        workers.append(
            WorkerInfo(
                name=f"w{index}",
                model=worker_client.model,
                description=f"worker number {index}",
                client=worker_client,
            )
        )
    return workers


def workflow(*steps: tuple[int, str, object]) -> Workflow:
    """A workflow from ``(worker, instruction, access)`` triples; access "all" or a list."""
    return Workflow(
        tuple(
            StepSpec(worker, instruction, access if access == "all" else tuple(access))  # type: ignore[arg-type]
            for worker, instruction, access in steps
        )
    )


@dataclass
class ScriptedStrategy:
    """A Strategy that returns the given workflows round by round (None after the last one).

    A ``None`` entry in ``workflows`` makes a failed plan with ``error``. Records the
    ``previous_answer`` it was shown each round.
    """

    workflows: list[Workflow | None]
    name: str = "scripted"
    error: str = "could not plan"
    max_rounds: int | None = None
    previous_answers: list[str | None] = field(default_factory=list)

    async def plan(
        self,
        *,
        round: int,
        question: str,
        workers: Sequence[WorkerInfo],
        settings: RunSettings,
        previous_answer: str | None,
    ) -> PlanRecord | None:
        self.previous_answers.append(previous_answer)
        if round >= len(self.workflows):
            return None
        chosen = self.workflows[round]
        if chosen is None:
            return PlanRecord(round=round, strategy=self.name, error=self.error)
        return PlanRecord(round=round, strategy=self.name, workflow=chosen)


class RecordingObserver:
    """A RunObserver that keeps every callback as ``(name, detail)`` in ``events``.

    ``detail`` is the round for planning/plan_created, ``"round.index"`` for step callbacks and
    the run status for run_finished.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.results: list[RunResult] = []
        self.plan_steps: list[list[StepRecord]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    async def planning(self, round: int) -> None:
        self.events.append(("planning", round))

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        self.events.append(("plan_created", plan.round))
        self.plan_steps.append(list(steps))

    async def step_started(self, step: StepRecord) -> None:
        assert step.messages, "messages are stored before the step starts"
        self.events.append(("step_started", f"{step.round}.{step.index}"))

    async def step_finished(self, step: StepRecord) -> None:
        self.events.append(("step_finished", f"{step.round}.{step.index}"))

    async def step_failed(self, step: StepRecord) -> None:
        self.events.append(("step_failed", f"{step.round}.{step.index}"))

    async def run_finished(self, result: RunResult) -> None:
        self.events.append(("run_finished", result.status))
        self.results.append(result)


class RecordingSleep:
    """An instant stand-in for asyncio.sleep that remembers the delays it was asked for."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
