"""ReusedRequestThreads: requests run on kept threads, never behind a call left running."""

from __future__ import annotations

import asyncio
import threading

from asgiref.sync import sync_to_async

from webui.request_threads import ReusedRequestThreads


async def test_a_request_is_not_served_behind_a_cancelled_one_still_running_its_view():
    started, release = threading.Event(), threading.Event()
    served_on: list[int] = []

    def blocking_view() -> None:
        started.set()
        release.wait(30)

    def quick_view() -> None:
        served_on.append(threading.get_ident())

    async def app(scope, receive, send) -> None:
        await sync_to_async(blocking_view if scope["path"] == "/slow" else quick_view)()

    threads = ReusedRequestThreads(app)
    slow = asyncio.create_task(threads({"type": "http", "path": "/slow"}, None, None))
    try:
        await asyncio.to_thread(started.wait, 5)
        slow.cancel()  # as the server does past its application_close_timeout
        await asyncio.gather(slow, return_exceptions=True)

        await asyncio.wait_for(threads({"type": "http", "path": "/quick"}, None, None), 5)
        assert len(served_on) == 1
    finally:
        release.set()
