"""The ASGI entry point: HTTP through Django, websockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
django_asgi_app = get_asgi_application()

# Imported only now: they need the app registry that get_asgi_application() filled.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from webui.routing import websocket_urlpatterns  # noqa: E402

# The embedded server serves its own static files; a production deployment may put a
# web server in front and set CONDUCTOR_SERVE_STATIC=0.
serve_static = os.environ.get("CONDUCTOR_SERVE_STATIC", "1") != "0"
http_app = ASGIStaticFilesHandler(django_asgi_app) if serve_static else django_asgi_app

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

# Inline runs that a stopped server left unfinished resume once this server's loop runs.
from webui.startup import with_server_startup  # noqa: E402

application = with_server_startup(application)
