"""Concurrency bounds on model calls: at most N calls to one worker (or one pool's conductor) at
once, the others waiting their turn instead of piling onto a server that answers one request
at a time.

Two kinds, behind ``engine.types.Slots``:

- ``LocalSlots``: one process's bound (every thread and event loop of it): the inline backend
  without Redis, where a single process executes every run.
- ``RedisSlots``: one bound held across every process that executes runs (web processes' inline
  runs and Celery workers, on any machine). A Redis sorted set per bound holds the current
  holders, each scored by when its hold expires; a holder renews its expiry while its call runs,
  and a process that dies stops renewing, so its slot frees itself after ``ttl`` seconds. Taking
  a slot is one Lua script (expired holders dropped, then a place taken if one is free, by the
  Redis server's clock); a waiter tries again after a short, growing pause.

``slots_for`` picks one: Redis when the deployment has it, else the process's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Final

from orchestrator.engine.types import Slots

__all__ = ["DEFAULT_TTL", "KEY_PREFIX", "LocalSlots", "RedisSlots", "slots_for"]

KEY_PREFIX: Final = "conductor:slots:"
DEFAULT_TTL: Final = 30.0
"""Seconds a holder's slot outlives its last renewal (a dead process's slot frees after it)."""
_FIRST_PAUSE: Final = 0.02
_MAX_PAUSE: Final = 0.5


class _Bound:
    """One local bound: the holders' count and the waiters in arrival order, each a future on
    its own event loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self.lock = threading.Lock()


_local: dict[str, _Bound] = {}
_local_lock = threading.Lock()


class LocalSlots:
    """At most ``limit`` holders at once in this process, first come first served."""

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError("a concurrency bound is at least 1")
        with _local_lock:
            bound = _local.get(name)
            if bound is None:
                bound = _local[name] = _Bound(limit)
        bound.limit = limit  # the latest setting wins (an admin changed it)
        self.name = name
        self.bound = bound

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[object]:
        await self._acquire()
        try:
            yield self
        finally:
            self._release()

    async def _acquire(self) -> None:
        bound = self.bound
        with bound.lock:
            if bound.active < bound.limit and not bound.waiters:
                bound.active += 1
                return
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            bound.waiters.append((loop, future))
        try:
            await future
        except asyncio.CancelledError:
            with bound.lock:
                try:
                    bound.waiters.remove((loop, future))
                except ValueError:
                    granted = True  # handed a slot as it was cancelled: give it on
                else:
                    granted = False
            if granted:
                self._release()
            raise

    def _release(self) -> None:
        bound = self.bound
        with bound.lock:
            if bound.waiters and bound.active <= bound.limit:
                loop, future = bound.waiters.popleft()
                loop.call_soon_threadsafe(self._grant, future)
                return  # the slot goes to the waiter as it is
            bound.active -= 1

    def _grant(self, future: asyncio.Future[None]) -> None:
        if future.cancelled():
            # Cancelled after it was handed the slot (its own cancel handler found it gone
            # from the waiters and gives the slot on); nothing to do here.
            return
        future.set_result(None)


# KEYS[1]: the bound's sorted set. ARGV: limit, holder token, ttl in milliseconds.
_ACQUIRE: Final = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
  return 1
end
return 0
"""
# KEYS[1]: the bound's sorted set. ARGV: holder token, ttl in milliseconds. 1 if still held.
_RENEW: Final = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', ms + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
  return 1
end
return 0
"""


class RedisSlots:
    """At most ``limit`` holders at once across every process using the Redis at ``url``."""

    def __init__(self, name: str, limit: int, *, url: str, ttl: float = DEFAULT_TTL) -> None:
        if limit < 1:
            raise ValueError("a concurrency bound is at least 1")
        self.key = KEY_PREFIX + name
        self.limit = limit
        self.url = url
        self.ttl = ttl

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[object]:
        import redis.asyncio as redis

        client: Any = redis.Redis.from_url(self.url)
        token = uuid.uuid4().hex
        ttl_ms = max(1, int(self.ttl * 1000))
        try:
            pause = _FIRST_PAUSE
            while not await client.eval(_ACQUIRE, 1, self.key, self.limit, token, ttl_ms):
                await asyncio.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, _MAX_PAUSE)
            renewing = asyncio.create_task(self._renew(client, token, ttl_ms))
            try:
                yield self
            finally:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
                await asyncio.shield(client.zrem(self.key, token))
        finally:
            await asyncio.shield(client.aclose())

    async def _renew(self, client: Any, token: str, ttl_ms: int) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            with contextlib.suppress(Exception):  # a blip: the next renewal may reach it
                await client.eval(_RENEW, 1, self.key, token, ttl_ms)


def slots_for(
    name: str, limit: int | None, *, redis_url: str = "", ttl: float = DEFAULT_TTL
) -> Slots | None:
    """The bound called ``name`` (``worker:<id>``, ``conductor:<pool id>``) of ``limit``
    concurrent calls: held in Redis when ``redis_url`` is given (every process shares it), in
    this process otherwise; None when ``limit`` is None (unbounded)."""
    if limit is None:
        return None
    if redis_url:
        return RedisSlots(name, limit, url=redis_url, ttl=ttl)
    return LocalSlots(name, limit)
