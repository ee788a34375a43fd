"""Django's ASGI handler, with the middleware and a synchronous view run in one hop to the
request's thread.

Django's ASGI handler loads the middleware for async use: a synchronous middleware is called
through ``sync_to_async`` and an async-capable one on the event loop, so a request to a
synchronous view crossed between the loop and its thread about five times (into the thread for
the synchronous middleware, back to the loop for the async-capable ones below them, into the
thread again for each of their synchronous hooks, and again for the view). Each crossing costs
the loop and the thread a wake-up under the interpreter lock. Here a request whose view is
synchronous (every page and API view) runs the middleware as loaded for synchronous use, as a
WSGI server runs them, in one call on the request's thread; a request to an async view (the
``/v1`` endpoints) takes Django's async path as before. Same middleware, same order, same
hooks: only where they run changes.
"""

from __future__ import annotations

import functools

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponseBase
from django.urls import Resolver404, resolve


@functools.lru_cache(maxsize=4096)
def _view_is_async(path_info: str) -> bool:
    """Whether the view of ``path_info`` is a coroutine function (paths that match no view go
    through the middleware as synchronous ones, and get the 404 they would)."""
    try:
        view = resolve(path_info).func
    except Resolver404:
        return False
    return iscoroutinefunction(view)


class OneHopASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose requests to synchronous views run every middleware and the view in
    one ``sync_to_async`` call (on the request's thread, as Django's own calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.synchronous = BaseHandler()
        self.synchronous.load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        if _view_is_async(request.path_info):
            return await super().get_response_async(request)
        return await sync_to_async(self.synchronous.get_response)(request)
