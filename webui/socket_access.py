"""Who may keep a run's websocket open: authentication at connect, and checks of the open
sockets while they stay open.

A socket authenticates with the site's session (the page) or an API token, as the REST API does:
an ``Authorization: Token <key>`` header, or ``?token=<key>`` for clients that cannot set
headers. While it is open, it is checked again (the session or token still holds, the user is
active and still a member of the run's project; a socket that fails is closed):

- when access may have changed: a session or token deleted (logout, revoked token), a user saved
  (password, active, superuser) or deleted, a membership added, changed or removed, a run
  deleted. Signal handlers (``connect_signals``) announce it once the transaction commits: to the
  watchers of this process directly, and to every other process through the channel layer group
  ``ACCESS_GROUP`` (one channel per process's event loop, not one per socket). Only the sockets of
  the users or runs concerned are checked, in one batch of a handful of queries;
- every ``ACCESS_BACKSTOP_SECONDS`` (30 s), all sockets at once, whatever happened: this covers
  changes no signal reports (a session that expires, a queryset ``update()``, a lost layer
  message). An idle socket costs nothing between two checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from importlib import import_module
from types import SimpleNamespace
from typing import Any, Literal, ParamSpec, TypeVar

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth import get_user as session_user
from django.db import close_old_connections, transaction
from django.db.models.signals import post_delete, post_save
from django.http.cookie import parse_cookie
from django.utils.crypto import constant_time_compare
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed

from orchestrator import selectors

logger = logging.getLogger(__name__)

# Every open socket is checked this often even if no change is announced (session expiry,
# changes made without model signals). Announced changes are checked at once.
ACCESS_BACKSTOP_SECONDS = 30.0
# The channel layer group of every process's access watcher, and its message type.
ACCESS_GROUP = "socket-access"
ACCESS_MESSAGE_TYPE = "access.recheck"
# Tells this process's own messages from others' (it has already woken its watchers directly).
_ORIGIN = uuid.uuid4().hex
# How long a connecting socket waits for its process to join ACCESS_GROUP (once per process).
JOIN_WAIT_SECONDS = 5.0


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


_P = ParamSpec("_P")
_R = TypeVar("_R")

# The database work of run sockets (opening one, checking open ones) runs on these threads,
# reused: a thread started and joined for each socket (a thread-sensitive context per
# connection) cost a busy server more than the socket's queries. No more threads than the web
# process has pooled connections: another one would only wait for a connection.
_DATABASE_THREADS = ThreadPoolExecutor(
    max_workers=max(2, getattr(settings, "CONDUCTOR_DB_POOL_MAX_SIZE", 0) or 4),
    thread_name_prefix="run-socket-db",
)


def in_database_thread(func: Callable[_P, _R]) -> Callable[_P, Awaitable[_R]]:
    """``func`` run on the run sockets' threads (``_DATABASE_THREADS``), its connection given
    back (to the pool) as it ends, as ``database_sync_to_async`` does: there, in the calling
    context's copy, where the call opened it."""

    @functools.wraps(func)
    def closing(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(closing, thread_sensitive=False, executor=_DATABASE_THREADS)


@dataclass(frozen=True, slots=True)
class Presented:
    """What a connecting socket presents, read from its scope before any query: an API token,
    the site's session cookie, or a user that an outer middleware (or a test) put in the scope
    with the session it came from, if any."""

    token: str | None = None
    session_key: str | None = None
    user: Any = None


def presented(scope: dict[str, Any]) -> Presented | None:
    """The credentials of a connecting socket, taken as the REST API takes them: an API token if
    one is given, else the site's session. None when there is nothing to check (anonymous)."""
    token = query_parameter(scope, "token") or _header_token(scope)
    if token:
        return Presented(token=token)
    user = scope.get("user")
    if user is not None:
        if not user.is_authenticated:
            return None
        session_key = getattr(scope.get("session"), "session_key", None)
        return Presented(user=user, session_key=session_key)
    session_key = _cookie(scope, settings.SESSION_COOKIE_NAME)
    return Presented(session_key=session_key) if session_key else None


def _cookie(scope: dict[str, Any], wanted: str) -> str | None:
    """A cookie of the scope's first ``Cookie`` header (as channels' CookieMiddleware reads it)."""
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            return parse_cookie(value.decode("latin-1")).get(wanted) or None
    return None


def opening(
    presented: Presented, run_id: int
) -> tuple[Watched | None, tuple[int, datetime] | None]:
    """Who a connecting socket's user is, and the run's ``(last_seq, created_at)`` if they may
    watch it now (None if not). Synchronous: the socket runs it in its one hop to a database
    thread, with the reads of what it sends first. A token is read as the REST API reads it; a
    session as Django reads the session of a request (its auth hash checked, a stale one
    flushed); then the run and the user's membership in one query."""
    if presented.token is not None:
        try:
            user, _ = TokenAuthentication().authenticate_credentials(presented.token)
        except AuthenticationFailed:
            return None, None
        watched = Watched(user.pk, run_id, Credential("token", presented.token))
    elif presented.user is not None:
        key = presented.session_key
        watched = Watched(presented.user.pk, run_id, Credential("session", key) if key else None)
        if watched.credential is not None and not _allowed_now([watched]):
            return watched, None
    else:
        store = import_module(settings.SESSION_ENGINE).SessionStore(
            session_key=presented.session_key
        )
        user = session_user(SimpleNamespace(session=store))  # type: ignore[arg-type]
        if not user.is_authenticated or store.session_key is None:
            return None, None
        watched = Watched(user.pk, run_id, Credential("session", store.session_key))
    return watched, selectors.viewable_run_seq(user_id=watched.user_id, run_id=run_id)


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


def _allowed_now(watched: Iterable[Watched]) -> set[Watched]:
    """The sockets among ``watched`` that may stay open (synchronous: see ``allowed``)."""
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


allowed = in_database_thread(_allowed_now)


@dataclass(slots=True)
class _Scope:
    """Which open sockets a re-check covers: all of them, or those of some users or runs."""

    everyone: bool = False
    users: set[int] = field(default_factory=set)
    runs: set[int] = field(default_factory=set)

    def covers(self, watched: Watched) -> bool:
        return self.everyone or watched.user_id in self.users or watched.run_id in self.runs

    def merge(self, other: _Scope) -> None:
        self.everyone = self.everyone or other.everyone
        self.users |= other.users
        self.runs |= other.runs

    def message(self) -> dict[str, Any]:
        return {
            "type": ACCESS_MESSAGE_TYPE,
            "origin": _ORIGIN,
            "everyone": self.everyone,
            "users": sorted(self.users),
            "runs": sorted(self.runs),
        }

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> _Scope:
        return cls(
            everyone=bool(message.get("everyone")),
            users={int(user_id) for user_id in message.get("users") or ()},
            runs={int(run_id) for run_id in message.get("runs") or ()},
        )


def _cross_process_layer() -> Any | None:
    """The channel layer, when it reaches other processes (Redis); None for the in-memory one,
    which lives in this process alone (the direct wake-up of ``_announce`` covers it)."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return None
    return layer


class _AccessWatch:
    """The open sockets of one event loop, and the task that checks them: when told that access
    changed (``poke``, from this process or, through the channel layer, from another one), and
    every ``ACCESS_BACKSTOP_SECONDS`` whatever happens."""

    def __init__(self) -> None:
        self.sockets: dict[object, tuple[Watched, Callable[[], Awaitable[None]]]] = {}
        self.task: asyncio.Task | None = None
        self.pending = _Scope()
        self.wake = asyncio.Event()
        self.channel: str | None = None
        self.joined = asyncio.Event()  # set while this loop's channel is in ACCESS_GROUP
        self.opening = 0  # sockets between ``changes_heard`` and ``watch``
        self.announced = 0  # changes announced so far (``changes_heard`` compares)

    def add(self, handle: object, watched: Watched, on_refused: Callable[[], Awaitable[None]]):
        self.sockets[handle] = (watched, on_refused)
        self.start()

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._check_while_open())

    def poke(self, scope: _Scope) -> None:
        """Access may have changed for the sockets ``scope`` covers: check them now."""
        self.announced += 1
        self.pending.merge(scope)
        self.wake.set()

    async def _check_while_open(self) -> None:
        layer = _cross_process_layer()
        listener = asyncio.create_task(self._listen(layer)) if layer is not None else None
        try:
            while self.sockets or self.opening:
                try:
                    await asyncio.wait_for(self.wake.wait(), ACCESS_BACKSTOP_SECONDS)
                except TimeoutError:
                    scope = _Scope(everyone=True)
                    if layer is not None and self.channel is not None:
                        await self._join(layer)  # keeps the group membership from expiring
                else:
                    self.wake.clear()
                    scope, self.pending = self.pending, _Scope()
                await self._check(scope)
        finally:
            if listener is not None:
                await _stop(listener)
            if self.sockets or self.opening:  # a socket came while this task was ending
                self.task = asyncio.get_running_loop().create_task(self._check_while_open())

    async def _check(self, scope: _Scope) -> None:
        sockets = {
            handle: entry for handle, entry in self.sockets.items() if scope.covers(entry[0])
        }
        if not sockets:
            return
        try:
            still = await allowed(watched for watched, _ in sockets.values())
        except Exception:  # a database hiccup: keep the sockets, look again soon
            logger.warning("cannot check access of open run sockets", exc_info=True)
            self._retry_soon(scope)
            return
        for handle, (watched, on_refused) in sockets.items():
            if watched not in still and self.sockets.pop(handle, None) is not None:
                await on_refused()

    def _retry_soon(self, scope: _Scope) -> None:
        """Check ``scope`` again in a second (the check itself failed)."""
        asyncio.get_running_loop().call_later(1.0, self.poke, scope)

    async def _join(self, layer: Any) -> bool:
        try:
            await layer.group_add(ACCESS_GROUP, self.channel)
        except Exception:
            logger.warning("cannot join the socket access group", exc_info=True)
            return False
        return True

    async def _listen(self, layer: Any) -> None:
        """Take the access messages other processes send (``announce``) while sockets are open.
        A lost layer connection is retried with backoff; the backstop check covers the gap."""
        delay = 0.5
        try:
            while True:
                try:
                    if self.channel is None:
                        # The default prefix: channels_redis reads all "specific.<process>!" channels
                        # of a process in one loop, which a channel of another prefix would stall.
                        self.channel = await layer.new_channel()
                    if not await self._join(layer):
                        raise ConnectionError("channel layer unavailable")
                    self.joined.set()
                    delay = 0.5
                    while True:
                        message = await layer.receive(self.channel)
                        if (
                            message.get("type") == ACCESS_MESSAGE_TYPE
                            and message.get("origin") != _ORIGIN
                        ):
                            self.poke(_Scope.from_message(message))
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.warning("socket access messages interrupted", exc_info=True)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, ACCESS_BACKSTOP_SECONDS)
        finally:
            self.joined.clear()
            if self.channel is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(layer.group_discard(ACCESS_GROUP, self.channel))


async def _stop(task: asyncio.Task, *, seconds: float = 10.0) -> None:
    """Cancel ``task`` and wait until it ends. A channels_redis receive can take a cancellation
    in for one of its blocking reads and go on reading (redis-py's own timeouts), so the task is
    cancelled again until it ends, for ``seconds`` at most."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not task.done() and asyncio.get_running_loop().time() < deadline:
        task.cancel()
        await asyncio.wait({task}, timeout=0.2)


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _AccessWatch] = (
    weakref.WeakKeyDictionary()
)


def _loop_watch() -> _AccessWatch:
    loop = asyncio.get_running_loop()
    if loop not in _watches:
        _watches[loop] = _AccessWatch()
    return _watches[loop]


async def _heard_from_others(access_watch: _AccessWatch) -> None:
    """Returns once this process hears the announcements of other processes (or after
    ``JOIN_WAIT_SECONDS`` if the channel layer does not answer; the backstop check covers the
    gap)."""
    if _cross_process_layer() is not None and not access_watch.joined.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(access_watch.joined.wait(), JOIN_WAIT_SECONDS)


@contextlib.asynccontextmanager
async def changes_heard() -> AsyncIterator[Callable[[], bool]]:
    """For a socket that opens: once this process hears every announced change of access (see
    ``watch``), gives a function that tells whether a change was announced since. A socket
    checked inside the block and then watched (``watch``, before the block ends) is checked
    again if so: no change can fall between its check and its watch."""
    access_watch = _loop_watch()
    access_watch.opening += 1
    access_watch.start()
    try:
        await _heard_from_others(access_watch)
        announced = access_watch.announced
        yield lambda: access_watch.announced != announced
    finally:
        access_watch.opening -= 1
        if not access_watch.sockets and not access_watch.opening:
            access_watch.wake.set()  # nothing left to watch: the watching task ends now


async def watch(
    handle: object, watched: Watched, on_refused: Callable[[], Awaitable[None]]
) -> None:
    """Check ``watched`` with every other open socket of this loop; call ``on_refused`` once
    when it no longer passes. ``handle`` identifies it for :func:`unwatch`.

    Returns once this process hears the announcements of other processes (as
    ``changes_heard``): a check of access made after this sees every change this socket could
    miss."""
    access_watch = _loop_watch()
    access_watch.add(handle, watched, on_refused)
    await _heard_from_others(access_watch)


def unwatch(handle: object) -> None:
    """Stop checking a socket (it closed)."""
    access_watch = _watches.get(asyncio.get_running_loop())
    if access_watch is not None:
        access_watch.sockets.pop(handle, None)
        if not access_watch.sockets:
            access_watch.wake.set()  # the last socket left: the watching task ends now


def _announce(scope: _Scope) -> None:
    """Wake the watchers of this process, then tell the other processes through the layer."""
    for loop, access_watch in list(_watches.items()):
        with contextlib.suppress(RuntimeError):  # a closed loop
            loop.call_soon_threadsafe(access_watch.poke, scope)
    layer = _cross_process_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(ACCESS_GROUP, scope.message())
    except Exception:  # the backstop check still closes the sockets concerned
        logger.warning("cannot announce a change of socket access", exc_info=True)


def access_changed(*, users: Iterable[int] = (), runs: Iterable[int] = (), everyone=False) -> None:
    """Have the open sockets of ``users`` and of ``runs`` (all of them with ``everyone``)
    checked again, in every process, once the current transaction commits."""
    scope = _Scope(everyone=everyone, users=set(users), runs=set(runs))
    transaction.on_commit(lambda: _announce(scope), robust=True)


def _session_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    user_id = instance.get_decoded().get(SESSION_KEY)  # {} when it cannot be decoded
    if user_id is not None and str(user_id).isdigit():
        access_changed(users=[int(user_id)])
    else:
        access_changed(everyone=True)


def _user_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    access_changed(users=[instance.pk])


def _owned_by_user_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    access_changed(users=[instance.user_id])


def _run_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    access_changed(runs=[instance.pk])


def connect_signals() -> None:
    """Announce every model change that can end a socket's access (``WebuiConfig.ready``)."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.models import Session

    from orchestrator.models import Membership, Run

    uid = "webui.socket_access"
    post_delete.connect(_session_deleted, sender=Session, dispatch_uid=f"{uid}.session")
    user_model = get_user_model()
    post_save.connect(_user_changed, sender=user_model, dispatch_uid=f"{uid}.user_saved")
    post_delete.connect(_user_changed, sender=user_model, dispatch_uid=f"{uid}.user_deleted")
    for model in (Token, Membership):
        name = model.__name__.lower()
        post_save.connect(_owned_by_user_changed, sender=model, dispatch_uid=f"{uid}.{name}_s")
        post_delete.connect(_owned_by_user_changed, sender=model, dispatch_uid=f"{uid}.{name}_d")
    post_delete.connect(_run_deleted, sender=Run, dispatch_uid=f"{uid}.run")
