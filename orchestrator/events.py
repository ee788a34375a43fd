"""Publishing live events: store each in ``RunEvent``, send it to the run's group on commit.

The shapes of the events are in ``orchestrator/wire.py`` (its docstring is the reference). Every
event is ``{"type", "run", "seq", ...}`` with ``seq`` increasing by one per run, taken by
``sql.advance_seq``. Events are stored so a reconnecting client can be sent exactly what it missed
(``selectors.run_events_after``), and sent only after the transaction commits. Only services
publish, with ``publish`` / ``publish_many`` (which take the seqs) or ``store_events`` (for a
service that took them itself in one UPDATE of the run row with another change).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Final

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction
from django.utils import timezone

from orchestrator import delivery, wire
from orchestrator.models import Run, RunEvent
from orchestrator.sql import advance_seq, db_datetime, hot_cursor, json_param

# The channel-layer message types; Channels routes them to the consumer's ``run_event`` and
# ``run_events`` handlers (several events of one run, in seq order, in one message).
LAYER_MESSAGE_TYPE: Final = "run.event"
LAYER_BATCH_TYPE: Final = "run.events"

Deliver = Callable[[dict[str, Any]], None]


def group_name(run_id: int) -> str:
    """The channel group of one run."""
    return f"run.{run_id}"


def publish(run_id: int, type: str, data: dict[str, Any]) -> dict[str, Any]:
    """Store the next event of a run and send it to the run's group once the transaction commits.

    Call it from services only, inside or outside a transaction. Returns the event.
    """
    return publish_many(run_id, [(type, data)])[0]


def publish_many(
    run_id: int, items: Sequence[tuple[str, Any]], *, deliver: Deliver | None = None
) -> list[dict[str, Any]]:
    """Store several events of a run with consecutive seqs, in two queries, and hand each to
    ``deliver`` (default: ``send``) once the transaction commits, in seq order. Returns them."""
    if not items:
        return []
    with transaction.atomic(savepoint=False):
        # The UPDATE takes the row lock first, so concurrent publishers get distinct seqs.
        row = advance_seq(run_id, len(items))
        if row is None:
            raise Run.DoesNotExist(f"run {run_id} does not exist")
        return store_events(run_id, items, last_seq=row[0], deliver=deliver)


def store_events(
    run_id: int,
    items: Sequence[tuple[str, Any]],
    *,
    last_seq: int,
    deliver: Deliver | None = None,
) -> list[dict[str, Any]]:
    """Store events whose seqs the caller has taken (``sql.advance_seq``), ending at
    ``last_seq``, in one INSERT, and hand them to ``deliver`` (default: ``send``) in seq order
    once the transaction commits.

    Async callers pass a ``deliver`` that queues the events and send them from their own loop
    with ``send_async``. Call it inside ``transaction.atomic``. Returns the events.
    """
    events = numbered(run_id, items, last_seq=last_seq)
    insert_events(events, deliver=deliver)
    return events


def numbered(
    run_id: int, items: Sequence[tuple[str, Any]], *, last_seq: int
) -> list[dict[str, Any]]:
    """The events of ``items`` (``(type, data)``) of a run, numbered up to ``last_seq``."""
    for type, _ in items:
        if type not in wire.EVENT_SHAPES:
            raise ValueError(f"unknown event type {type!r}")
    first = last_seq - len(items) + 1
    return [
        {"type": type, "run": run_id, "seq": first + offset, **data}
        for offset, (type, data) in enumerate(items)
    ]


def insert_events(events: Sequence[dict[str, Any]], *, deliver: Deliver | None = None) -> None:
    """Insert numbered events (``numbered``) in one statement, and hand them to ``deliver`` once
    the transaction commits (``store_events``)."""
    if not events:
        return
    created_at = db_datetime(timezone.now())
    params: list[Any] = []
    for event in events:
        params += [event["run"], event["seq"], event["type"], _data_for_db(event), created_at]
    # Plain SQL: the ORM's bulk_create costs more to build than the insert costs to run.
    rows = ", ".join(["(%s, %s, %s, %s, %s)"] * len(events))
    with hot_cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_EVENT_TABLE} (run_id, seq, type, data, created_at) VALUES {rows}",
            params,
        )
    deliver_on_commit(list(events), deliver)


def deliver_on_commit(events: list[dict[str, Any]], deliver: Deliver | None = None) -> None:
    """Hand stored events to ``deliver`` in seq order once the transaction commits (at once
    outside one). By default they go to the sender of the run's execution if this process
    executes it (``delivery.send_through``: behind the events it has not sent yet), else to
    ``send``."""
    if not events:
        return
    if deliver is not None:
        transaction.on_commit(lambda: [deliver(event) for event in events])
    else:
        transaction.on_commit(lambda: _send_in_order(events))


def _send_in_order(events: list[dict[str, Any]]) -> None:
    for event in events:
        sender = delivery.run_sender(event["run"])
        if sender is not None:
            sender([event])
        else:
            send(event)


_EVENT_TABLE = RunEvent._meta.db_table
_EVENT_DATA = RunEvent._meta.get_field("data")


def _data_for_db(event: dict[str, Any]) -> Any:
    return json_param(_EVENT_DATA, event)


def layer_reaches_other_processes() -> bool:
    """Whether the channel layer carries a group send to the other processes (Redis), or only
    within this one (the embedded default's in-memory layer, or none): then a run executed by
    another process (``manage.py conduct``, a second server) reaches this process's sockets
    only through what it stores."""
    layer = get_channel_layer()
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


def send(event: dict[str, Any]) -> None:
    """Send a stored event to the run's group (no storage; ``publish`` calls this on commit)."""
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(
        group_name(event["run"]), {"type": LAYER_MESSAGE_TYPE, "event": event}
    )


async def send_async(event: dict[str, Any]) -> None:
    """``send`` for code running on an event loop: first straight to the run's local listeners
    on this loop (``delivery``), then to the run's group on the channel layer."""
    await send_many_async([event])


async def send_many_async(
    events: Sequence[dict[str, Any]], *, to_layer: Sequence[bool] | None = None
) -> None:
    """``send_async`` of several stored events of one run, in seq order: each to the local
    listeners, then all of them in one channel-layer message (a group send costs several
    Redis round trips, whatever it carries). With ``to_layer`` (a flag an event), only those
    flagged go to the channel layer: the others were stored while nobody had subscribed to the
    run's group (``Run.watched``)."""
    if not events:
        return
    delivered_locally = False
    for event in events:
        delivered_locally |= await delivery.deliver_locally(event)
    if to_layer is not None:
        events = [event for event, flagged in zip(events, to_layer, strict=True) if flagged]
        if not events:
            return
    layer = get_channel_layer()
    if layer is None:
        return
    if delivered_locally:
        # One turn of the loop first, in which the server writes what the local sockets were
        # just sent: the group send then takes the loop for a while (a copy of the message and
        # a task per channel, a hundred of each for a run watched by a hundred sockets).
        await asyncio.sleep(0)
    if len(events) == 1:
        message = {"type": LAYER_MESSAGE_TYPE, "event": events[0]}
    else:
        message = {"type": LAYER_BATCH_TYPE, "events": list(events)}
    await layer.group_send(group_name(events[0]["run"]), message)
