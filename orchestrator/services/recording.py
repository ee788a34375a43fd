"""The observer the engine calls as a run executes: an async adapter over ``RunRecorder``.

Each engine callback becomes one short transaction in a sync method of ``RunRecorder``
(``services/recorder.py``), called through ``sync_to_async`` (thread-sensitive: a run's writes
never race each other in a process). No model call ever happens inside these transactions: the
engine calls models between callbacks. Events are stored in the same transaction as the change
they announce; once it commits they are queued, and the observer sends them from the event loop
in seq order (one sender at a time, so a slow channel layer never reorders them). The sender
runs beside the execution: the next callback's transaction does not wait for the channel layer
to take the previous callback's events (a send that failed is raised at the next callback, as
it was raised by that one before); the run's last callback waits until all are sent.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from asgiref.sync import sync_to_async

from orchestrator import events
from orchestrator.engine.grading import GradingUnavailable
from orchestrator.engine.types import PlanRecord, RunResult, StepRecord
from orchestrator.models import Step
from orchestrator.services.grading import grade_answer
from orchestrator.services.recorder import RunRecorder


class RecordingObserver:
    """A RunObserver that persists every callback of one run and publishes its events.

    Built by ``run_execute_async`` from what it loaded: the run's worker row ids (the engine's
    worker indices map onto them), its stored steps, plan rounds and totals, and the reference
    and grader that score the final answer.
    """

    def __init__(
        self,
        *,
        run_id: int,
        worker_ids: Sequence[int],
        reference: str = "",
        grader: str = "",
        steps: Iterable[Step] = (),
        plan_rounds: Iterable[int] = (),
        totals: dict[str, Any] | None = None,
        status: str | None = None,
        fence: int | None = None,
    ) -> None:
        self.reference = reference
        self.grader = grader
        # Filled in commit order by the recorder's thread, drained in order on the loop.
        self._outbox: deque[dict[str, Any]] = deque()
        self._sender: asyncio.Task[None] | None = None
        self._send_error: BaseException | None = None
        self.recorder = RunRecorder(
            run_id=run_id,
            worker_ids=worker_ids,
            steps=steps,
            plan_rounds=plan_rounds,
            totals=totals,
            status=status,
            deliver=self._outbox.append,
            fence=fence,
        )

    async def _call(self, method: Any, *args: Any) -> None:
        self._raise_send_error()
        try:
            await sync_to_async(method)(*args)
        finally:
            self._start_sending()

    def _start_sending(self) -> None:
        """Have the committed events sent, in order, by the one sender task (on this loop)."""
        if self._outbox and (self._sender is None or self._sender.done()):
            self._sender = asyncio.get_running_loop().create_task(self._send_outbox())

    async def _send_outbox(self) -> None:
        while self._outbox:
            batch = list(self._outbox)  # what has committed so far, in seq order
            try:
                await events.send_many_async(batch)
            except Exception as error:  # noqa: BLE001 (raised on the next callback)
                self._send_error = error
                return
            for _ in batch:
                self._outbox.popleft()

    def _raise_send_error(self) -> None:
        error, self._send_error = self._send_error, None
        if error is not None:
            raise error

    async def flush(self) -> None:
        """Send every committed event not sent yet, in seq order; raise if a send failed."""
        self._start_sending()
        while self._sender is not None and not self._sender.done():
            await asyncio.shield(self._sender)
            self._start_sending()
        self._raise_send_error()

    async def planning(self, round: int) -> None:
        await self._call(self.recorder.planning, round)

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        await self._call(self.recorder.plan_created, plan, list(steps))

    async def step_started(self, step: StepRecord) -> None:
        await self._call(self.recorder.step_started, step)

    async def step_finished(self, step: StepRecord) -> None:
        await self._call(self.recorder.step_result, step)

    async def step_failed(self, step: StepRecord) -> None:
        await self._call(self.recorder.step_result, step)

    async def run_finished(self, result: RunResult) -> None:
        score, grading_error = None, ""
        if self.reference and result.status == "succeeded":
            # Grading code answers runs a sandbox process: keep it off the database thread.
            try:
                score = await sync_to_async(grade_answer, thread_sensitive=False)(
                    answer=result.answer, reference=self.reference, grader=self.grader
                )
            except GradingUnavailable as error:
                grading_error = f"Not graded: {error}"
        try:
            await self._call(self.recorder.run_finished, result, score, grading_error, self.grader)
        finally:
            await self.flush()
