"""The observer that stores a run as it happens and publishes its live events.

Each engine callback becomes one short transaction in a small sync function, called through
``sync_to_async`` (thread-sensitive, so a run's writes never race each other in one process).
No model call ever happens inside these transactions: the engine calls models between callbacks.
Events are published with ``orchestrator.events.publish`` inside the same transaction as the
change they announce, so they reach clients only once the change is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from orchestrator import events
from orchestrator.engine.grading import extract_answer, grade
from orchestrator.engine.types import PlanRecord, RunResult, StepRecord
from orchestrator.models import Plan, Run, Step
from orchestrator.services.records import access_to_data, attempts_to_data, workflow_to_data

logger = logging.getLogger(__name__)

TOTAL_FIELDS = ("tokens_in", "tokens_out", "cost", "model_calls", "wall_time", "step_count")


class RunCancelled(Exception):
    """The run was cancelled while it executed; execution stops without writing more."""


class RecordingObserver:
    """A RunObserver that persists every callback of one run and publishes its events.

    ``worker_ids`` maps the engine's worker indices to Worker row ids (for Step.worker).
    ``reference`` and ``grader`` grade the final answer when a reference is given.
    """

    def __init__(
        self, *, run_id: int, worker_ids: Sequence[int], reference: str = "", grader: str = ""
    ) -> None:
        self.run_id = run_id
        self.worker_ids = list(worker_ids)
        self.reference = reference
        self.grader = grader

    async def planning(self, round: int) -> None:
        await sync_to_async(record_planning)(run_id=self.run_id, round=round)

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        await sync_to_async(record_plan)(
            run_id=self.run_id, plan=plan, steps=list(steps), worker_ids=self.worker_ids
        )

    async def step_started(self, step: StepRecord) -> None:
        await sync_to_async(record_step_started)(run_id=self.run_id, step=step)

    async def step_finished(self, step: StepRecord) -> None:
        await sync_to_async(record_step_result)(run_id=self.run_id, step=step)

    async def step_failed(self, step: StepRecord) -> None:
        await sync_to_async(record_step_result)(run_id=self.run_id, step=step)

    async def run_finished(self, result: RunResult) -> None:
        score = None
        if self.reference and result.status == "succeeded":
            # Grading code answers runs a subprocess: keep it off the database thread.
            score = await sync_to_async(grade_answer, thread_sensitive=False)(
                answer=result.answer, reference=self.reference, grader=self.grader
            )
        await sync_to_async(record_run_finished)(run_id=self.run_id, result=result, score=score)


def grade_answer(*, answer: str, reference: str, grader: str) -> float:
    """The score of a final answer against a reference under ``grader``."""
    return grade(extract_answer(answer, kind=grader), reference, grader)


def _check_not_cancelled(run_id: int) -> None:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).get()
    if status == Run.Status.CANCELLED:
        raise RunCancelled(f"run {run_id} was cancelled")


def _set_status(run_id: int, status: str) -> None:
    """Move a run that is not finished to ``status`` and announce it (no-op if already there)."""
    changed = (
        Run.objects.filter(pk=run_id)
        .exclude(status__in=[status, *Run.FINISHED])
        .update(status=status)
    )
    if changed:
        Run.objects.filter(pk=run_id, started_at__isnull=True).update(started_at=timezone.now())
        events.publish(run_id, events.RUN_STATUS, {"status": str(status)})


def _totals(run_id: int) -> dict[str, Any]:
    values = Run.objects.filter(pk=run_id).values(*TOTAL_FIELDS).get()
    return dict(values)


def record_planning(*, run_id: int, round: int) -> None:
    """The strategy is about to write the workflow of ``round``."""
    with transaction.atomic():
        _check_not_cancelled(run_id)
        _set_status(run_id, Run.Status.PLANNING)


def _store_plan(run_id: int, plan: PlanRecord) -> tuple[Plan, bool]:
    """Store a plan once; a plan already stored for the round is kept as it is."""
    stored, created = Plan.objects.get_or_create(
        run_id=run_id,
        round=plan.round,
        defaults={
            "strategy": plan.strategy,
            "messages": list(plan.messages),
            "attempts": attempts_to_data(plan.attempts),
            "workflow": workflow_to_data(plan.workflow),
            "error": plan.error,
        },
    )
    if created:
        Run.objects.filter(pk=run_id).update(
            tokens_in=F("tokens_in") + sum(a.tokens_in for a in plan.attempts),
            tokens_out=F("tokens_out") + sum(a.tokens_out for a in plan.attempts),
            cost=F("cost") + sum(a.cost for a in plan.attempts),
            model_calls=F("model_calls") + len(plan.attempts),
        )
        events.publish(run_id, events.PLAN_CREATED, {"plan": events.plan_data(stored)})
    return stored, created


def record_plan(
    *, run_id: int, plan: PlanRecord, steps: list[StepRecord], worker_ids: Sequence[int]
) -> None:
    """Store the plan of a round and its steps (pending), with reads resolved to step ids."""
    with transaction.atomic():
        _check_not_cancelled(run_id)
        stored_plan, _ = _store_plan(run_id, plan)
        existing = {
            step.index: step for step in Step.objects.filter(run_id=run_id, round=plan.round)
        }
        new_steps = [
            Step(
                run_id=run_id,
                plan=stored_plan,
                round=record.round,
                index=record.index,
                instruction=record.spec.instruction,
                worker_id=_worker_id(worker_ids, record.spec.worker),
                worker_index=record.spec.worker,
                worker_name=record.worker_name,
                model=record.model,
                access=access_to_data(record.spec.access),
            )
            for record in steps
            if record.index not in existing
        ]
        if not new_steps:
            return
        Step.objects.bulk_create(new_steps)
        by_index = {**existing, **{step.index: step for step in new_steps}}
        for record in steps:
            if record.index not in existing:
                by_index[record.index].reads = [by_index[read].pk for read in record.reads]
        Step.objects.bulk_update(new_steps, ["reads"])
        Run.objects.filter(pk=run_id).update(step_count=F("step_count") + len(new_steps))
        for step in new_steps:
            events.publish(run_id, events.STEP_CREATED, {"step": events.step_data(step)})


def _worker_id(worker_ids: Sequence[int], index: int) -> int | None:
    return worker_ids[index] if 0 <= index < len(worker_ids) else None


def _locked_step(run_id: int, record: StepRecord) -> Step:
    return Step.objects.select_for_update().get(
        run_id=run_id, round=record.round, index=record.index
    )


def record_step_started(*, run_id: int, step: StepRecord) -> None:
    """A step was sent to its worker: store exactly what it was sent."""
    with transaction.atomic():
        _check_not_cancelled(run_id)
        _set_status(run_id, Run.Status.RUNNING)
        row = _locked_step(run_id, step)
        if row.status == Step.Status.SUCCEEDED:
            return  # another execution already has its result; it is kept
        row.status = Step.Status.RUNNING
        row.messages = list(step.messages)
        row.started_at = timezone.now()
        row.finished_at = None
        row.error = ""
        row.save(update_fields=["status", "messages", "started_at", "finished_at", "error"])
        events.publish(run_id, events.STEP_STARTED, {"step": events.step_data(row)})


def record_step_result(*, run_id: int, step: StepRecord) -> None:
    """A step succeeded or failed: store its response, usage and error, once.

    The row is locked first; a step that already has a result keeps it (a redelivered task or a
    second execution never overwrites a stored result or counts its usage twice).
    """
    with transaction.atomic():
        row = _locked_step(run_id, step)
        if row.status in (Step.Status.SUCCEEDED, Step.Status.FAILED):
            return
        succeeded = step.status == "succeeded"
        row.status = Step.Status.SUCCEEDED if succeeded else Step.Status.FAILED
        row.messages = list(step.messages)
        row.response = step.response
        row.tokens_in = step.tokens_in
        row.tokens_out = step.tokens_out
        row.cost = step.cost
        row.latency = step.latency if succeeded else None
        row.attempts = step.attempts
        row.error = step.error
        row.finished_at = timezone.now()
        row.save(
            update_fields=[
                "status",
                "messages",
                "response",
                "tokens_in",
                "tokens_out",
                "cost",
                "latency",
                "attempts",
                "error",
                "finished_at",
            ]
        )
        Run.objects.filter(pk=run_id).update(
            tokens_in=F("tokens_in") + step.tokens_in,
            tokens_out=F("tokens_out") + step.tokens_out,
            cost=F("cost") + step.cost,
            model_calls=F("model_calls") + step.attempts,
        )
        events.publish(
            run_id,
            events.STEP_FINISHED if succeeded else events.STEP_FAILED,
            {"step": events.step_data(row), "totals": _totals(run_id)},
        )
    _check_not_cancelled(run_id)


def record_run_finished(*, run_id: int, result: RunResult, score: float | None) -> None:
    """Store how the run ended: plans never shown as created (accepting or unusable ones), the
    answer, score, error and the engine's final totals. A run already finished is left alone."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_finished:
            return
        for plan in result.plans:
            _store_plan(run_id, plan)
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
        if run.started_at is None:
            run.started_at = run.finished_at
        run.save(
            update_fields=[
                "status",
                "answer",
                "error",
                "score",
                "tokens_in",
                "tokens_out",
                "cost",
                "model_calls",
                "wall_time",
                "finished_at",
                "started_at",
            ]
        )
        events.publish(run_id, events.RUN_FINISHED, finished_event_data(run))


def finished_event_data(run: Run) -> dict[str, Any]:
    """The payload of ``run.finished`` for a run as stored."""
    return {
        "status": run.status,
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
