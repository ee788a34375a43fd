"""Who may keep a run's websocket open: authentication at connect, and one periodic check of
every open socket of the process.

A socket authenticates with the site's session (the page) or an API token, as the REST API does:
an ``Authorization: Token <key>`` header, or ``?token=<key>`` for clients that cannot set
headers. While it is open, one task per event loop checks every socket at once, every
``ACCESS_RECHECK_SECONDS``, with a handful of queries however many sockets are open: the session
or token still holds, the user is active and still a member of the run's project. A socket that
fails the check is closed.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.utils.crypto import constant_time_compare
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed

from orchestrator import selectors

logger = logging.getLogger(__name__)

# A logout, a deleted token or a removed membership closes a socket within about this long.
ACCESS_RECHECK_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Credential:
    """What a socket authenticated with; ``key`` is a session key or an API token."""

    kind: Literal["session", "token"]
    key: str


@dataclass(frozen=True, slots=True)
class Watched:
    """An open socket as the check sees it. ``credential`` is None for a scope whose user was
    set without one (tests, an outer middleware): then only the user and membership count."""

    user_id: int
    run_id: int
    credential: Credential | None


def query_parameter(scope: dict[str, Any], wanted: str) -> str | None:
    """The first value of the query parameter ``wanted``, undecoded, or None."""
    query = scope.get("query_string", b"").decode("latin-1")
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == wanted:
            return value
    return None


def _header_token(scope: dict[str, Any]) -> str | None:
    """The key of an ``Authorization: Token <key>`` header, read as the REST API reads it."""
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


async def authenticate(scope: dict[str, Any]) -> tuple[Any | None, Credential | None]:
    """The user of a connecting socket and what to check again later: an API token if one is
    given, else the session the site's cookie named (AuthMiddlewareStack read it already)."""
    token = query_parameter(scope, "token") or _header_token(scope)
    if token:
        return await _token_user(token), Credential("token", token)
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None, None
    session_key = getattr(scope.get("session"), "session_key", None)
    return user, (Credential("session", session_key) if session_key else None)


def _session_users(keys: set[str]) -> dict[str, tuple[str, str]]:
    """(user id, auth hash) of each live session among ``keys``. Database-backed sessions (the
    default) are read in one query; other engines one session at a time."""
    if not keys:
        return {}
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    if hasattr(store_class, "get_model_class"):
        from django.utils import timezone

        rows = (
            store_class.get_model_class()
            .objects.filter(session_key__in=keys, expire_date__gt=timezone.now())
            .values_list("session_key", "session_data")
        )
        data = {key: store_class().decode(session_data) for key, session_data in rows}
    else:
        data = {key: store_class(session_key=key).load() for key in keys}
    return {
        key: (str(values.get(SESSION_KEY, "")), str(values.get(HASH_SESSION_KEY, "")))
        for key, values in data.items()
    }


def _hash_holds(user: Any, session_hash: str) -> bool:
    """Whether a session's auth hash still matches the user's (it changes with the password)."""
    if not session_hash:
        return False
    if constant_time_compare(session_hash, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(session_hash, fallback)
        for fallback in user.get_session_auth_fallback_hash()
    )


@database_sync_to_async
def allowed(watched: Iterable[Watched]) -> set[Watched]:
    """The sockets among ``watched`` that may stay open."""
    from django.contrib.auth import get_user_model

    watched = set(watched)
    viewable = selectors.viewable_pairs((w.user_id, w.run_id) for w in watched)
    credentials = {w.credential for w in watched if w.credential is not None}
    tokens = dict(
        Token.objects.filter(key__in={c.key for c in credentials if c.kind == "token"}).values_list(
            "key", "user_id"
        )
    )
    sessions = _session_users({c.key for c in credentials if c.kind == "session"})
    session_user_ids = {int(uid) for uid, _ in sessions.values() if uid.isdigit()}
    users = {u.pk: u for u in get_user_model().objects.filter(pk__in=session_user_ids)}

    def credential_holds(w: Watched) -> bool:
        credential = w.credential
        if credential is None:
            return True
        if credential.kind == "token":
            return tokens.get(credential.key) == w.user_id
        user_id, session_hash = sessions.get(credential.key, ("", ""))
        user = users.get(w.user_id)
        return user_id == str(w.user_id) and user is not None and _hash_holds(user, session_hash)

    return {w for w in watched if (w.user_id, w.run_id) in viewable and credential_holds(w)}


class _AccessWatch:
    """The open sockets of one event loop, and the task that checks them."""

    def __init__(self) -> None:
        self.sockets: dict[object, tuple[Watched, Callable[[], Awaitable[None]]]] = {}
        self.task: asyncio.Task | None = None

    def add(self, handle: object, watched: Watched, on_refused: Callable[[], Awaitable[None]]):
        self.sockets[handle] = (watched, on_refused)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._check_while_open())

    async def _check_while_open(self) -> None:
        while self.sockets:
            await asyncio.sleep(ACCESS_RECHECK_SECONDS)
            sockets = dict(self.sockets)
            try:
                still = await allowed(watched for watched, _ in sockets.values())
            except Exception:  # a database hiccup: keep the sockets, look again next time
                logger.warning("cannot check access of open run sockets", exc_info=True)
                continue
            for handle, (watched, on_refused) in sockets.items():
                if watched not in still and self.sockets.pop(handle, None) is not None:
                    await on_refused()


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _AccessWatch] = (
    weakref.WeakKeyDictionary()
)


def watch(handle: object, watched: Watched, on_refused: Callable[[], Awaitable[None]]) -> None:
    """Check ``watched`` with every other open socket of this loop; call ``on_refused`` once
    when it no longer passes. ``handle`` identifies it for :func:`unwatch`."""
    loop = asyncio.get_running_loop()
    if loop not in _watches:
        _watches[loop] = _AccessWatch()
    _watches[loop].add(handle, watched, on_refused)


def unwatch(handle: object) -> None:
    """Stop checking a socket (it closed)."""
    access_watch = _watches.get(asyncio.get_running_loop())
    if access_watch is not None:
        access_watch.sockets.pop(handle, None)
