"""Conversions between the engine's records and what the database stores (plain JSON)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from orchestrator.engine.replay import SourceRound
from orchestrator.engine.types import (
    ALL,
    Access,
    PlanAttempt,
    PlanRecord,
    ResumeState,
    StepAttempt,
    StepRecord,
    StepSpec,
    Workflow,
)
from orchestrator.models import Plan, Step


def access_to_data(access: Access) -> str | list[int]:
    """``"all"`` or a list of earlier indices, as stored on a Step and in a Plan's workflow."""
    return ALL if access == ALL else list(access)


def access_from_data(data: Any) -> Access:
    return ALL if data == ALL else tuple(int(index) for index in data)


def workflow_to_data(workflow: Workflow | None) -> list[dict[str, Any]] | None:
    if workflow is None:
        return None
    return [
        {
            "worker": spec.worker,
            "instruction": spec.instruction,
            "access": access_to_data(spec.access),
        }
        for spec in workflow.steps
    ]


def workflow_from_data(data: list[dict[str, Any]] | None) -> Workflow | None:
    if data is None:
        return None
    return Workflow(
        tuple(
            StepSpec(
                int(item["worker"]), str(item["instruction"]), access_from_data(item["access"])
            )
            for item in data
        )
    )


def attempts_to_data(attempts: list[PlanAttempt]) -> list[dict[str, Any]]:
    return [
        {
            "raw": attempt.raw,
            "error": attempt.error,
            "tokens_in": attempt.tokens_in,
            "tokens_out": attempt.tokens_out,
            "cost": attempt.cost,
            "latency": attempt.latency,
            "queued": attempt.queued,
        }
        for attempt in attempts
    ]


def attempt_from_data(data: dict[str, Any]) -> PlanAttempt:
    """A stored attempt as the engine's record.

    Stored JSON from older rows or the admin may lack keys (they take the record's defaults)
    or carry unknown ones (ignored): resuming a run must not fail on either.
    """
    known = {f.name: data[f.name] for f in fields(PlanAttempt) if f.name in data}
    return PlanAttempt(**{"raw": "", **known})


MAX_ATTEMPT_ERROR_CHARS = 500
"""An attempt's error as stored is cut to this many characters (the step's own error is whole)."""


def step_attempts_to_data(attempts: list[StepAttempt]) -> list[dict[str, Any]]:
    """A step's attempt log as stored on ``Step.attempt_log`` (times in seconds)."""
    return [
        {
            "attempt": attempt.attempt,
            "offset": round(attempt.offset, 3),
            "seconds": round(attempt.seconds, 3),
            "error": _bounded(attempt.error, MAX_ATTEMPT_ERROR_CHARS),
            "backoff": attempt.backoff,
        }
        for attempt in attempts
    ]


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plan_record_from_row(plan: Plan) -> PlanRecord:
    return PlanRecord(
        round=plan.round,
        strategy=plan.strategy,
        messages=list(plan.messages),
        attempts=[attempt_from_data(attempt) for attempt in plan.attempts],
        workflow=workflow_from_data(plan.workflow),
        error=plan.error,
        reused_from=plan.reused_from_id,
        form=plan.form,
        constrained=plan.constrained,
        fallback=plan.fallback,
    )


def resume_state_from_rows(plans: list[Plan], steps: list[Step]) -> ResumeState:
    """What a re-executed run must not do again: its stored plans and its succeeded steps.

    A step's spec is taken from its plan's workflow, so the scheduler recognises it as the same
    step and reuses its response instead of calling the model.
    """
    plan_records = {plan.round: plan_record_from_row(plan) for plan in plans}
    step_records: dict[tuple[int, int], StepRecord] = {}
    for step in steps:
        if step.status != Step.Status.SUCCEEDED:
            continue
        plan = plan_records.get(step.round)
        if plan is None or plan.workflow is None or step.index >= len(plan.workflow.steps):
            continue
        spec = plan.workflow.steps[step.index]
        step_records[(step.round, step.index)] = StepRecord(
            round=step.round,
            index=step.index,
            spec=spec,
            worker_name=step.worker_name,
            model=step.model,
            reads=plan.workflow.reads(step.index),
            messages=list(step.messages),
            status="succeeded",
            response=step.response,
            tokens_in=step.tokens_in,
            tokens_out=step.tokens_out,
            cost=step.cost,
            latency=step.latency or 0.0,
            queued=step.queued,
            attempts=step.attempts,
            error=step.error,
            reused_from=step.reused_from_id,
        )
    return ResumeState(plans=plan_records, steps=step_records)


def source_rounds_from_rows(
    plans: list[Plan], steps: list[Step], *, worker_positions: dict[int, int]
) -> list[SourceRound]:
    """A replay's source as the engine reads it: each stored round's plan (``reused_from`` its
    id) and its steps in order, each spec as the step ran (its worker numbered by
    ``worker_positions``, worker id to index among the pool's enabled workers now) and
    ``reused_from`` the step's id. Rounds without a plan row are left out."""
    by_round: dict[int, list[Step]] = {}
    for step in steps:
        by_round.setdefault(step.round, []).append(step)
    rounds = []
    for plan in sorted(plans, key=lambda row: row.round):
        record = plan_record_from_row(plan)
        record.reused_from = plan.reused_from_id or plan.pk  # the one that was made
        records = []
        for step in sorted(by_round.get(plan.round, []), key=lambda row: row.index):
            spec = StepSpec(
                worker_positions.get(step.worker_id or 0, step.worker_index),
                step.instruction,
                access_from_data(step.access),
            )
            records.append(
                StepRecord(
                    round=step.round,
                    index=step.index,
                    spec=spec,
                    worker_name=step.worker_name,
                    model=step.model,
                    reads=(),
                    messages=list(step.messages),
                    status=step.status,  # type: ignore[arg-type]
                    response=step.response,
                    tokens_in=step.tokens_in,
                    tokens_out=step.tokens_out,
                    cost=step.cost,
                    latency=step.latency or 0.0,
                    attempts=step.attempts,
                    error=step.error,
                    reused_from=step.reused_from_id or step.pk,  # the one that ran
                )
            )
        rounds.append(SourceRound(plan=record, steps=tuple(records)))
    return rounds
