"""Work a serving process starts with its event loop: resuming interrupted inline runs.

Daphne (the embedded server) sends no ASGI lifespan events, so the work is handed to its
reactor, which runs it once the loop serves; servers that send lifespan events (uvicorn,
hypercorn) start it on ``lifespan.startup``. Celery workers and management commands other than
``runserver`` never import the ASGI application, so they never start it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings


def with_server_startup(application: Any) -> Any:
    """``application``, arranged to start the inline recovery when its server's loop runs."""
    if settings.CONDUCTOR_EXECUTION != "inline":
        return application
    from twisted.internet import reactor  # daphne.server installed the asyncio reactor

    # Startup triggers fire before the reactor runs its asyncio loop; a call scheduled from one
    # runs on that loop once it runs.
    reactor.callWhenRunning(reactor.callLater, 0, _start_recovery)

    async def application_with_startup(scope, receive, send):
        if scope["type"] != "lifespan":
            return await application(scope, receive, send)
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                _start_recovery()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    return application_with_startup


def _start_recovery() -> None:
    from orchestrator.services.recovery import inline_recovery_start

    inline_recovery_start()
