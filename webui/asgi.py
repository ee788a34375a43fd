"""The ASGI entry point: HTTP through Django, websockets through Channels."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
django_asgi_app = get_asgi_application()

# Imported only now: they need the app registry that get_asgi_application() filled.
from asgiref.sync import ThreadSensitiveContext
from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from webui.routing import websocket_urlpatterns

# The embedded server serves its own static files; a production deployment may put a
# web server in front and set CONDUCTOR_SERVE_STATIC=0.
serve_static = os.environ.get("CONDUCTOR_SERVE_STATIC", "1") != "0"
http_app = ASGIStaticFilesHandler(django_asgi_app) if serve_static else django_asgi_app


class ThreadPerConnection:
    """Runs each websocket's database work on a thread of its own, as Django does for each HTTP
    request. Without it every consumer of the process shares one thread, and under load the
    websockets' handshakes queue behind each other's queries (then time out)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        async with ThreadSensitiveContext():
            await self.app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": ThreadPerConnection(
            AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)

# Inline runs that a stopped server left unfinished resume once this server's loop runs.
from webui.startup import with_server_startup

application = with_server_startup(application)

# What is loaded by now (Django, the apps, the libraries: over 100,000 objects) lives as long as
# the process. Kept out of the collector's sight, it is not walked again by every full
# collection, which otherwise pauses the loop, and every socket's live events with it, for tens
# to hundreds of milliseconds on a busy machine.
gc.freeze()
