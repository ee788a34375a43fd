"""The observer that stores a run as it happens and publishes its live events.

Each engine callback becomes one short transaction in a sync method of ``RunRecorder``, called
through ``sync_to_async`` (thread-sensitive: a run's writes never race each other in a process).
No model call ever happens inside these transactions: the engine calls models between callbacks.
Events are stored with ``orchestrator.events.publish_many`` in the same transaction as the change
they announce; once it commits they are queued, and the observer sends them from the event loop
in seq order (one sender at a time, so a slow channel layer never reorders them).

The recorder keeps what it wrote (step rows, stored plan rounds, totals) so that each callback
costs a handful of statements: storing is meant to cost a few milliseconds per step at most.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from orchestrator import events
from orchestrator.engine.grading import extract_answer, grade
from orchestrator.engine.types import PlanRecord, RunResult, StepRecord
from orchestrator.models import Plan, Run, Step
from orchestrator.services.records import access_to_data, attempts_to_data, workflow_to_data

logger = logging.getLogger(__name__)

TOTAL_FIELDS = ("tokens_in", "tokens_out", "cost", "model_calls", "wall_time", "step_count")
RUN_TABLE = Run._meta.db_table
STEP_RESULT_FIELDS = (
    "status", "messages", "response", "tokens_in", "tokens_out", "cost", "latency", "attempts",
    "error", "finished_at",
)  # fmt: skip


class RunCancelled(Exception):
    """The run was cancelled while it executed; execution stops without writing more."""


def grade_answer(*, answer: str, reference: str, grader: str) -> float:
    """The score of a final answer against a reference under ``grader``."""
    return grade(extract_answer(answer, kind=grader), reference, grader)


class RunRecorder:
    """Stores the callbacks of one run's execution (sync; one thread at a time).

    ``steps`` are the run's stored Step rows (a resumed run has some), ``plan_rounds`` the rounds
    whose plan is stored, ``totals`` the run's stored totals: the recorder keeps all three current.
    Every method publishes its events with ``deliver``, which receives them after the commit.
    """

    def __init__(
        self,
        *,
        run_id: int,
        worker_ids: Sequence[int],
        steps: Iterable[Step] = (),
        plan_rounds: Iterable[int] = (),
        totals: dict[str, Any] | None = None,
        deliver: Any = None,
    ) -> None:
        self.run_id = run_id
        self.worker_ids = list(worker_ids)
        self.steps: dict[tuple[int, int], Step] = {(s.round, s.index): s for s in steps}
        self.plan_rounds = set(plan_rounds)
        self.totals = {field: 0 for field in TOTAL_FIELDS} | dict(totals or {})
        self.deliver = deliver

    # Helpers ------------------------------------------------------------------------------------

    def _publish(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        events.publish_many(self.run_id, items, deliver=self.deliver)

    def _run_status(self) -> str:
        """The run's stored status (row-locked where the database can); raises if cancelled.

        Plain SQL: this runs at every callback, and the ORM would spend more time building the
        statement than the database spends answering it.
        """
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT status FROM {RUN_TABLE} WHERE id = %s{lock}", [self.run_id])
            (status,) = cursor.fetchone()
        if status == Run.Status.CANCELLED:
            raise RunCancelled(f"run {self.run_id} was cancelled")
        return status

    def _move_to(self, status: str, current: str, items: list) -> None:
        """Move the run to ``status`` (from ``current``) and queue the ``run.status`` event."""
        if current == status or current in Run.FINISHED:
            return
        Run.objects.filter(pk=self.run_id).update(
            status=status, started_at=Coalesce(F("started_at"), timezone.now())
        )
        items.append((events.RUN_STATUS, {"status": str(status)}))

    def _add_to_totals(self, **amounts: float) -> None:
        """Add to the stored totals (as increments: exact even if another writer adds too)."""
        unknown = set(amounts) - set(TOTAL_FIELDS)
        if unknown:
            raise ValueError(f"not a total: {', '.join(sorted(unknown))}")
        assignments = ", ".join(f"{field} = {field} + %s" for field in amounts)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {RUN_TABLE} SET {assignments} WHERE id = %s",
                [*amounts.values(), self.run_id],
            )
        for field, amount in amounts.items():
            self.totals[field] += amount

    def _step_row(self, record: StepRecord) -> Step:
        key = (record.round, record.index)
        row = self.steps.get(key)
        if row is None:
            row = Step.objects.get(run_id=self.run_id, round=record.round, index=record.index)
            self.steps[key] = row
        return row

    def _store_plan(self, plan: PlanRecord, items: list) -> Plan | None:
        """Store a plan not stored yet, count its conductor calls, queue ``plan.created``."""
        if plan.round in self.plan_rounds:
            return None
        stored = Plan.objects.create(
            run_id=self.run_id,
            round=plan.round,
            strategy=plan.strategy,
            messages=list(plan.messages),
            attempts=attempts_to_data(plan.attempts),
            workflow=workflow_to_data(plan.workflow),
            error=plan.error,
        )
        self.plan_rounds.add(plan.round)
        items.append((events.PLAN_CREATED, {"plan": events.plan_data(stored)}))
        return stored

    def _plan_usage(self, plan: PlanRecord) -> dict[str, float]:
        attempts = plan.attempts
        return {
            "tokens_in": sum(a.tokens_in for a in attempts),
            "tokens_out": sum(a.tokens_out for a in attempts),
            "cost": sum(a.cost for a in attempts),
            "model_calls": len(attempts),
        }

    # Callbacks ----------------------------------------------------------------------------------

    def planning(self, round: int) -> None:
        """The strategy is about to write the workflow of ``round``."""
        items: list = []
        with transaction.atomic():
            self._move_to(Run.Status.PLANNING, self._run_status(), items)
            self._publish(items)

    def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        """Store the plan of a round and its steps (pending), with reads resolved to step ids."""
        items: list = []
        with transaction.atomic():
            self._run_status()
            stored_plan = self._store_plan(plan, items)
            new_steps = [
                Step(
                    run_id=self.run_id,
                    plan=stored_plan,
                    round=record.round,
                    index=record.index,
                    instruction=record.spec.instruction,
                    worker_id=self._worker_id(record.spec.worker),
                    worker_index=record.spec.worker,
                    worker_name=record.worker_name,
                    model=record.model,
                    access=access_to_data(record.spec.access),
                )
                for record in steps
                if (record.round, record.index) not in self.steps
            ]
            if new_steps:
                Step.objects.bulk_create(new_steps)
                self.steps.update({(s.round, s.index): s for s in new_steps})
                by_index = {s.index: s for s in new_steps}
                reading = []
                for record in steps:
                    row = by_index.get(record.index)
                    if row is not None and record.reads:
                        row.reads = [self.steps[(record.round, read)].pk for read in record.reads]
                        reading.append(row)
                if reading:
                    Step.objects.bulk_update(reading, ["reads"])
            usage = self._plan_usage(plan) if stored_plan is not None else {}
            if usage or new_steps:
                self._add_to_totals(**usage, step_count=len(new_steps))
            items += [(events.STEP_CREATED, {"step": events.step_data(s)}) for s in new_steps]
            self._publish(items)

    def step_started(self, record: StepRecord) -> None:
        """A step was sent to its worker: store exactly what it was sent."""
        items: list = []
        with transaction.atomic():
            self._move_to(Run.Status.RUNNING, self._run_status(), items)
            row = self._step_row(record)
            if row.status != Step.Status.SUCCEEDED:  # a stored result is kept
                row.status = Step.Status.RUNNING
                row.messages = list(record.messages)
                row.started_at = timezone.now()
                row.finished_at = None
                row.error = ""
                row.save(update_fields=["status", "messages", "started_at", "finished_at", "error"])
                items.append((events.STEP_STARTED, {"step": events.step_data(row)}))
            self._publish(items)

    def step_result(self, record: StepRecord) -> None:
        """A step succeeded or failed: store its response, usage and error, once.

        The write is conditional on the row having no result yet (the database checks it under
        the row lock): a redelivered task or a second execution never overwrites a stored result
        nor counts its usage twice.
        """
        succeeded = record.status == "succeeded"
        values = {
            "status": Step.Status.SUCCEEDED if succeeded else Step.Status.FAILED,
            "messages": list(record.messages),
            "response": record.response,
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "cost": record.cost,
            "latency": record.latency if succeeded else None,
            "attempts": record.attempts,
            "error": record.error,
            "finished_at": timezone.now(),
        }
        with transaction.atomic():
            row = self._step_row(record)
            written = (
                Step.objects.filter(pk=row.pk)
                .exclude(status__in=[Step.Status.SUCCEEDED, Step.Status.FAILED])
                .update(**values)
            )
            if not written:
                return
            for field, value in values.items():
                setattr(row, field, value)
            self._add_to_totals(
                tokens_in=record.tokens_in,
                tokens_out=record.tokens_out,
                cost=record.cost,
                model_calls=record.attempts,
            )
            event_type = events.STEP_FINISHED if succeeded else events.STEP_FAILED
            data = {"step": events.step_data(row), "totals": dict(self.totals)}
            self._publish([(event_type, data)])

    def run_finished(self, result: RunResult, score: float | None) -> None:
        """Store how the run ended: plans never announced (accepting or unusable ones), the
        answer, score, error and the engine's final totals. A run already finished is kept."""
        items: list = []
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=self.run_id)
            if run.is_finished:
                return
            for plan in result.plans:  # their calls are in the engine's totals below
                self._store_plan(plan, items)
            totals = result.totals
            run.status = Run.Status.SUCCEEDED if result.status == "succeeded" else Run.Status.FAILED
            run.answer = result.answer
            run.error = result.error
            run.score = score
            run.tokens_in = totals.tokens_in
            run.tokens_out = totals.tokens_out
            run.cost = totals.cost
            run.model_calls = totals.model_calls
            run.wall_time = totals.wall_time
            run.finished_at = timezone.now()
            run.started_at = run.started_at or run.finished_at
            run.save(
                update_fields=[
                    "status", "answer", "error", "score", "tokens_in", "tokens_out", "cost",
                    "model_calls", "wall_time", "finished_at", "started_at",
                ]
            )  # fmt: skip
            items.append((events.RUN_FINISHED, finished_event_data(run)))
            self._publish(items)

    def _worker_id(self, index: int) -> int | None:
        return self.worker_ids[index] if 0 <= index < len(self.worker_ids) else None


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
    ) -> None:
        self.reference = reference
        self.grader = grader
        # Filled in commit order by the recorder's thread, drained in order on the loop.
        self._outbox: deque[dict[str, Any]] = deque()
        self._sending = asyncio.Lock()
        self.recorder = RunRecorder(
            run_id=run_id,
            worker_ids=worker_ids,
            steps=steps,
            plan_rounds=plan_rounds,
            totals=totals,
            deliver=self._outbox.append,
        )

    async def _call(self, method: Any, *args: Any) -> None:
        try:
            await sync_to_async(method)(*args)
        finally:
            await self.flush()

    async def flush(self) -> None:
        """Send every committed event not sent yet, in seq order."""
        async with self._sending:
            while self._outbox:
                await events.send_async(self._outbox.popleft())

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
        score = None
        if self.reference and result.status == "succeeded":
            # Grading code answers runs a subprocess: keep it off the database thread.
            score = await sync_to_async(grade_answer, thread_sensitive=False)(
                answer=result.answer, reference=self.reference, grader=self.grader
            )
        await self._call(self.recorder.run_finished, result, score)


def finished_event_data(run: Run) -> dict[str, Any]:
    """The payload of ``run.finished`` for a run as stored."""
    return {
        "status": str(run.status),
        "answer": run.answer,
        "score": run.score,
        "error": run.error,
        "totals": events.totals_data(run),
    }


def record_run_failed(*, run_id: int, error: str) -> None:
    """The run stopped on an error that is not a model's (a bug, a bad configuration)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_finished:
            return
        run.status = Run.Status.FAILED
        run.error = error
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "error", "finished_at"])
        events.publish(run_id, events.RUN_FINISHED, finished_event_data(run))
