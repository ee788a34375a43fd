"""Websocket consumers: a run's live events, as ``orchestrator.events`` defines them."""

from __future__ import annotations

import asyncio
import logging
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib import auth
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from orchestrator import events, selectors
from orchestrator.models import Run

logger = logging.getLogger(__name__)

# One code for every refusal (not logged in, no such run, not a member, access ended), so run
# ids cannot be probed by telling "does not exist" from "not yours".
CLOSE_REFUSED = 4403
# How often an open socket checks that its user may still watch: a logout, a revoked token or
# a removed membership closes it within about this long.
ACCESS_RECHECK_SECONDS = 0.5


def _query_parameter(scope: dict[str, Any], wanted: str) -> str | None:
    query = scope.get("query_string", b"").decode("latin-1")
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == wanted:
            return value
    return None


def _header_token(scope: dict[str, Any]) -> str | None:
    """The key of an ``Authorization: Token <key>`` header, as the REST API reads it."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            kind, _, key = value.decode("latin-1").partition(" ")
            if kind.lower() == "token" and key.strip():
                return key.strip()
    return None


@database_sync_to_async
def _token_user(key: str) -> Any | None:
    """The active user of an API token, exactly as the REST API's token auth finds it."""
    try:
        user, _ = TokenAuthentication().authenticate_credentials(key)
    except AuthenticationFailed:
        return None
    return user


@database_sync_to_async
def _current_user(user_id: int, credential: tuple[str, str] | None) -> Any | None:
    """The user behind a socket's credential as of now, or None once it no longer holds: the
    session was logged out, expired or outlived a password change; the token was deleted; the
    user was deactivated."""
    if credential is None:  # a scope built by hand (tests, an outer middleware): the user only
        return auth.get_user_model().objects.filter(pk=user_id, is_active=True).first()
    kind, key = credential
    if kind == "token":
        try:
            user, _ = TokenAuthentication().authenticate_credentials(key)
        except AuthenticationFailed:
            return None
    else:
        session = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
        user = auth.get_user(SimpleNamespace(session=session))
    if not user.is_authenticated or user.pk != user_id or not user.is_active:
        return None
    return user


@database_sync_to_async
def _may_watch(user: Any, run_id: int) -> bool:
    """Whether the run exists and the user may see it (one answer for both, on purpose)."""
    run = Run.objects.filter(pk=run_id).only("pk", "project_id").first()
    return run is not None and selectors.user_can_view(user=user, run=run)


@database_sync_to_async
def _snapshot(run_id: int) -> dict[str, Any]:
    run = Run.objects.get(pk=run_id)
    return {
        "type": events.SNAPSHOT,
        "run": run_id,
        "seq": run.last_seq,
        "state": events.snapshot_data(run),
    }


@database_sync_to_async
def _events_after(run_id: int, seq: int) -> list[dict[str, Any]]:
    return events.events_after(run_id, seq)


class RunConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/runs/<id>/``: a snapshot (or, with ``?after=N``, the stored events after N), then
    every live event of the run once, in order.

    Who: the site's session (the page), or an API token as the REST API takes it, given as
    ``?token=<key>`` or an ``Authorization: Token <key>`` header. Anonymous users, users outside
    the run's project and unknown runs are all closed with 4403. While open, the socket checks
    every ``ACCESS_RECHECK_SECONDS`` that the session or token still holds and the user is still
    a member, and closes with 4403 when not.

    The consumer joins the run's group before reading the snapshot, so no event falls between
    the two; events it has already covered (seq at most the last one sent) are dropped.
    """

    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.group = events.group_name(self.run_id)
        self.joined = False
        self.listening_locally = False
        self.access_watch: asyncio.Task | None = None
        self.last_sent_seq = 0
        user, self.credential = await self._authenticate()
        allowed = user is not None and await _may_watch(user, self.run_id)
        await self.accept()  # accepted first so the client receives the close code
        if not allowed:
            await self.close(code=CLOSE_REFUSED)
            return
        self.user_id = user.pk
        self.access_watch = asyncio.create_task(self._watch_access())
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.joined = True
        after = self._after()
        if after is None:
            snapshot = await _snapshot(self.run_id)
            self.last_sent_seq = snapshot["seq"]
            await self.send_json(snapshot)
        else:
            self.last_sent_seq = after
            for event in await _events_after(self.run_id, after):
                await self._forward(event)
        # From here on, events sent from this process's loop come straight here (no layer hop);
        # the group still brings every event, and whichever copy comes second is dropped.
        events.listen_locally(self.run_id, self._forward_local)
        self.listening_locally = True

    async def _authenticate(self) -> tuple[Any | None, tuple[str, str] | None]:
        """The user and the credential to check again later: an API token if one is given,
        else the session the site's cookie named."""
        token = _query_parameter(self.scope, "token") or _header_token(self.scope)
        if token:
            return await _token_user(token), ("token", token)
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return None, None
        session = self.scope.get("session")
        session_key = getattr(session, "session_key", None)
        return user, (("session", session_key) if session_key else None)

    async def _watch_access(self) -> None:
        """Close the socket as soon as its user may no longer watch the run."""
        while True:
            await asyncio.sleep(ACCESS_RECHECK_SECONDS)
            try:
                user = await _current_user(self.user_id, self.credential)
                allowed = user is not None and await _may_watch(user, self.run_id)
            except Exception:  # a database hiccup: keep the socket, look again next time
                logger.warning("cannot check access to run %s", self.run_id, exc_info=True)
                continue
            if not allowed:
                await self.close(code=CLOSE_REFUSED)
                return

    def _after(self) -> int | None:
        """The ``after`` query parameter: the last seq a reconnecting client has seen."""
        value = _query_parameter(self.scope, "after")
        # isdigit() alone accepts "²", which int() refuses (the connection would crash).
        if value is not None and value.isascii() and value.isdigit():
            return int(value)
        return None

    async def disconnect(self, code: int) -> None:
        if getattr(self, "access_watch", None) is not None:
            self.access_watch.cancel()
            self.access_watch = None
        if getattr(self, "listening_locally", False):
            events.stop_listening_locally(self.run_id, self._forward_local)
            self.listening_locally = False
        if getattr(self, "joined", False):
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.joined = False

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients only listen; anything they send is ignored."""

    async def run_event(self, message: dict[str, Any]) -> None:
        """A live event from the run's group (layer message type ``run.event``)."""
        await self._forward(message["event"])

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
        self.last_sent_seq = event["seq"]
        await self.send_json(event)
