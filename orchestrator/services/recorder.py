"""Storing a run as it executes: one short transaction per engine callback, or one for several
callbacks taken together (``RunRecorder.record``).

``RunRecorder`` is synchronous (the async adapter that the engine calls is
``services/recording.py``). It keeps what it wrote (step rows, stored plan rounds, totals, the
run's status) so that each callback costs two to four statements, in plain SQL on the hot path
(``orchestrator/sql.py``): storing is meant to cost a few milliseconds per step at most
(``python -m bench.stored_overhead``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from orchestrator import events, wire
from orchestrator.engine.types import PlanRecord, RunResult, StepRecord
from orchestrator.models import Plan, Run, Step
from orchestrator.records import (
    access_to_data,
    attempts_to_data,
    step_attempts_to_data,
    workflow_to_data,
)
from orchestrator.services.ending import close_open_steps, lock_open_steps, run_end_reason
from orchestrator.sql import (
    RUN_TABLE,
    NotStoredInOneStatement,
    advance_seq,
    advance_seq_storing,
    advance_seq_storing_together,
    allocate_ids,
    can_store_in_one_statement,
    db_datetime,
    hot_cursor,
    insert_rows,
    insert_statement,
    json_param,
    mark_stored,
    storing_held_statement,
    storing_statement,
)

logger = logging.getLogger(__name__)

TOTAL_FIELDS = wire.TOTAL_FIELDS
STEP_TABLE = Step._meta.db_table
STEP_RESULT_FIELDS = (
    "status", "messages", "response", "tokens_in", "tokens_out", "cost", "latency", "queued",
    "attempts", "error", "attempt_log", "finished_at",
)  # fmt: skip
_STEP_RESULT_SQL = (
    f"UPDATE {STEP_TABLE} SET {', '.join(f'{field} = %s' for field in STEP_RESULT_FIELDS)} "
    "WHERE id = %s AND status NOT IN (%s, %s)"
)
_STEP_STARTED_SQL = (
    f"UPDATE {STEP_TABLE} SET status = %s, messages = %s, started_at = %s, finished_at = NULL, "
    "error = '' WHERE id = %s AND status != %s"
)
_STEP_MESSAGES = Step._meta.get_field("messages")
_STEP_ATTEMPT_LOG = Step._meta.get_field("attempt_log")
_STEP_READS = Step._meta.get_field("reads")


def _run_assignments(add: dict[str, Any], move_to: str | None) -> tuple[list[str], list[Any]]:
    """The SET clauses of a write to the run row: usage added to its totals, and a move to
    ``move_to`` (its start time set once)."""
    assignments = [f"{field} = {field} + %s" for field in add]
    params: list[Any] = list(add.values())
    if move_to is not None:
        assignments += ["status = %s", "started_at = COALESCE(started_at, %s)"]
        params += [str(move_to), db_datetime(timezone.now())]
    return assignments, params


class RunClosed(Exception):
    """The run finished elsewhere while it executed (cancelled, or failed by another process):
    execution stops without writing more, so nothing follows the run's ``run.finished``."""


class RunCancelled(RunClosed):
    """The run was cancelled while it executed; execution stops without writing more."""


class RunTakenOver(Exception):
    """Another execution took the run over (its fence moved on); this one stops without writing
    more (see ``services/ownership.py``)."""


# What ``_store_in_one_statement`` returns for a statement stored later with others.
DEFERRED = -1


class _Held:
    """What callbacks stored together have done to the run's row and its events, kept here from
    the batch's start and written by ``RunRecorder._release_held`` once, only if the row is
    still as it was held. On SQLite, in one UPDATE and one INSERT at the end of the batch's
    transaction (nothing else can write the row meanwhile: SQLite lets one writer in at a time,
    from its first write to its commit). On PostgreSQL, with the batch's writes to step rows and
    its new rows, in one statement (``sql.storing_held_statement``)."""

    __slots__ = (
        "changed", "ended", "events", "first_seq", "last_seq", "moved_at", "new_rows", "steps",
        "totals", "written_steps",
    )  # fmt: skip

    def __init__(self, last_seq: int, totals: dict[str, Any]) -> None:
        self.first_seq = self.last_seq = last_seq  # as stored, and as it will be
        self.totals = [totals[field] for field in TOTAL_FIELDS]  # as stored
        self.changed = False
        self.events: list[dict[str, Any]] = []
        self.moved_at: Any = None  # when the first of them moved the run's status, if one did
        self.ended: dict[str, Any] = {}  # how the run ended, if one of them ended it
        # PostgreSQL: the UPDATEs of step rows (each to write one, by its round and index) and
        # the new rows, inserted as they are when written (a step created and started in one
        # batch is inserted started); the ids of the step rows written.
        self.steps: list[tuple[tuple[int, int], str, list[Any]]] = []
        self.written_steps: set[int] = set()
        self.new_rows: list[list[Any]] = []


class _NotDeferred(Exception):
    """A callback taken with others cannot be stored in one statement (it goes the general way,
    which must see what came before it stored): the statements deferred so far go first."""


class RunRecorder:
    """Stores the callbacks of one run's execution (sync; one thread at a time).

    ``steps`` are the run's stored Step rows (a resumed run has some), ``plan_rounds`` the rounds
    whose plan is stored, ``totals`` the run's stored totals, ``status`` its stored status and
    ``last_seq`` its last event's seq: the recorder keeps all five current. Every method
    publishes its events with ``deliver``, which receives them after the commit; those of
    callbacks stored in one statement while nobody watched the run (``Run.watched``, PostgreSQL)
    go to ``deliver_unwatched`` instead, if given: they need not reach the channel layer. With
    ``fence`` (the execution's fencing token), a callback is stored only while the run's fence
    is still that one; else it raises RunTakenOver. ``ids_ahead`` are plan and step ids taken for it
    (PostgreSQL), used before any other.

    Each callback is one transaction of two to four short statements, in plain SQL where the ORM
    would spend more time building a statement than the database spends running it: the step's
    row first (conditional, so a stored result is never overwritten), then one UPDATE of the run
    row that checks its status, adds to its totals and takes the seqs of the callback's events
    (the row lock it holds until the commit keeps seqs gapless and in commit order), then one
    INSERT of those events. Callbacks stored together (``record``) hold the run's row instead
    (``_Held``) and write it once.
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
        deliver_unwatched: Any = None,
        fence: int | None = None,
        last_seq: int | None = None,
        ids_ahead: tuple[Sequence[int], Sequence[int]] = ((), ()),
    ) -> None:
        self.run_id = run_id
        self.fence = fence
        # The run's last seq as this recorder last wrote or read it (None: not known yet).
        self.last_seq = last_seq
        self.worker_ids = list(worker_ids)
        self.steps: dict[tuple[int, int], Step] = {(s.round, s.index): s for s in steps}
        self.plan_rounds = set(plan_rounds)
        # Plan and step ids taken ahead (PostgreSQL; ``ids_ahead``, taken when the execution
        # loaded the run): a plan stored with them, or with the run's end, needs no statement
        # of its own to take ids first.
        self.plan_ids: list[int] = sorted(ids_ahead[0])
        self.step_ids: list[int] = sorted(ids_ahead[1])
        self.totals = dict.fromkeys(TOTAL_FIELDS, 0) | dict(totals or {})
        self.status = status
        self.deliver = deliver
        self.deliver_unwatched = deliver_unwatched or deliver
        # While callbacks are stored together (PostgreSQL, ``record``): their statements, sent
        # at once; and how to undo what they changed here if the database refuses one.
        self._deferred: list[tuple[str, list[Any], Callable[[int, bool], None]]] | None = None
        self._undo: list[Callable[[], None]] = []
        # While callbacks are stored in one transaction (SQLite, ``record``): all or none; and,
        # from its first write to the run's row, what the callbacks do to it and its events.
        self._together = False
        self._held: _Held | None = None

    # Helpers ------------------------------------------------------------------------------------

    def _publish(self, items: list[tuple[str, dict[str, Any]]], last_seq: int) -> None:
        if self._held is not None:
            self._held.events += events.numbered(self.run_id, items, last_seq=last_seq)
            return
        events.store_events(self.run_id, items, last_seq=last_seq, deliver=self.deliver)

    def _release_held(self, *, durable: bool = True) -> None:
        """Write what the callbacks stored together did to the run's row (its seqs, totals and
        status, as this recorder has them) and insert their events (PostgreSQL: with their other
        writes, in one statement, whose commit waits for the disk if ``durable``); from here on,
        each statement goes to the database again."""
        held, self._held = self._held, None
        if held is None:
            return
        assignments = ["last_seq = %s", *(f"{field} = %s" for field in TOTAL_FIELDS)]
        params: list[Any] = [held.last_seq, *(self.totals[f] for f in TOTAL_FIELDS)]
        if held.moved_at is not None or held.ended:
            assignments += ["status = %s", "started_at = COALESCE(started_at, %s)"]
            params += [str(self.status), held.moved_at or held.ended["finished_at"]]
        assignments += [f"{field} = %s" for field in held.ended]
        params += held.ended.values()
        # Only while the row is as this recorder last knew it, the execution still holds it
        # and it has not finished: else the callbacks are refused (and stored one by one, the
        # way that tells what happened).
        same = "IS NOT DISTINCT FROM" if can_store_in_one_statement() else "IS"
        conditions, condition_params = self._conditions(True)
        conditions = ["last_seq = %s", *conditions, *(f"{f} {same} %s" for f in TOTAL_FIELDS)]
        condition_params = [held.first_seq, *condition_params, *held.totals]
        if held.ended:
            # The run ends only if no step of it is open: none as this recorder knows them (else
            # its end went the general way), and none in the database but those this batch
            # writes (one statement does not see its own writes; they close them).
            open_steps = ", ".join(["%s"] * len(Step.OPEN))
            written = sorted(held.written_steps) if can_store_in_one_statement() else []
            not_written = f" AND id NOT IN ({', '.join(['%s'] * len(written))})" if written else ""
            conditions.append(
                f"NOT EXISTS (SELECT 1 FROM {STEP_TABLE} WHERE run_id = %s "
                f"AND status IN ({open_steps}){not_written})"
            )
            condition_params += [self.run_id, *(str(s) for s in Step.OPEN), *written]
        if can_store_in_one_statement():
            if held.changed or held.steps or held.new_rows or held.events:
                statement = storing_held_statement(
                    self.run_id,
                    # Step rows locked in the order every writer locks them (round, index).
                    steps=[
                        (sql, params) for _, sql, params in sorted(held.steps, key=itemgetter(0))
                    ],
                    inserts=[insert_statement(rows) for rows in held.new_rows],
                    assignments=assignments,
                    assignment_params=params,
                    conditions=conditions,
                    condition_params=condition_params,
                    events=held.events,
                    created_at=db_datetime(timezone.now()),
                )
                ((_, _, watched),) = advance_seq_storing_together([statement], durable=durable)
                self.last_seq = held.last_seq
                # Unless a subscriber has marked the run watched, its events go to this
                # process's local listeners only (``deliver_unwatched``).
                events.deliver_on_commit(
                    held.events, self.deliver if watched else self.deliver_unwatched
                )
            return
        if held.changed:
            with hot_cursor() as cursor:
                cursor.execute(
                    f"UPDATE {RUN_TABLE} SET {', '.join(assignments)} "
                    f"WHERE {' AND '.join(('id = %s', *conditions))}",
                    [*params, self.run_id, *condition_params],
                )
                if cursor.rowcount != 1:
                    raise NotStoredInOneStatement(f"run {self.run_id} is not as it was held")
            self.last_seq = held.last_seq
        events.insert_events(held.events, deliver=self.deliver)

    def _run_status(self) -> str:
        """The run's stored status (row-locked where the database can); raises RunTakenOver if
        another execution took it over, RunClosed if it has finished (RunCancelled if it was
        cancelled)."""
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        with hot_cursor() as cursor:
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
        if self._held is not None:
            return self._advance_held(
                event_count + moving, add, move_to if moving else None, check_cancelled
            ), moving
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
        self.totals.update(zip(TOTAL_FIELDS, totals, strict=True))
        self.last_seq = last_seq
        if moving:
            self.status = move_to
        return last_seq, moving

    def _advance_held(
        self, event_count: int, add: dict[str, float], move_to: str | None, conditional: bool
    ) -> int:
        """``_advance_run`` on the row held (``_Held``): what its UPDATE would do, done here."""
        held = self._held
        assert held is not None
        if conditional and self.status in Run.FINISHED:
            raise RunClosed(f"run {self.run_id} has finished ({self.status})")
        for field, amount in add.items():
            self.totals[field] += amount
        if move_to is not None:
            self.status = move_to
            if held.moved_at is None:
                held.moved_at = db_datetime(timezone.now())
        held.last_seq += event_count
        held.changed = True
        return held.last_seq

    def _update_run(
        self, event_count: int, add: dict[str, float], move_to: str | None, conditional: bool
    ) -> tuple | None:
        assignments, assignment_params = _run_assignments(add, move_to)
        conditions, condition_params = self._conditions(conditional)
        return advance_seq(
            self.run_id,
            event_count,
            assignments=assignments,
            assignment_params=assignment_params,
            conditions=conditions,
            condition_params=condition_params,
            returning=TOTAL_FIELDS,
        )

    def _conditions(self, unfinished: bool) -> tuple[list[str], list[Any]]:
        """The WHERE conditions of a write to the run row: this execution still holds it (its
        fence), and with ``unfinished`` the run has not finished (its run.finished stays its
        last event)."""
        conditions: list[str] = []
        params: list[Any] = []
        if self.fence is not None:
            conditions.append("fence = %s")
            params.append(self.fence)
        if unfinished:
            conditions.append(f"status NOT IN ({', '.join(['%s'] * len(Run.FINISHED))})")
            params += [str(status) for status in Run.FINISHED]
        return conditions, params

    def _store_in_one_statement(
        self,
        items: list[tuple[str, dict[str, Any]]],
        *,
        step_sql: str = "",
        step_params: Sequence[Any] = (),
        add: dict[str, Any] | None = None,
        move_to: str | None = None,
        quiet_without_step: bool = False,
        step: Step | None = None,
        new_rows: Sequence[list[Any]] = (),
        sets: Sequence[str] = (),
        set_params: Sequence[Any] = (),
        condition: str = "",
        condition_params: Sequence[Any] = (),
    ) -> int | None:
        """Store a callback in one statement where the database can (``sql.advance_seq_storing``):
        the step's row (``step``, written by ``step_sql``), ``new_rows`` (lists of new rows of one
        model, their ids set), the run's row (only while its totals are what
        this recorder last read, so the totals in ``items`` are the row's, and ``condition``
        holds; with ``sets`` too), the events. Returns the run's new last_seq (None: no step row
        matched, nothing written; ``DEFERRED`` while callbacks are taken together: it is sent with
        them by ``record``). Raises NotStoredInOneStatement when the caller must store the
        callback the general way, which has nothing written to undo."""
        add = add or {}
        if self._held is not None:
            # Kept, and written with the other callbacks stored together (``_release_held``;
            # the run's end is held by ``_finish_held``, never here).
            assert not sets and not condition
            if step_sql:
                new_ids = {
                    row.pk for rows in self._held.new_rows for row in rows if isinstance(row, Step)
                }
                inserted = step is not None and step.pk in new_ids
                if (
                    step is None
                    or step.pk in self._held.written_steps
                    or (inserted and step.status not in Step.OPEN)
                ):
                    # A statement writes a row once, and a row it inserts is not there for the
                    # write's conditions (a stored result is kept): this one goes after those
                    # before it, the way that checks them.
                    raise _NotDeferred
                self._held.written_steps.add(step.pk)
                if not inserted:  # else inserted as this write leaves it
                    self._held.steps.append(((step.round, step.index), step_sql, list(step_params)))
            self._held.new_rows += [rows for rows in new_rows if rows]
            last_seq = self._advance_held(len(items), add, move_to, True)
            self._publish(items, last_seq)  # checks the event types
            return last_seq
        assignments, assignment_params = _run_assignments(add, move_to)
        assignments += sets
        assignment_params += set_params
        conditions, run_condition_params = self._conditions(True)
        if condition:
            conditions.append(condition)
            run_condition_params += condition_params
        for field in TOTAL_FIELDS:
            conditions.append(f"{field} IS NOT DISTINCT FROM %s")
            run_condition_params.append(self.totals[field])
        for type, _ in items:
            if type not in wire.EVENT_SHAPES:
                raise ValueError(f"unknown event type {type!r}")
        statement = {
            "step_sql": step_sql,
            "step_params": step_params,
            "assignments": assignments,
            "assignment_params": assignment_params,
            "conditions": conditions,
            "condition_params": run_condition_params,
            "events": [{"type": type, "run": self.run_id, **data} for type, data in items],
            "created_at": db_datetime(timezone.now()),
            "inserts": [insert_statement(rows) for rows in new_rows if rows],
        }

        def stored(last_seq: int, watched: bool) -> None:
            self.last_seq = last_seq
            first = last_seq - len(items) + 1
            events.deliver_on_commit(
                [
                    {"type": type, "run": self.run_id, "seq": first + offset, **data}
                    for offset, (type, data) in enumerate(items)
                ],
                self.deliver if watched else self.deliver_unwatched,
            )

        if self._deferred is not None:
            # Stored with the callbacks taken together (``record``), as if it is: a step that
            # has its result refuses them all here, as would anything else unexpected.
            sql, params = storing_statement(self.run_id, **statement)
            self._deferred.append((sql, params, stored))
            last_seq, watched = DEFERRED, True
        else:
            returned = advance_seq_storing(
                storing_statement(self.run_id, **statement, quiet_without_step=quiet_without_step)
            )
            if returned is None:
                return None
            last_seq, watched = returned
        for field, amount in add.items():
            self.totals[field] += amount
        if move_to is not None:
            self.status = move_to
        if last_seq != DEFERRED:
            stored(last_seq, watched)
        return last_seq

    def _totals_after(self, add: dict[str, Any]) -> dict[str, Any]:
        return {
            field: value + add[field] if field in add else value
            for field, value in self.totals.items()
        }

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
                form=plan.form,
                constrained=plan.constrained,
                fallback=plan.fallback,
                reused_from_id=plan.reused_from,
            )
        return list(rows.values())

    def _store_plans(self, rows: list[Plan]) -> list:
        """Insert new plan rows (PostgreSQL, the run's row held: with the other callbacks stored
        together, their ids taken ahead); returns their ``plan.created`` events."""
        if not rows:
            return []
        if self._held is not None and can_store_in_one_statement():
            self._take_plan_ids(rows)
            self._held.new_rows.append(rows)
            mark_stored(rows)
        else:
            insert_rows(rows)
        self.plan_rounds.update(row.round for row in rows)
        return [(wire.PLAN_CREATED, {"plan": wire.plan_data(row)}) for row in rows]

    def _plan_usage(self, plan: PlanRecord) -> dict[str, float]:
        attempts = [] if plan.reused_from is not None else plan.attempts
        return {
            "tokens_in": sum(a.tokens_in for a in attempts),
            "tokens_out": sum(a.tokens_out for a in attempts),
            "cost": sum(a.cost for a in attempts),
            "model_calls": len(attempts),
        }

    # Callbacks ----------------------------------------------------------------------------------

    def record(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> None:
        """Store callbacks (``(method name, arguments)``) in order, stopping at the first that
        raises (it raises).

        Several are stored together, all or none, each built as if those before it were stored
        (this recorder's state moves on with each): on SQLite in one transaction (the commit,
        the disk's wait, paid once; no savepoint per callback; when this recorder knows the run's
        last seq and status, the run's row written once, with all their events in one INSERT:
        ``_Held``), on PostgreSQL in one round trip and one transaction where each can be one
        statement (``sql.advance_seq_storing_together``; a callback that cannot goes alone,
        after those before it), all of them one statement when this recorder knows the run's
        last seq and status (``_Held`` too; a second write to one step row goes alone, after
        those before it). If one is refused (the run
        finished or was taken over, a step has its result) or fails, none is kept, this
        recorder's state goes back, and the callbacks are stored one by one, the way that tells
        what happened: those before the one that raises are then kept, as when each came alone.
        (A commit that fails keeps nothing and raises, as a single callback's would.)
        """
        if len(calls) == 1:
            name, args = calls[0]
            getattr(self, name)(*args)
        elif can_store_in_one_statement():
            self._record_together(calls)
        else:
            self._record_in_one_transaction(calls)

    def _record_in_one_transaction(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> None:
        saved = self._state_saved()
        self._together = True
        reached_the_commit = False
        try:
            with transaction.atomic():
                if self.last_seq is not None and self.status is not None:
                    # The row as this recorder knows it (an execution always does), held: written
                    # once, at the end, only if it is still so (``_release_held``). Else each
                    # callback writes it, and the next batch knows it.
                    self._held = _Held(self.last_seq, self.totals)
                for name, args in calls:
                    getattr(self, name)(*args)
                self._release_held()
                reached_the_commit = True
        except Exception as error:
            self._together, self._held = False, None
            if reached_the_commit:
                # The commit failed (nothing kept; the run stops with the error, as a single
                # callback's would), or what runs after it did: then all is stored, and storing
                # the callbacks again would store them twice.
                raise
            _unless_refused(error, self.run_id)
            self._state_restored(saved)
            for name, args in calls:  # one by one: raises again where it holds
                getattr(self, name)(*args)
        finally:
            self._together, self._held, self._undo = False, None, []

    def _state_saved(self) -> tuple[Any, ...]:
        """What ``_state_restored`` puts back (with ``_undo``) if callbacks stored together are
        refused: the totals, status, plan rounds, plan ids and last seq this recorder keeps."""
        self._undo = []
        return (
            dict(self.totals),
            self.status,
            set(self.plan_rounds),
            list(self.plan_ids),
            list(self.step_ids),
            self.last_seq,
        )

    def _state_restored(self, saved: tuple[Any, ...]) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        (
            self.totals,
            self.status,
            self.plan_rounds,
            self.plan_ids,
            self.step_ids,
            self.last_seq,
        ) = saved

    def _record_together(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> None:
        position = 0
        while position < len(calls):
            saved = self._state_saved()
            self._deferred = []
            if self.last_seq is not None and self.status is not None:
                # The row as this recorder knows it (an execution always does), held: written
                # once, with the callbacks' other writes, in one statement (``_release_held``).
                self._held = _Held(self.last_seq, self.totals)
            deferred_calls, alone, sending = 0, False, False
            try:
                for name, args in calls[position:]:
                    try:
                        getattr(self, name)(*args)
                    except _NotDeferred:
                        alone = True
                        break
                    deferred_calls += 1
                statements, self._deferred = self._deferred, None
                sending = True
                # The run's end waits for the disk (and so keeps what came before it); its
                # progress does too unless CONDUCTOR_DB_ASYNC_PROGRESS (webui/settings.py).
                durable = not settings.CONDUCTOR_DB_ASYNC_PROGRESS or any(
                    name == "run_finished"
                    for name, _ in calls[position : position + deferred_calls]
                )
                self._release_held(durable=durable)
                returned = (
                    advance_seq_storing_together(
                        [(sql, params) for sql, params, _ in statements], durable=durable
                    )
                    if statements
                    else []
                )
            except Exception as error:  # noqa: BLE001 (the callbacks one by one raise it again)
                # Refused, or failed while taking or sending them: none of them is stored.
                # Back to the state before them; then one by one (the one that failed while
                # being taken included), the way that tells what happened.
                _unless_refused(error, self.run_id)
                self._deferred, self._held = None, None
                self._state_restored(saved)
                again = deferred_calls if sending else deferred_calls + 1
                for name, args in calls[position : position + again]:
                    getattr(self, name)(*args)
                position += again
                continue
            finally:
                self._deferred, self._held, self._undo = None, None, []
            for (_, _, stored), (last_seq, _, watched) in zip(statements, returned, strict=True):
                stored(last_seq, watched)
            position += deferred_calls
            if alone:  # the one that could not be one statement, the general way
                name, args = calls[position]
                getattr(self, name)(*args)
                position += 1

    def _general_transaction(self) -> Any:
        """The transaction of a callback stored the general way: its own, or the one of the
        callbacks stored together on SQLite (nothing more: if one raises, they are all undone
        and stored again one by one). While statements are deferred (PostgreSQL) it raises
        _NotDeferred instead: the callback goes alone, after those."""
        if self._deferred is not None:
            raise _NotDeferred
        return nullcontext() if self._together else transaction.atomic()

    @property
    def _undoable(self) -> bool:
        """Whether what this recorder changes now is undone if the callbacks stored together
        with this one are refused."""
        return self._deferred is not None or self._together

    def _steps_added(self, rows: list[Step]) -> None:
        """Keep new step rows (forgotten again if the callbacks stored together are refused)."""
        self.steps.update({(row.round, row.index): row for row in rows})
        if self._undoable:
            added = [(row.round, row.index) for row in rows]
            self._undo.append(lambda: [self.steps.pop(key, None) for key in added])

    def _set_row(self, row: Step, values: dict[str, Any]) -> None:
        """Set ``values`` on a step's row kept here (undone if the callbacks stored together
        with this one are refused)."""
        if self._undoable:
            before = {field: getattr(row, field) for field in values}
            self._undo.append(lambda: _set(row, before))
        _set(row, values)

    def planning(self, round: int) -> None:
        """The strategy is about to write the workflow of ``round``."""
        if can_store_in_one_statement() and self.status is not None:
            planning = str(Run.Status.PLANNING)
            moving = self.status != planning
            try:
                self._store_in_one_statement(
                    [(wire.RUN_STATUS, {"status": planning})] if moving else [],
                    move_to=planning if moving else None,
                )
                return
            except NotStoredInOneStatement:
                pass  # finished or taken over: the general way tells which
        with self._general_transaction():
            last_seq, moved = self._advance_run(event_count=0, move_to=Run.Status.PLANNING)
            if moved:
                self._publish([(wire.RUN_STATUS, {"status": str(Run.Status.PLANNING)})], last_seq)

    def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        """Store the plan of a round and its steps, with reads resolved to step ids: pending, or
        succeeded when a replay reuses another run's result (``reused_from``; its usage is not
        added to this run's totals)."""
        plan_rows = self._new_plan_rows([plan])
        now = timezone.now()
        new_steps = [
            self._new_step_row(record, now)
            for record in steps
            if (record.round, record.index) not in self.steps
        ]
        usage = self._plan_usage(plan) if plan_rows else {}
        if new_steps:
            usage["step_count"] = len(new_steps)
        if can_store_in_one_statement() and (plan_rows or new_steps):
            try:
                self._store_plan_in_one_statement(steps, plan_rows, new_steps, usage)
                return
            except NotStoredInOneStatement:
                pass  # finished or taken over: the general way tells which
        with self._general_transaction():
            last_seq, _ = self._advance_run(event_count=len(plan_rows) + len(new_steps), add=usage)
            items = self._store_plans(plan_rows)
            if new_steps:
                for row in new_steps:
                    row.plan = plan_rows[0] if plan_rows else None
                insert_rows(new_steps)
                self._steps_added(new_steps)
                self._store_reads(steps, {s.index: s for s in new_steps})
            items += [(wire.STEP_CREATED, {"step": wire.step_data(s)}) for s in new_steps]
            if items:
                self._publish(items, last_seq)

    def _store_plan_in_one_statement(
        self,
        records: Sequence[StepRecord],
        plan_rows: list[Plan],
        new_steps: list[Step],
        usage: dict[str, Any],
    ) -> None:
        """``plan_created`` in one statement (PostgreSQL): the rows with what the steps read, the
        run's totals and the events (``_store_in_one_statement``), their ids taken ahead (by the
        execution's claim, or here first, in a statement of their own)."""
        # Those not taken ahead, and one plan id more than this round needs, for the next plan.
        plans_missing = len(plan_rows) + 1 - len(self.plan_ids)
        steps_missing = len(new_steps) - len(self.step_ids)
        if plans_missing > 0 or steps_missing > 0:
            counts = [(Plan, plans_missing), (Step, steps_missing)]
            taken = iter(allocate_ids([(model, n) for model, n in counts if n > 0]))
            if plans_missing > 0:
                self.plan_ids = sorted(self.plan_ids + next(taken))
            if steps_missing > 0:
                self.step_ids = sorted(self.step_ids + next(taken))
        for row in plan_rows:
            row.pk = self.plan_ids.pop(0)
        for row in new_steps:
            row.pk = self.step_ids.pop(0)
            row.plan = plan_rows[0] if plan_rows else None
        known = {key: row.pk for key, row in self.steps.items()}
        known.update({(row.round, row.index): row.pk for row in new_steps})
        new_by_index = {row.index: row for row in new_steps}
        for record in records:
            row = new_by_index.get(record.index)
            if row is not None and record.reads:
                row.reads = [known[(record.round, read)] for read in record.reads]
        items: list[tuple[str, dict[str, Any]]] = [
            (wire.PLAN_CREATED, {"plan": wire.plan_data(row)}) for row in plan_rows
        ]
        items += [(wire.STEP_CREATED, {"step": wire.step_data(row)}) for row in new_steps]
        self._store_in_one_statement(items, add=usage, new_rows=[plan_rows, new_steps])
        mark_stored([*plan_rows, *new_steps])
        self.plan_rounds.update(row.round for row in plan_rows)
        self._steps_added(new_steps)

    def _new_step_row(self, record: StepRecord, now: Any) -> Step:
        row = Step(
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
        if record.status == "succeeded" and record.reused_from is not None:
            row.status = Step.Status.SUCCEEDED
            row.reused_from_id = record.reused_from
            row.messages = list(record.messages)
            row.response = record.response
            row.tokens_in = record.tokens_in
            row.tokens_out = record.tokens_out
            row.cost = record.cost
            row.latency = record.latency
            row.attempts = record.attempts
            # Not called in this run: no attempt_log, or the timeline would draw its source's
            # attempts and waits as if they had happened now.
            row.started_at = row.finished_at = now
        return row

    def _store_reads(self, records: Sequence[StepRecord], new_by_index: dict[int, Step]) -> None:
        """Resolve what each new step reads to step ids (known once the rows are inserted)."""
        updates = []
        for record in records:
            row = new_by_index.get(record.index)
            if row is not None and record.reads:
                row.reads = [self.steps[(record.round, read)].pk for read in record.reads]
                updates.append([json_param(_STEP_READS, row.reads), row.pk])
        if updates:
            with hot_cursor() as cursor:
                cursor.executemany(f"UPDATE {STEP_TABLE} SET reads = %s WHERE id = %s", updates)

    def step_started(self, record: StepRecord) -> None:
        """A step was sent to its worker: store exactly what it was sent."""
        row = self._step_row(record)
        messages = list(record.messages)
        started_at = timezone.now()
        started = {
            "status": Step.Status.RUNNING,
            "messages": messages,
            "started_at": started_at,
            "finished_at": None,
            "error": "",
        }
        params = [
            str(Step.Status.RUNNING),
            json_param(_STEP_MESSAGES, messages),
            db_datetime(started_at),
            row.pk,
            str(Step.Status.SUCCEEDED),
        ]
        if (
            can_store_in_one_statement()
            and self.status is not None
            and row.status != Step.Status.SUCCEEDED
        ):
            running = str(Run.Status.RUNNING)
            moving = self.status != running
            shown = _with(row, started)
            try:
                self._store_in_one_statement(
                    [
                        *([(wire.RUN_STATUS, {"status": running})] if moving else []),
                        (wire.STEP_STARTED, {"step": wire.step_data(shown)}),
                    ],
                    step_sql=f"{_STEP_STARTED_SQL} RETURNING id",
                    step_params=params,
                    step=row,
                    move_to=running if moving else None,
                )
                self._set_row(row, started)
                return
            except NotStoredInOneStatement:
                pass  # the general way below tells what happened
        with self._general_transaction():
            written = False
            if row.status != Step.Status.SUCCEEDED:  # a stored result is kept
                with hot_cursor() as cursor:
                    cursor.execute(_STEP_STARTED_SQL, params)
                    written = cursor.rowcount == 1
            last_seq, moved = self._advance_run(
                event_count=int(written), move_to=Run.Status.RUNNING
            )
            items: list = []
            if moved:
                items.append((wire.RUN_STATUS, {"status": str(Run.Status.RUNNING)}))
            if written:
                self._set_row(row, started)
                items.append((wire.STEP_STARTED, {"step": wire.step_data(row)}))
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
            "queued": record.queued,
            "attempts": record.attempts,
            "error": record.error,
            "attempt_log": step_attempts_to_data(record.attempt_log),
            "finished_at": timezone.now(),
        }
        row = self._step_row(record)
        params = [
            str(values["status"]),
            json_param(_STEP_MESSAGES, values["messages"]),
            *(values[field] for field in STEP_RESULT_FIELDS[2:-2]),
            json_param(_STEP_ATTEMPT_LOG, values["attempt_log"]),
            db_datetime(values["finished_at"]),
            row.pk,
            str(Step.Status.SUCCEEDED),
            str(Step.Status.FAILED),
        ]
        add = {
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "cost": record.cost,
            "model_calls": record.attempts,
        }
        event_type = wire.STEP_FINISHED if succeeded else wire.STEP_FAILED
        if can_store_in_one_statement():
            shown = _with(row, values)
            try:
                stored = self._store_in_one_statement(
                    [
                        (
                            event_type,
                            {"step": wire.step_data(shown), "totals": self._totals_after(add)},
                        )
                    ],
                    step_sql=f"{_STEP_RESULT_SQL} RETURNING id",
                    step_params=params,
                    step=row,
                    add=add,
                    quiet_without_step=True,  # the step has its result: it is kept
                )
                if stored is not None:
                    self._set_row(row, values)
                return
            except NotStoredInOneStatement:
                pass  # the run finished or was taken over: the general way below raises
        with self._general_transaction():
            with hot_cursor() as cursor:
                cursor.execute(_STEP_RESULT_SQL, params)
                if cursor.rowcount != 1:
                    return
            # Checks the run is still going: a result that arrives after the run finished (a
            # cancel while the step ran) is rolled back, as the step ended cancelled and
            # run.finished must stay the run's last event.
            last_seq, _ = self._advance_run(event_count=1, add=add)
            self._set_row(row, values)
            data = {"step": wire.step_data(row), "totals": dict(self.totals)}
            self._publish([(event_type, data)], last_seq)

    def run_finished(
        self, result: RunResult, score: float | None, grading_error: str = "", grader: str = ""
    ) -> None:
        """Store how the run ended: plans never announced (accepting or unusable ones), the
        answer, score, error (or why the answer was not graded) and the engine's final totals;
        steps it never started end skipped. A run already finished is kept."""
        error = result.error or grading_error
        plan_rows = self._new_plan_rows(result.plans)  # their calls are in the totals below
        totals = result.totals
        status = Run.Status.SUCCEEDED if result.status == "succeeded" else Run.Status.FAILED
        finished_at = timezone.now()
        ended_totals = {
            "tokens_in": totals.tokens_in,
            "tokens_out": totals.tokens_out,
            "cost": totals.cost,
            "model_calls": totals.model_calls,
            "wall_time": totals.wall_time,
        }
        assignments = {
            "status": str(status),
            "answer": result.answer,
            "error": error,
            "score": score,
            **ended_totals,
            "finished_at": db_datetime(finished_at),
        }

        def finished(run_totals: dict[str, Any], closed: dict[str, Any]) -> dict[str, Any]:
            """The data of the run's ``run.finished`` event."""
            return wire.finished_data(
                status=status,
                answer=result.answer,
                score=score,
                error=error,
                totals=dict(run_totals),
                finished_at=finished_at,
                closed_steps=closed,
                grader=grader,
            )

        conditions, condition_params = self._conditions(True)
        assignment_sql = [f"{name} = %s" for name in assignments]
        assignment_sql.append("started_at = COALESCE(started_at, %s)")
        assignment_params = [*assignments.values(), db_datetime(finished_at)]
        none_open = not any(row.status in Step.OPEN for row in self.steps.values())
        if self._held is not None and none_open:
            ended = {
                name: assignments[name] for name in ("answer", "error", "score", "finished_at")
            }
            self._finish_held(status, plan_rows, ended_totals, ended, finished)
            return
        if can_store_in_one_statement() and none_open:
            new_totals = self.totals | ended_totals
            try:
                self._store_finish_in_one_statement(
                    plan_rows, finished(new_totals, {}), assignment_sql, assignment_params
                )
                self.status = status
                self.totals = new_totals
                return
            except NotStoredInOneStatement:
                pass  # finished elsewhere, taken over, or a step is open: the general way
        with self._general_transaction():
            self._release_held()  # the statements below take the run's row as stored
            open_steps = lock_open_steps(run_id=self.run_id)
            row = advance_seq(
                self.run_id,
                len(plan_rows) + 1,
                assignments=assignment_sql,
                assignment_params=assignment_params,
                conditions=conditions,
                condition_params=condition_params,
                returning=("step_count",),
            )
            if row is None:
                return
            last_seq, step_count = row
            self.last_seq = last_seq
            self.status = status
            closed = close_open_steps(
                run_id=self.run_id,
                open_steps=open_steps,
                why=run_end_reason(status, result.error),
                at=finished_at,
            )
            items = self._store_plans(plan_rows)
            self.totals.update(ended_totals, step_count=step_count)
            items.append((wire.RUN_FINISHED, finished(self.totals, closed)))
            self._publish(items, last_seq)

    def _finish_held(
        self,
        status: str,
        plan_rows: list[Plan],
        ended_totals: dict[str, Any],
        ended: dict[str, Any],
        finished: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
    ) -> None:
        """``run_finished`` on the row held (``_Held``), when no step of the run is open as this
        recorder knows them: its end (``ended``: the row's answer, error, score and finish time)
        is written with the batch's other changes to the row (the write checks the run is still
        unfinished and as held)."""
        last_seq, _ = self._advance_run(event_count=len(plan_rows) + 1)  # raises if finished
        items = self._store_plans(plan_rows)
        assert self._held is not None
        self.status = status
        self.totals.update(ended_totals)
        self._held.ended = ended
        items.append((wire.RUN_FINISHED, finished(self.totals, {})))
        self._publish(items, last_seq)

    def _store_finish_in_one_statement(
        self,
        plan_rows: list[Plan],
        finished: dict[str, Any],
        sets: list[str],
        set_params: list[Any],
    ) -> None:
        """``run_finished`` in one statement (two with plans to store: their ids first), when no
        step of the run is open (the statement checks it: else it writes nothing and raises
        NotStoredInOneStatement); ``finished`` is the ``run.finished`` event's data, whose
        step count the statement checks is the row's."""
        self._take_plan_ids(plan_rows)
        items: list[tuple[str, dict[str, Any]]] = [
            (wire.PLAN_CREATED, {"plan": wire.plan_data(row)}) for row in plan_rows
        ]
        items.append((wire.RUN_FINISHED, finished))
        self._store_in_one_statement(
            items,
            new_rows=[plan_rows],
            sets=sets,
            set_params=set_params,
            condition=(
                f"NOT EXISTS (SELECT 1 FROM {STEP_TABLE} WHERE run_id = %s"
                f" AND status IN ({', '.join(['%s'] * len(Step.OPEN))}))"
            ),
            condition_params=[self.run_id, *(str(status) for status in Step.OPEN)],
        )
        mark_stored(plan_rows)
        self.plan_rounds.update(row.round for row in plan_rows)

    def _take_plan_ids(self, rows: list[Plan]) -> None:
        """Give new plan rows the ids taken ahead (PostgreSQL), taking those missing first."""
        missing = len(rows) - len(self.plan_ids)
        if missing > 0:
            self.plan_ids += allocate_ids([(Plan, missing)])[0]
        for row in rows:
            row.pk = self.plan_ids.pop(0)

    def _worker_id(self, index: int) -> int | None:
        return self.worker_ids[index] if 0 <= index < len(self.worker_ids) else None


def _unless_refused(error: Exception, run_id: int) -> None:
    """Log an error of callbacks stored together that storing them one by one may not raise
    again: not a refusal (the run finished or was taken over, a row not as expected), nor the
    database's, nor a row that is gone, which that way tells."""
    if not isinstance(
        error,
        NotStoredInOneStatement | RunClosed | RunTakenOver | DatabaseError | ObjectDoesNotExist,
    ):
        logger.warning(
            "run %s: callbacks stored together failed; storing them one by one",
            run_id,
            exc_info=error,
        )


def _with(row: Step, values: dict[str, Any]) -> Step:
    """A copy of a step's row with ``values`` set (what its event shows once they are stored):
    its fields only (``copy.copy`` of a model instance also pickles its state, several times
    the cost), to be read, not saved."""
    shown = Step.__new__(Step)
    shown.__dict__.update(row.__dict__)
    _set(shown, values)
    return shown


def _set(row: Step, values: dict[str, Any]) -> None:
    for field, value in values.items():
        setattr(row, field, value)
