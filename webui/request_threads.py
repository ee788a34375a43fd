"""Each HTTP request runs its synchronous code (middleware, view, queries) on one thread of its
own, as Django's ASGI handler arranges, but on a thread kept from earlier requests instead of one
started for the request and joined after it.

Django enters a ``ThreadSensitiveContext`` for each request, which starts a thread at the
request's first synchronous call and another one to join it at the end. Under load that was
thousands of threads a minute, and each start held the event loop up (a new thread takes the
interpreter lock before ``Thread.start()`` returns), delaying every request and socket the loop
carries. asgiref lets the caller own a context's executor: a request borrows an idle one-thread
executor and gives it back when it ends and its thread is free. Django's own context, entered
inside, then adds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext

# Idle threads kept for the next requests; past that, a thread ends with its request.
KEEP_IDLE = 64


class ReusedRequestThreads:
    """ASGI middleware: the HTTP requests of ``app`` run their synchronous code on reused
    threads, one request at a time on each."""

    def __init__(self, app: Any, *, keep_idle: int = KEEP_IDLE) -> None:
        self.app = app
        self.keep_idle = keep_idle
        self.idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.idle:
            executor = self.idle.pop()
        else:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            # Idle again once its thread is free: a call the request left running (a client
            # that went away, a request the server cancelled) must not hold the next one up.
            loop = asyncio.get_running_loop()
            executor.submit(_nothing).add_done_callback(
                lambda _: _call_soon(loop, self._give_back, executor)
            )

    def _give_back(self, executor: ThreadPoolExecutor) -> None:
        if len(self.idle) < self.keep_idle:
            self.idle.append(executor)
        else:
            executor.shutdown(wait=False)


def _nothing() -> None:
    pass


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    """``callback(*args)`` on ``loop``, from any thread; nothing once the loop is closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
