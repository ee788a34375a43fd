"""How a run ends: whatever ends it (the engine, ``run_cancel``, ``run_fail``) closes its open
steps in the same transaction, steps locked before the run row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from orchestrator import events, wire
from orchestrator.engine.scheduler import end_reason
from orchestrator.models import Run, Step
from orchestrator.sql import hot_cursor


def run_end_reason(status: str, error: str = "") -> str:
    """How a run ended, as the steps it closed tell it."""
    if status == Run.Status.CANCELLED:
        return "the run was cancelled"
    if status == Run.Status.FAILED:
        return f"the run failed: {error}" if error else "the run failed"
    return "the run ended before this step started"


def run_set_end(*, run: Run, status: str, error: str = "") -> list[str]:
    """Mark ``run`` (locked, not finished) ended now with ``status``: its wall time is the time
    since it started (none if it never did), as the engine would have stored it. Returns the
    fields to save."""
    run.status = status
    run.error = error
    run.finished_at = timezone.now()
    fields = ["status", "error", "finished_at"]
    if run.started_at is not None and run.wall_time is None:
        run.wall_time = max(0.0, (run.finished_at - run.started_at).total_seconds())
        fields.append("wall_time")
    return fields


def lock_open_steps(*, run_id: int) -> list[tuple[int, str]]:
    """(id, status) of the run's pending and running steps, row-locked where the database can.

    Whatever finishes a run calls this first, before it locks the run row: the recorder's
    callbacks lock a step row and then the run row, so taking them in the same order never
    deadlocks. A step whose result commits meanwhile is no longer open and keeps its result.
    """
    # Plain SQL: every run's end runs it, and the ORM took longer to build it than to run it.
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with hot_cursor() as cursor:
        cursor.execute(
            f"SELECT id, status FROM {_STEP_TABLE} WHERE run_id = %s AND status IN (%s, %s) "
            f'ORDER BY round, "index"{lock}',
            [run_id, *(str(status) for status in Step.OPEN)],
        )
        return [(step_id, str(status)) for step_id, status in cursor.fetchall()]


_STEP_TABLE = Step._meta.db_table


def close_open_steps(
    *, run_id: int, open_steps: Sequence[tuple[int, str]], why: str, at: Any
) -> dict[str, dict[str, Any]]:
    """End the steps ``lock_open_steps`` returned, in the transaction that finishes the run: a
    running step ends ``cancelled``, a pending one ``skipped``, each with an error that says
    ``why``. Returns the ``closed_steps`` of ``run.finished``: ``{status: {"ids": [...],
    "error": "..."}}`` for each status used.
    """
    ids: dict[str, list[int]] = {}
    for step_id, status in open_steps:
        ids.setdefault(status, []).append(step_id)
    closed: dict[str, dict[str, Any]] = {}
    for open_status, end_status in (
        (Step.Status.RUNNING, Step.Status.CANCELLED),
        (Step.Status.PENDING, Step.Status.SKIPPED),
    ):
        if str(open_status) not in ids:
            continue
        error = end_reason(str(end_status), why)
        Step.objects.filter(run_id=run_id, status=open_status).update(
            status=end_status, error=error, finished_at=at
        )
        closed[str(end_status)] = {"ids": ids[str(open_status)], "error": error}
    return closed


def run_fail(*, run_id: int, error: str, fence: int | None = None) -> None:
    """The run stopped on an error that is not a model's (a bug, a bad configuration).

    With ``fence``, only while the run's fence is still that one (an execution that was taken
    over leaves the run to the one that took it).
    """
    with transaction.atomic():
        open_steps = lock_open_steps(run_id=run_id)
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_finished or (fence is not None and run.fence != fence):
            return
        run.save(update_fields=run_set_end(run=run, status=Run.Status.FAILED, error=error))
        closed = close_open_steps(
            run_id=run_id,
            open_steps=open_steps,
            why=run_end_reason(run.status, error),
            at=run.finished_at,
        )
        events.publish(run_id, wire.RUN_FINISHED, wire.finished_data_of(run, closed))
