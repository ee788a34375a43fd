"""The observer that stores a run as it happens and publishes its live events.

Each engine callback becomes one short transaction in a sync method of ``RunRecorder``, called
through ``sync_to_async`` (thread-sensitive: a run's writes never race each other in a process).
No model call ever happens inside these transactions: the engine calls models between callbacks.
Events are stored with ``orchestrator.events.publish_many`` in the same transaction as the change
they announce; once it commits they are queued, and the observer sends them from the event loop
in seq order (one sender at a time, so a slow channel layer never reorders them).

The recorder keeps what it wrote (step rows, stored plan rounds, totals, the run's status) so
that each callback costs two to four statements, in plain SQL on the hot path: storing is meant to
cost a few milliseconds per step at most (``python -m bench.stored_overhead``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from orchestrator import events
from orchestrator.engine.grading import GradingUnavailable, extract_answer, grade
from orchestrator.engine.sandbox import sandbox_problem
from orchestrator.engine.scheduler import end_reason
from orchestrator.engine.types import PlanRecord, RunResult, StepRecord
from orchestrator.models import Plan, Run, Step
from orchestrator.services.records import access_to_data, attempts_to_data, workflow_to_data
from orchestrator.sql import can_return

logger = logging.getLogger(__name__)

TOTAL_FIELDS = ("tokens_in", "tokens_out", "cost", "model_calls", "wall_time", "step_count")
RUN_TABLE = Run._meta.db_table
STEP_TABLE = Step._meta.db_table
STEP_RESULT_FIELDS = (
    "status", "messages", "response", "tokens_in", "tokens_out", "cost", "latency", "attempts",
    "error", "finished_at",
)  # fmt: skip
_STEP_RESULT_SQL = (
    f"UPDATE {STEP_TABLE} SET {', '.join(f'{field} = %s' for field in STEP_RESULT_FIELDS)} "
    "WHERE id = %s AND status NOT IN (%s, %s)"
)
_STEP_MESSAGES = Step._meta.get_field("messages")
_STEP_READS = Step._meta.get_field("reads")


_RUN_RETURNING = ", ".join(("last_seq", *TOTAL_FIELDS))


def _update_returning(sql: str, params: list[Any], *, returning: str, id: int) -> tuple | None:
    """Run an UPDATE of one run row and read back ``returning`` from it (in the same statement
    where the database can); None if the UPDATE matched no row."""
    with connection.cursor() as cursor:
        if can_return():
            cursor.execute(f"{sql} RETURNING {returning}", params)
            rows = cursor.fetchall()
            return rows[0] if rows else None
        cursor.execute(sql, params)
        if cursor.rowcount == 0:
            return None
        cursor.execute(f"SELECT {returning} FROM {RUN_TABLE} WHERE id = %s", [id])
        return cursor.fetchone()


_INSERT_BATCH = 500


def _insert(rows: list[Any]) -> None:
    """Insert new rows of one model and give them their ids: ``bulk_create`` without the cost of
    building the statement through the ORM (which took most of a plan's storing time)."""
    if not rows:
        return
    model = type(rows[0])
    if not can_return():
        model.objects.bulk_create(rows)
        return
    fields = [field for field in model._meta.local_concrete_fields if not field.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    one_row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    for start in range(0, len(rows), _INSERT_BATCH):
        batch = rows[start : start + _INSERT_BATCH]
        params = [
            field.get_db_prep_save(field.pre_save(row, True), connection)
            for row in batch
            for field in fields
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "
                f"VALUES {', '.join([one_row] * len(batch))} "
                f"RETURNING {quote(model._meta.pk.column)}",
                params,
            )
            ids = cursor.fetchall()
        for row, (pk,) in zip(batch, ids, strict=True):
            row.pk = pk
            row._state.adding = False
            row._state.db = connection.alias


def _db_datetime(value: Any) -> Any:
    """A datetime as this database's driver takes it in plain SQL (what the ORM would send)."""
    return connection.ops.adapt_datetimefield_value(value)


class RunClosed(Exception):
    """The run finished elsewhere while it executed (cancelled, or failed by another process):
    execution stops without writing more, so nothing follows the run's ``run.finished``."""


class RunCancelled(RunClosed):
    """The run was cancelled while it executed; execution stops without writing more."""


CODE_GRADING_OFF = "Code grading is turned off on this server (CONDUCTOR_CODE_GRADING=off)."


def code_grading_problem() -> str | None:
    """Why code references cannot be graded on this server (turned off, or no sandbox), said so
    that an operator knows what to do; None when they can."""
    if settings.CONDUCTOR_CODE_GRADING == "off":
        return CODE_GRADING_OFF
    return sandbox_problem()


class RunTakenOver(Exception):
    """Another execution took the run over (its fence moved on); this one stops without writing
    more (see ``services/ownership.py``)."""


def grade_answer(*, answer: str, reference: str, grader: str) -> float:
    """The score of a final answer against a reference under ``grader``.

    Raises GradingUnavailable when a code answer cannot be graded here: it is never run outside
    the sandbox, and a refusal is not a wrong answer."""
    if grader == "code" and settings.CONDUCTOR_CODE_GRADING == "off":
        raise GradingUnavailable(CODE_GRADING_OFF)
    return grade(extract_answer(answer, kind=grader), reference, grader)


class RunRecorder:
    """Stores the callbacks of one run's execution (sync; one thread at a time).

    ``steps`` are the run's stored Step rows (a resumed run has some), ``plan_rounds`` the rounds
    whose plan is stored, ``totals`` the run's stored totals and ``status`` its stored status: the
    recorder keeps all four current. Every method publishes its events with ``deliver``, which
    receives them after the commit. With ``fence`` (the execution's fencing token), a callback
    is stored only while the run's fence is still that one; else it raises RunTakenOver.

    Each callback is one transaction of two to four short statements, in plain SQL where the ORM
    would spend more time building a statement than the database spends running it: the step's
    row first (conditional, so a stored result is never overwritten), then one UPDATE of the run
    row that checks its status, adds to its totals and takes the seqs of the callback's events
    (the row lock it holds until the commit keeps seqs gapless and in commit order), then one
    INSERT of those events.
    """

    def __init__(
        self,
        *,
        run_id: int,
        worker_ids: Sequence[int],
        steps: Iterable[Step] = (),
        plan_rounds: Iterable[int] = (),
        totals: dict[str, Any] | None = None,
        status: str | None = None,
        deliver: Any = None,
        fence: int | None = None,
    ) -> None:
        self.run_id = run_id
        self.fence = fence
        self.worker_ids = list(worker_ids)
        self.steps: dict[tuple[int, int], Step] = {(s.round, s.index): s for s in steps}
        self.plan_rounds = set(plan_rounds)
        self.totals = {field: 0 for field in TOTAL_FIELDS} | dict(totals or {})
        self.status = status
        self.deliver = deliver

    # Helpers ------------------------------------------------------------------------------------

    def _publish(self, items: list[tuple[str, dict[str, Any]]], last_seq: int) -> None:
        events.store_events(self.run_id, items, last_seq=last_seq, deliver=self.deliver)

    def _run_status(self) -> str:
        """The run's stored status (row-locked where the database can); raises RunTakenOver if
        another execution took it over, RunClosed if it has finished (RunCancelled if it was
        cancelled)."""
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT status, fence FROM {RUN_TABLE} WHERE id = %s{lock}", [self.run_id]
            )
            row = cursor.fetchone()
        if row is None:
            raise Run.DoesNotExist(f"run {self.run_id} does not exist")
        if self.fence is not None and row[1] != self.fence:
            raise RunTakenOver(f"run {self.run_id} was taken over by another execution")
        if row[0] == Run.Status.CANCELLED:
            raise RunCancelled(f"run {self.run_id} was cancelled")
        if row[0] in Run.FINISHED:
            raise RunClosed(f"run {self.run_id} has finished ({row[0]})")
        return row[0]

    def _advance_run(
        self,
        *,
        event_count: int,
        move_to: str | None = None,
        check_cancelled: bool = True,
        add: dict[str, float] | None = None,
    ) -> tuple[int, bool]:
        """One UPDATE of the run row: take ``event_count`` seqs (one more if the run moves to
        ``move_to``), add ``add`` to the totals, move the status; read back the totals.

        Raises RunClosed (rolling the callback back) if ``check_cancelled`` and the run has
        finished (RunCancelled if it was cancelled). A run not moved gets no status event.
        Returns the run's new last_seq and whether it moved (the caller then announces it).
        """
        add = add or {}
        unknown = set(add) - set(TOTAL_FIELDS)
        if unknown:
            raise ValueError(f"not a total: {', '.join(sorted(unknown))}")
        if move_to is not None and self.status is None:
            self.status = self._run_status()
        moving = move_to is not None and move_to != self.status
        row = self._update_run(
            event_count + moving, add, move_to if moving else None, check_cancelled
        )
        if row is None and (moving or check_cancelled):
            # The status condition failed: the run finished elsewhere (this raises).
            self._run_status()
            moving = False
            row = self._update_run(event_count, add, None, False)
        if row is None:
            self._run_status()  # taken over (raises), else gone
            raise Run.DoesNotExist(f"run {self.run_id} does not exist")
        last_seq, *totals = row
        self.totals.update(zip(TOTAL_FIELDS, totals))
        if moving:
            self.status = move_to
        return last_seq, moving

    def _update_run(
        self, event_count: int, add: dict[str, float], move_to: str | None, conditional: bool
    ) -> tuple | None:
        assignments = ["last_seq = last_seq + %s"]
        params: list[Any] = [event_count]
        for field, amount in add.items():
            assignments.append(f"{field} = {field} + %s")
            params.append(amount)
        if move_to is not None:
            assignments += ["status = %s", "started_at = COALESCE(started_at, %s)"]
            params += [str(move_to), _db_datetime(timezone.now())]
        where = "id = %s"
        params.append(self.run_id)
        if self.fence is not None:
            where += " AND fence = %s"
            params.append(self.fence)
        if conditional:
            # Nothing is stored for a finished run: its run.finished stays its last event.
            where += f" AND status NOT IN ({', '.join(['%s'] * len(Run.FINISHED))})"
            params += [str(status) for status in Run.FINISHED]
        sql = f"UPDATE {RUN_TABLE} SET {', '.join(assignments)} WHERE {where}"
        return _update_returning(sql, params, returning=_RUN_RETURNING, id=self.run_id)

    def _step_row(self, record: StepRecord) -> Step:
        key = (record.round, record.index)
        row = self.steps.get(key)
        if row is None:
            row = Step.objects.get(run_id=self.run_id, round=record.round, index=record.index)
            self.steps[key] = row
        return row

    def _new_plan_rows(self, plans: Iterable[PlanRecord]) -> list[Plan]:
        """Unsaved rows for the plans whose round is not stored yet (one per round)."""
        rows: dict[int, Plan] = {}
        for plan in plans:
            if plan.round in self.plan_rounds or plan.round in rows:
                continue
            rows[plan.round] = Plan(
                run_id=self.run_id,
                round=plan.round,
                strategy=plan.strategy,
                messages=list(plan.messages),
                attempts=attempts_to_data(plan.attempts),
                workflow=workflow_to_data(plan.workflow),
                error=plan.error,
            )
        return list(rows.values())

    def _store_plans(self, rows: list[Plan]) -> list:
        """Insert new plan rows; returns their ``plan.created`` events."""
        if not rows:
            return []
        _insert(rows)
        self.plan_rounds.update(row.round for row in rows)
        return [(events.PLAN_CREATED, {"plan": events.plan_data(row)}) for row in rows]

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
        with transaction.atomic():
            last_seq, moved = self._advance_run(event_count=0, move_to=Run.Status.PLANNING)
            if moved:
                self._publish([(events.RUN_STATUS, {"status": str(Run.Status.PLANNING)})], last_seq)

    def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        """Store the plan of a round and its steps (pending), with reads resolved to step ids."""
        plan_rows = self._new_plan_rows([plan])
        new_steps = [
            Step(
                run_id=self.run_id,
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
        usage = self._plan_usage(plan) if plan_rows else {}
        if new_steps:
            usage["step_count"] = len(new_steps)
        with transaction.atomic():
            last_seq, _ = self._advance_run(event_count=len(plan_rows) + len(new_steps), add=usage)
            items = self._store_plans(plan_rows)
            if new_steps:
                for row in new_steps:
                    row.plan = plan_rows[0] if plan_rows else None
                _insert(new_steps)
                self.steps.update({(s.round, s.index): s for s in new_steps})
                self._store_reads(steps, {s.index: s for s in new_steps})
            items += [(events.STEP_CREATED, {"step": events.step_data(s)}) for s in new_steps]
            if items:
                self._publish(items, last_seq)

    def _store_reads(self, records: Sequence[StepRecord], new_by_index: dict[int, Step]) -> None:
        """Resolve what each new step reads to step ids (known once the rows are inserted)."""
        updates = []
        for record in records:
            row = new_by_index.get(record.index)
            if row is not None and record.reads:
                row.reads = [self.steps[(record.round, read)].pk for read in record.reads]
                updates.append([_STEP_READS.get_db_prep_save(row.reads, connection), row.pk])
        if updates:
            with connection.cursor() as cursor:
                cursor.executemany(f"UPDATE {STEP_TABLE} SET reads = %s WHERE id = %s", updates)

    def step_started(self, record: StepRecord) -> None:
        """A step was sent to its worker: store exactly what it was sent."""
        row = self._step_row(record)
        messages = list(record.messages)
        started_at = timezone.now()
        with transaction.atomic():
            written = False
            if row.status != Step.Status.SUCCEEDED:  # a stored result is kept
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"UPDATE {STEP_TABLE} SET status = %s, messages = %s, started_at = %s, "
                        "finished_at = NULL, error = '' WHERE id = %s AND status != %s",
                        [
                            str(Step.Status.RUNNING),
                            _STEP_MESSAGES.get_db_prep_save(messages, connection),
                            _db_datetime(started_at),
                            row.pk,
                            str(Step.Status.SUCCEEDED),
                        ],
                    )
                    written = cursor.rowcount == 1
            last_seq, moved = self._advance_run(
                event_count=int(written), move_to=Run.Status.RUNNING
            )
            items: list = []
            if moved:
                items.append((events.RUN_STATUS, {"status": str(Run.Status.RUNNING)}))
            if written:
                row.status = Step.Status.RUNNING
                row.messages = messages
                row.started_at = started_at
                row.finished_at = None
                row.error = ""
                items.append((events.STEP_STARTED, {"step": events.step_data(row)}))
            if items:
                self._publish(items, last_seq)

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
        row = self._step_row(record)
        params = [
            str(values["status"]),
            _STEP_MESSAGES.get_db_prep_save(values["messages"], connection),
            *(values[field] for field in STEP_RESULT_FIELDS[2:-1]),
            _db_datetime(values["finished_at"]),
            row.pk,
            str(Step.Status.SUCCEEDED),
            str(Step.Status.FAILED),
        ]
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(_STEP_RESULT_SQL, params)
                if cursor.rowcount != 1:
                    return
            # Checks the run is still going: a result that arrives after the run finished (a
            # cancel while the step ran) is rolled back, as the step ended cancelled and
            # run.finished must stay the run's last event.
            last_seq, _ = self._advance_run(
                event_count=1,
                add={
                    "tokens_in": record.tokens_in,
                    "tokens_out": record.tokens_out,
                    "cost": record.cost,
                    "model_calls": record.attempts,
                },
            )
            for field, value in values.items():
                setattr(row, field, value)
            event_type = events.STEP_FINISHED if succeeded else events.STEP_FAILED
            data = {"step": events.step_data(row), "totals": dict(self.totals)}
            self._publish([(event_type, data)], last_seq)

    def run_finished(
        self, result: RunResult, score: float | None, grading_error: str = ""
    ) -> None:
        """Store how the run ended: plans never announced (accepting or unusable ones), the
        answer, score, error (or why the answer was not graded) and the engine's final totals;
        steps it never started end skipped. A run already finished is kept."""
        error = result.error or grading_error
        plan_rows = self._new_plan_rows(result.plans)  # their calls are in the totals below
        totals = result.totals
        status = Run.Status.SUCCEEDED if result.status == "succeeded" else Run.Status.FAILED
        finished_at = timezone.now()
        assignments = {
            "status": str(status),
            "answer": result.answer,
            "error": error,
            "score": score,
            "tokens_in": totals.tokens_in,
            "tokens_out": totals.tokens_out,
            "cost": totals.cost,
            "model_calls": totals.model_calls,
            "wall_time": totals.wall_time,
            "finished_at": _db_datetime(finished_at),
        }
        finished = [str(s) for s in Run.FINISHED]
        sql = (
            f"UPDATE {RUN_TABLE} SET {', '.join(f'{name} = %s' for name in assignments)}, "
            "started_at = COALESCE(started_at, %s), last_seq = last_seq + %s "
            f"WHERE id = %s AND status NOT IN ({', '.join(['%s'] * len(finished))})"
        )
        params = [
            *assignments.values(), _db_datetime(finished_at), len(plan_rows) + 1, self.run_id,
            *finished,
        ]  # fmt: skip
        if self.fence is not None:  # an execution that was taken over does not end the run
            sql += " AND fence = %s"
            params.append(self.fence)
        with transaction.atomic():
            open_steps = lock_open_steps(run_id=self.run_id)
            row = _update_returning(sql, params, returning="last_seq, step_count", id=self.run_id)
            if row is None:
                return
            last_seq, step_count = row
            self.status = status
            closed = close_open_steps(
                run_id=self.run_id,
                open_steps=open_steps,
                why=run_end_reason(status, result.error),
                at=finished_at,
            )
            items = self._store_plans(plan_rows)
            self.totals.update(
                tokens_in=totals.tokens_in,
                tokens_out=totals.tokens_out,
                cost=totals.cost,
                model_calls=totals.model_calls,
                wall_time=totals.wall_time,
                step_count=step_count,
            )
            items.append(
                (
                    events.RUN_FINISHED,
                    _finished_data(
                        status=status,
                        answer=result.answer,
                        score=score,
                        error=error,
                        totals=dict(self.totals),
                        finished_at=finished_at,
                        closed_steps=closed,
                    ),
                )
            )
            self._publish(items, last_seq)

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
        status: str | None = None,
        fence: int | None = None,
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
            status=status,
            deliver=self._outbox.append,
            fence=fence,
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
        score, grading_error = None, ""
        if self.reference and result.status == "succeeded":
            # Grading code answers runs a sandbox process: keep it off the database thread.
            try:
                score = await sync_to_async(grade_answer, thread_sensitive=False)(
                    answer=result.answer, reference=self.reference, grader=self.grader
                )
            except GradingUnavailable as error:
                grading_error = f"Not graded: {error}"
        await self._call(self.recorder.run_finished, result, score, grading_error)


def finished_event_data(
    run: Run, closed_steps: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The payload of ``run.finished`` for a run as stored; ``closed_steps`` as returned by
    ``close_open_steps`` when the run was just ended."""
    return _finished_data(
        status=run.status,
        answer=run.answer,
        score=run.score,
        error=run.error,
        totals=events.totals_data(run),
        finished_at=run.finished_at,
        closed_steps=closed_steps or {},
    )


def _finished_data(
    *,
    status: str,
    answer: str,
    score: float | None,
    error: str,
    totals: dict[str, Any],
    finished_at: Any,
    closed_steps: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The ``run.finished`` payload: one shape however the run ended (engine, cancel, failure)."""
    return {
        "status": str(status),
        "answer": answer,
        "score": score,
        "error": error,
        "totals": totals,
        "finished_at": finished_at.isoformat() if finished_at else None,
        "closed_steps": closed_steps,
    }


def run_end_reason(status: str, error: str = "") -> str:
    """How a run ended, as the steps it closed tell it."""
    if status == Run.Status.CANCELLED:
        return "the run was cancelled"
    if status == Run.Status.FAILED:
        return f"the run failed: {error}" if error else "the run failed"
    return "the run ended before this step started"


def lock_open_steps(*, run_id: int) -> list[tuple[int, str]]:
    """(id, status) of the run's pending and running steps, row-locked where the database can.

    Whatever finishes a run calls this first, before it locks the run row: the recorder's
    callbacks lock a step row and then the run row, so taking them in the same order never
    deadlocks. A step whose result commits meanwhile is no longer open and keeps its result.
    """
    steps = Step.objects.filter(run_id=run_id, status__in=Step.OPEN).order_by("round", "index")
    if connection.features.has_select_for_update:
        steps = steps.select_for_update()
    return [(step_id, str(status)) for step_id, status in steps.values_list("id", "status")]


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


def record_run_failed(*, run_id: int, error: str, fence: int | None = None) -> None:
    """The run stopped on an error that is not a model's (a bug, a bad configuration).

    With ``fence``, only while the run's fence is still that one (an execution that was taken
    over leaves the run to the one that took it).
    """
    with transaction.atomic():
        open_steps = lock_open_steps(run_id=run_id)
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_finished or (fence is not None and run.fence != fence):
            return
        run.status = Run.Status.FAILED
        run.error = error
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "error", "finished_at"])
        closed = close_open_steps(
            run_id=run_id,
            open_steps=open_steps,
            why=run_end_reason(run.status, error),
            at=run.finished_at,
        )
        events.publish(run_id, events.RUN_FINISHED, finished_event_data(run, closed))
