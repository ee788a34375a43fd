"""The live event schema, and publishing.

Every event is a JSON object ``{"type": ..., "run": <run id>, "seq": <n>, ...}`` with ``seq``
increasing by one per run. Events are stored (``RunEvent``) so a reconnecting client can be sent
exactly what it missed, and sent to the run's channel group only after the transaction commits.
Only services publish. The consumer and the page (static/js/run/live.js) follow this schema:

``run.status``     ``status``: the run's new status (queued, planning, running, ...).
``plan.created``   ``plan``: PLAN (the conductor's output for a round).
``step.created``   ``step``: STEP, status pending.
``step.started``   ``step``: STEP, status running.
``step.finished``  ``step``: STEP, status succeeded; ``totals``: TOTALS of the run so far.
``step.failed``    ``step``: STEP, status failed (``error`` says why); ``totals``: TOTALS.
``run.finished``   ``status``, ``answer``, ``score``, ``error``, ``totals``: TOTALS,
                   ``finished_at``, ``closed_steps``: CLOSED. Always the run's last event.

STEP, PLAN and TOTALS are the dicts built by ``step_data``, ``plan_data`` and ``totals_data``.
CLOSED says which steps the run's end closed: ``{"cancelled" | "skipped": {"ids": [step ids],
"error": why}}`` (a step still running ended cancelled, one never started skipped; their
``finished_at`` is the run's). Nothing is published for a run after its ``run.finished``.
On connect the consumer first sends ``{"type": "snapshot", "run": id, "seq": last_seq,
"state": snapshot_data(run)}``; a client that reconnects with ``?after=<seq>`` is sent the stored
events after that seq instead, then live events. Clients ignore events whose seq they have seen.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from orchestrator.models import Plan, Run, RunEvent, Step
from orchestrator.sql import can_return

logger = logging.getLogger(__name__)

RUN_STATUS: Final = "run.status"
PLAN_CREATED: Final = "plan.created"
STEP_CREATED: Final = "step.created"
STEP_STARTED: Final = "step.started"
STEP_FINISHED: Final = "step.finished"
STEP_FAILED: Final = "step.failed"
RUN_FINISHED: Final = "run.finished"
SNAPSHOT: Final = "snapshot"

EVENT_TYPES: Final = (
    RUN_STATUS, PLAN_CREATED, STEP_CREATED, STEP_STARTED, STEP_FINISHED, STEP_FAILED, RUN_FINISHED,
)  # fmt: skip

# The channel-layer message type; Channels routes it to the consumer's ``run_event`` handler.
LAYER_MESSAGE_TYPE: Final = "run.event"


def status_constants() -> dict[str, list[str]]:
    """The statuses pages draw, from the models: the run page reads them from its data block
    instead of repeating them."""
    return {
        "run": [str(status) for status in Run.Status],
        "run_finished": [str(status) for status in Run.FINISHED],
        "step": [str(status) for status in Step.Status],
        "step_finished": [str(status) for status in Step.FINISHED],
    }


def group_name(run_id: int) -> str:
    """The channel group of one run."""
    return f"run.{run_id}"


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def totals_data(run: Run) -> dict[str, Any]:
    return {
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "cost": run.cost,
        "model_calls": run.model_calls,
        "wall_time": run.wall_time,
        "step_count": run.step_count,
    }


def step_data(step: Step) -> dict[str, Any]:
    """A step as pages and clients see it live. Messages and response are fetched on demand."""
    return {
        "id": step.pk,
        "round": step.round,
        "index": step.index,
        "worker": step.worker_name,
        "worker_index": step.worker_index,
        "model": step.model,
        "instruction": step.instruction,
        "access": step.access,
        "reads": step.reads,
        "status": step.status,
        "tokens_in": step.tokens_in,
        "tokens_out": step.tokens_out,
        "cost": step.cost,
        "latency": step.latency,
        "attempts": step.attempts,
        "error": step.error,
        "reused_from": step.reused_from_id,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
    }


# The columns step_data reads, in the order step_rows_data takes them from ``values_list``.
STEP_DATA_COLUMNS: Final = (
    "id", "round", "index", "worker_name", "worker_index", "model", "instruction", "access",
    "reads", "status", "tokens_in", "tokens_out", "cost", "latency", "attempts", "error",
    "reused_from_id", "started_at", "finished_at",
)  # fmt: skip


def step_rows_data(rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """``step_data`` of many steps read as ``values_list(*STEP_DATA_COLUMNS)``: the same dicts,
    without building a model instance per step (five times faster on runs of thousands)."""
    return [
        {
            "id": id,
            "round": round,
            "index": index,
            "worker": worker_name,
            "worker_index": worker_index,
            "model": model,
            "instruction": instruction,
            "access": access,
            "reads": reads,
            "status": status,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cost": cost,
            "latency": latency,
            "attempts": attempts,
            "error": error,
            "reused_from": reused_from_id,
            "started_at": _iso(started_at),
            "finished_at": _iso(finished_at),
        }
        for (
            id, round, index, worker_name, worker_index, model, instruction, access, reads,
            status, tokens_in, tokens_out, cost, latency, attempts, error, reused_from_id,
            started_at, finished_at,
        ) in rows
    ]  # fmt: skip


def plan_data(plan: Plan) -> dict[str, Any]:
    return {
        "id": plan.pk,
        "round": plan.round,
        "strategy": plan.strategy,
        "attempts": len(plan.attempts),
        "error": plan.error,
        "accepts": plan.workflow == [],
        "step_count": len(plan.workflow or []),
    }


def run_data(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "status": run.status,
        "strategy": run.strategy,
        "pool": run.pool_id,
        "input": run.input,
        "reference": run.reference,
        "answer": run.answer,
        "score": run.score,
        "error": run.error,
        "replay_of": run.replay_of_id,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "totals": totals_data(run),
    }


def snapshot_data(run: Run) -> dict[str, Any]:
    """Everything a page needs to draw a run as it is now (one query per table)."""
    return {
        "run": run_data(run),
        "plans": [plan_data(p) for p in run.plans.all()],
        # step_data leaves out messages and responses: do not load them (large runs).
        "steps": step_rows_data(
            Step.objects.filter(run_id=run.pk)
            .order_by("round", "index")
            .values_list(*STEP_DATA_COLUMNS)
        ),
    }


def publish(run_id: int, type: str, data: dict[str, Any]) -> dict[str, Any]:
    """Store the next event of a run and send it to the run's group once the transaction commits.

    Call it from services only, inside or outside a transaction. Returns the event.
    """
    return publish_many(run_id, [(type, data)])[0]


def publish_many(
    run_id: int,
    items: Sequence[tuple[str, dict[str, Any]]],
    *,
    deliver: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Store several events of a run with consecutive seqs, in two queries, and hand each to
    ``deliver`` (default: ``send``) once the transaction commits, in seq order.

    Async callers pass a ``deliver`` that queues the events and send them from their own loop
    with ``send_async`` (cheaper than hopping back to the loop for every event). Returns them.
    """
    if not items:
        return []
    with transaction.atomic(savepoint=False):
        # The UPDATE takes the row lock first, so concurrent publishers get distinct seqs.
        last = _advance_seq(run_id, len(items))
        events = store_events(run_id, items, last_seq=last, deliver=deliver)
    return events


def store_events(
    run_id: int,
    items: Sequence[tuple[str, dict[str, Any]]],
    *,
    last_seq: int,
    deliver: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Store events whose seqs the caller has taken, ending at ``last_seq``, in one INSERT, and
    hand them to ``deliver`` (default: ``send``) in seq order once the transaction commits.

    For services that advance the run's ``last_seq`` by ``len(items)`` in the same transaction
    as another change of the run row (one statement instead of two); ``publish_many`` is this
    with the seqs taken for you. Call it inside ``transaction.atomic``. Returns the events.
    """
    for type, _ in items:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}")
    if not items:
        return []
    first = last_seq - len(items) + 1
    events = [
        {"type": type, "run": run_id, "seq": first + offset, **data}
        for offset, (type, data) in enumerate(items)
    ]
    created_at = connection.ops.adapt_datetimefield_value(timezone.now())
    params: list[Any] = []
    for event in events:
        params += [run_id, event["seq"], event["type"], _data_for_db(event), created_at]
    # Plain SQL: the ORM's bulk_create costs more to build than the insert costs to run.
    rows = ", ".join(["(%s, %s, %s, %s, %s)"] * len(events))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_EVENT_TABLE} (run_id, seq, type, data, created_at) VALUES {rows}",
            params,
        )
    deliver = deliver or send
    transaction.on_commit(lambda: [deliver(event) for event in events])
    return events


_EVENT_TABLE = RunEvent._meta.db_table
_EVENT_DATA = RunEvent._meta.get_field("data")


def _data_for_db(event: dict[str, Any]) -> Any:
    return _EVENT_DATA.get_db_prep_save(event, connection)


def _advance_seq(run_id: int, count: int) -> int:
    """Add ``count`` to the run's last_seq and return the new value (one statement where the
    database can return it)."""
    if can_return():
        table = connection.ops.quote_name(Run._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET last_seq = last_seq + %s WHERE id = %s RETURNING last_seq",
                [count, run_id],
            )
            row = cursor.fetchone()
        if row is None:
            raise Run.DoesNotExist(f"run {run_id} does not exist")
        return row[0]
    Run.objects.filter(pk=run_id).update(last_seq=F("last_seq") + count)
    return Run.objects.filter(pk=run_id).values_list("last_seq", flat=True).get()


def send(event: dict[str, Any]) -> None:
    """Send a stored event to the run's group (no storage; publish() calls this on commit)."""
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(
        group_name(event["run"]), {"type": LAYER_MESSAGE_TYPE, "event": event}
    )


async def send_async(event: dict[str, Any]) -> None:
    """``send`` for code running on an event loop: first straight to the run's local listeners
    on this loop, then to the run's group on the channel layer."""
    await _deliver_locally(event)
    layer = get_channel_layer()
    if layer is None:
        return
    await layer.group_send(group_name(event["run"]), {"type": LAYER_MESSAGE_TYPE, "event": event})


# A fast path for consumers in the process that executes the run (the inline backend): the
# channel layer copies each event once per consumer and wakes each one through several loop
# turns, which on a run watched by a hundred clients delays the first of them by ~15 ms. Local
# listeners get the event (and its JSON, encoded once) the moment it is sent. The layer still
# delivers every event, so a listener may skip any it cannot take in order.
LocalListener = Callable[[dict[str, Any], str], Awaitable[None]]
_local_listeners: dict[int, dict[LocalListener, asyncio.AbstractEventLoop]] = {}


def listen_locally(run_id: int, listener: LocalListener) -> None:
    """Have ``listener(event, json_text)`` called with each event of the run sent from this
    event loop (call it from the loop; undo with ``stop_listening_locally``)."""
    _local_listeners.setdefault(run_id, {})[listener] = asyncio.get_running_loop()


def stop_listening_locally(run_id: int, listener: LocalListener) -> None:
    listeners = _local_listeners.get(run_id)
    if listeners is not None:
        listeners.pop(listener, None)
        if not listeners:
            _local_listeners.pop(run_id, None)


async def _deliver_locally(event: dict[str, Any]) -> None:
    listeners = _local_listeners.get(event["run"])
    if not listeners:
        return
    loop = asyncio.get_running_loop()
    text = json.dumps(event)
    for listener, listener_loop in list(listeners.items()):
        if listener_loop is not loop:
            continue  # another loop's consumer: the channel layer reaches it
        try:
            await listener(event, text)
        except Exception:  # one broken socket must not stop the others
            logger.debug("local listener of run %s failed", event["run"], exc_info=True)
            stop_listening_locally(event["run"], listener)


def events_after(run_id: int, seq: int) -> list[dict[str, Any]]:
    """The stored events of a run after ``seq``, in order: what a reconnecting client missed."""
    return list(
        RunEvent.objects.filter(run_id=run_id, seq__gt=seq)
        .order_by("seq")
        .values_list("data", flat=True)
    )
