"""Websocket consumers: a run's live events, as ``orchestrator.wire`` defines them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from orchestrator import delivery, events, selectors
from orchestrator.models import Run
from orchestrator.services.ownership import executes_here
from orchestrator.services.runs import run_watch
from webui import snapshots, socket_access

# One code for every refusal (not logged in, no such run, not a member, access ended), so run
# ids cannot be probed by telling "does not exist" from "not yours".
CLOSE_REFUSED = 4403
# The run's events cannot reach this socket (the channel layer kept failing): "try again later".
CLOSE_LAYER_UNAVAILABLE = 1011
# Joining the run's group: attempts, the first pause between two (doubled each time, jittered).
GROUP_JOIN_ATTEMPTS = 6
GROUP_JOIN_FIRST_DELAY = 0.25
# A channel layer that does not reach the other processes (the embedded default's in-memory
# one): how often a socket reads what the run's executor, elsewhere, has stored; and how often
# it looks while this process executes the run itself (its events then come through the layer).
FOLLOW_STORED_SECONDS = 0.5
FOLLOW_LOCAL_SECONDS = 5.0

logger = logging.getLogger(__name__)


# The JSON of the latest events, by (run, seq): the channel layer hands every consumer its own
# copy of an event, and a run watched by hundreds of sockets of this process would otherwise be
# encoded once per socket. Comparing a copy with the event kept costs a fraction of encoding it
# (and keeps a reused run id, after a deletion, from getting another run's text).
_ENCODED_KEEP = 256
_encoded_texts: OrderedDict[tuple[int, int], tuple[dict[str, Any], str]] = OrderedDict()


def _encoded(event: dict[str, Any]) -> str:
    """``json.dumps(event)``, encoded once per process for every copy of the same event."""
    key = (event["run"], event["seq"])
    kept = _encoded_texts.get(key)
    if kept is not None and kept[0] == event:
        return kept[1]
    text = json.dumps(event)
    _encoded_texts[key] = (event, text)
    if len(_encoded_texts) > _ENCODED_KEEP:
        _encoded_texts.popitem(last=False)
    return text


@dataclass(slots=True)
class _Opened:
    """What a connecting socket learns in its one hop to a database thread."""

    watched: socket_access.Watched | None  # None: no user
    allowed: bool = False
    snapshot: tuple[int, str] | None = None  # (seq, JSON) when asked for
    events: list[dict[str, Any]] = field(default_factory=list)  # the events after ``after``


@socket_access.in_database_thread
def _open(
    presented: socket_access.Presented, run_id: int, after: int | None, first: bool
) -> _Opened:
    """Who the user is, whether they may watch the run, and (with ``first``) what to send first:
    the snapshot, or with ``after`` the stored events after it."""
    watched, run = socket_access.opening(presented, run_id)
    opened = _Opened(watched, allowed=run is not None)
    if run is None or not first:
        return opened
    # Marked watched, then read: an event this socket does not read here is sent to the group
    # (until a run is marked, its events are stored without being sent there). The snapshot
    # starts from the run's seq read again after the mark; the events after ``after`` are read
    # after it anyway.
    run_watch(run_id=run_id)
    try:
        if after is None:
            run = selectors.viewable_run_seq(user_id=watched.user_id, run_id=run_id)
            if run is None:  # deleted, or access lost, since the check
                opened.allowed = False
                return opened
            seq, created_at = run
            opened.snapshot = snapshots.snapshot_text(run_id=run_id, created_at=created_at, seq=seq)
        else:
            opened.events = selectors.run_events_after(run_id=run_id, seq=after)
    except Run.DoesNotExist:  # deleted since the check: refused, as a missing run is
        opened.allowed = False
    return opened


@dataclass(slots=True)
class _Stored:
    """What a following socket reads: the events after its seq (when there may be some it will
    not hear of otherwise), and whether that is all it will read."""

    events: list[dict[str, Any]]
    executed_here: bool
    done: bool  # the run is finished (or gone) and every stored event is read


@socket_access.in_database_thread
def _stored_after(run_id: int, after: int, *, missed: bool) -> _Stored:
    """The stored events of a run after ``after`` that this process's layer will not bring: all
    of them when the run is executed elsewhere (or ``missed``: the layer brought a later one
    first), none while this process executes it."""
    progress = selectors.run_progress(run_id=run_id)
    if progress is None:  # deleted: the access watcher closes the socket
        return _Stored([], executed_here=False, done=True)
    last_seq, status, executor = progress
    here = status not in Run.FINISHED and executes_here(executor)
    stored = []
    if last_seq > after and (missed or not here):
        stored = selectors.run_events_after(run_id=run_id, seq=after)
    done = status in Run.FINISHED and (stored[-1]["seq"] if stored else after) >= last_seq
    return _Stored(stored, executed_here=here, done=done)


class RunConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/runs/<id>/``: a snapshot (or, with ``?after=N``, the stored events after N), then
    every live event of the run once, in order.

    Who: the site's session (the page) or an API token (``socket_access``). Anonymous users,
    users outside the run's project and unknown runs are all closed with 4403; so is an open
    socket as soon as its session or token ends or its user leaves the project (announced by
    the model signals of ``socket_access``; changes made without signals, such as an expired
    session, within ``socket_access.ACCESS_BACKSTOP_SECONDS``).

    The consumer joins the run's group before reading the snapshot, so no event falls between
    the two; events it has already covered (seq at most the last one sent) are dropped.

    When the channel layer cannot reach the other processes (the in-memory layer), a run
    executed by another one (``manage.py conduct``) is followed from what it stores: the
    events after the last one sent, read every ``FOLLOW_STORED_SECONDS`` until the run has
    finished and all are sent (``_follow_stored``).
    """

    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.group = events.group_name(self.run_id)
        self.joined = False
        self.listening_locally = False
        self.watched = False
        self.last_sent_seq = 0
        self.following: asyncio.Task[None] | None = None
        self.missed = asyncio.Event()
        self.accepted = self.refused = False
        # Accepted first: the handshake does not wait for the checks (nothing is sent before
        # they pass), and a refused client receives the close code.
        await self.accept()
        self.accepted = True
        presented = socket_access.presented(self.scope)
        after = self._after()
        opened = _Opened(None)
        if presented is not None:
            async with socket_access.changes_heard() as changed:
                # The group is joined before the run is read, so that no event falls between
                # what is sent first and the live events.
                try:
                    self.joined = await self._join_group()
                    opened = await _open(presented, self.run_id, after, self.joined)
                except BaseException:
                    # ``disconnect`` does not follow a failed ``connect``: leave here.
                    await self._leave_group()
                    raise
                if opened.watched is not None:
                    await socket_access.watch(self, opened.watched, self._refuse)
                    self.watched = True
                    if opened.allowed and changed():  # access may have changed since the read
                        opened.allowed = bool(await socket_access.allowed([opened.watched]))
        if self.refused or not opened.allowed:
            # Joined before the check: leave at once, and drop whatever the group has already
            # queued for this socket (no seq passes this one).
            self.last_sent_seq = sys.maxsize
            await self._leave_group()
            if not self.refused:  # else closed already, by ``_refuse``
                await self.close(code=CLOSE_REFUSED)
            return
        if not self.joined:
            await self.close(code=CLOSE_LAYER_UNAVAILABLE)
            return
        if opened.snapshot is not None:
            self.last_sent_seq, text = opened.snapshot
            await self.send(text_data=text)
        else:
            self.last_sent_seq = after or 0
            for event in opened.events:
                await self._forward(event)
        # From here on, events sent from this process's loop come straight here (no layer hop);
        # the group still brings every event, and whichever copy comes second is dropped.
        delivery.listen_locally(self.run_id, self._forward_local)
        self.listening_locally = True
        if not events.layer_reaches_other_processes():
            self.following = asyncio.create_task(self._follow_stored())

    async def _follow_stored(self) -> None:
        """Send what the run's executor stores, when the layer cannot bring it from there: the
        events after the last one sent, until the run is finished and they are all sent. While
        this process executes the run, its events come through the layer: look less often (an
        execution of another process may take the run over), and at once when the layer brings
        an event past a gap (``_forward``)."""
        pause = FOLLOW_STORED_SECONDS
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.missed.wait(), pause)
            missed = self.missed.is_set()
            self.missed.clear()
            try:
                stored = await _stored_after(self.run_id, self.last_sent_seq, missed=missed)
            except Exception:  # the database is busy or away: try again at the next turn
                logger.warning("run %s socket: cannot read its events", self.run_id, exc_info=True)
                continue
            for event in stored.events:
                await self._forward(event)
            if stored.done:
                self.following = None
                return
            pause = FOLLOW_LOCAL_SECONDS if stored.executed_here else FOLLOW_STORED_SECONDS

    async def _join_group(self) -> bool:
        """Join the run's group, trying again with backoff while the channel layer does not
        answer (a crowd of sockets connecting at once can take Redis past a connect timeout):
        False only after ``GROUP_JOIN_ATTEMPTS`` failures, about 10 s."""
        delay = GROUP_JOIN_FIRST_DELAY
        for attempt in range(1, GROUP_JOIN_ATTEMPTS + 1):
            try:
                await self.channel_layer.group_add(self.group, self.channel_name)
            except Exception:
                logger.warning(
                    "run %s socket: cannot join the group (attempt %s of %s)",
                    self.run_id,
                    attempt,
                    GROUP_JOIN_ATTEMPTS,
                    exc_info=True,
                )
                if attempt == GROUP_JOIN_ATTEMPTS:
                    return False
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                delay *= 2
            else:
                return True
        return False

    async def _refuse(self) -> None:
        """The user may no longer watch this run."""
        self.refused = True
        if self.accepted:
            await self.close(code=CLOSE_REFUSED)

    def _after(self) -> int | None:
        """The ``after`` query parameter: the last seq a reconnecting client has seen."""
        value = socket_access.query_parameter(self.scope, "after")
        # isdigit() alone accepts "²", which int() refuses (the connection would crash).
        if value is not None and value.isascii() and value.isdigit():
            return int(value)
        return None

    async def disconnect(self, code: int) -> None:
        following = getattr(self, "following", None)
        if following is not None:
            following.cancel()
            self.following = None
        if getattr(self, "watched", False):
            socket_access.unwatch(self)
            self.watched = False
        if getattr(self, "listening_locally", False):
            delivery.stop_listening_locally(self.run_id, self._forward_local)
            self.listening_locally = False
        await self._leave_group()

    async def _leave_group(self) -> None:
        if getattr(self, "joined", False):
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.joined = False

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients only listen; anything they send is ignored."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels closes stale database connections before every message: a hop to the
        shared thread and back. A run's events touch no database, and each event of a run
        watched by a hundred sockets is a hundred such messages (in the process executing the
        run, all duplicates of what the sender already wrote): they go straight to their
        handlers. So do the others (opening, closing): this consumer reads the database only
        through ``socket_access.in_database_thread``, which closes its connections itself."""
        kind = message.get("type")
        if kind == events.LAYER_MESSAGE_TYPE:
            await self.run_event(message)
        elif kind == events.LAYER_BATCH_TYPE:
            await self.run_events(message)
        else:
            handler = getattr(self, get_handler_name(message), None)
            if handler is None:
                raise ValueError(f"No handler for message type {kind}")
            await handler(message)

    async def run_event(self, message: dict[str, Any]) -> None:
        """A live event from the run's group (layer message type ``run.event``)."""
        await self._forward(message["event"])

    async def run_events(self, message: dict[str, Any]) -> None:
        """Several live events of the run, in seq order (layer message type ``run.events``)."""
        for event in message["events"]:
            await self._forward(event)

    async def _forward_local(self, event: dict[str, Any], text: str) -> None:
        """An event sent from this process's loop, with its JSON. Taken only if it is the next
        one: an earlier event may still be waiting in the layer's queue for this consumer, and
        the layer's copy of this one then comes after it, in order."""
        if event["seq"] != self.last_sent_seq + 1:
            return
        self.last_sent_seq = event["seq"]
        await self.send(text_data=text)

    async def _forward(self, event: dict[str, Any]) -> None:
        if event["seq"] <= self.last_sent_seq:
            return
        if self.following is not None and event["seq"] != self.last_sent_seq + 1:
            # Events stored by another process came between (a cancel sent from here while the
            # CLI executes the run): they come from the database first, then this one.
            self.missed.set()
            return
        self.last_sent_seq = event["seq"]
        await self.send(text_data=_encoded(event))
