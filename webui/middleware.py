"""A database that is busy answers 503 with Retry-After, never 500.

Busy means: no pooled connection came free within CONDUCTOR_DB_POOL_TIMEOUT (psycopg_pool's
PoolTimeout, which Django raises as an OperationalError), or PostgreSQL itself refused a
connection because it has too many clients or is starting up. The client is told to try again;
the API answers JSON like its other errors, pages a plain page.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
BUSY_MESSAGE = "The service is busy. Try again in a few seconds."
# too_many_connections, cannot_connect_now (starting up, shutting down, in recovery)
_BUSY_SQLSTATES = {"53300", "57P03"}
_BUSY_TEXTS = ("too many clients", "remaining connection slots are reserved")


def is_database_busy(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the database has no connection for us now."""
    import psycopg
    from psycopg_pool import PoolTimeout

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PoolTimeout):
            return True
        if isinstance(current, (DatabaseError, psycopg.Error)):
            if getattr(current, "sqlstate", None) in _BUSY_SQLSTATES:
                return True
            text = str(current).lower()
            if any(busy in text for busy in _BUSY_TEXTS):
                return True
        current = current.__cause__ or current.__context__
    return False


def busy_response(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: JSON under /api/, a plain page elsewhere (no database needed)."""
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": BUSY_MESSAGE}, status=503)
    else:
        page = render_to_string(
            "503.html", {"message": BUSY_MESSAGE, "retry_after": RETRY_AFTER_SECONDS}
        )
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseBusyMiddleware:
    """Turns a busy database met by a view into a 503 with Retry-After."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_database_busy(exception):
            return None
        log.warning("database busy: 503 for %s %s (%s)", request.method, request.path, exception)
        return busy_response(request)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a busy database met outside a view (in a middleware) is a 503 as well."""
    error = sys.exc_info()[1]
    if error is not None and is_database_busy(error):
        return busy_response(request)
    return defaults.server_error(request)
