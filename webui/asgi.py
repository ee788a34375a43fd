"""The ASGI entry point: HTTP through Django, websockets through Channels."""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does before making its handler

# Imported only now: they need the app registry that django.setup() filled.
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from webui.handler import OneHopASGIHandler
from webui.request_threads import ReusedRequestThreads
from webui.routing import websocket_urlpatterns

django_asgi_app = OneHopASGIHandler()
# The embedded server serves its own static files; a production deployment may put a
# web server in front and set CONDUCTOR_SERVE_STATIC=0.
serve_static = os.environ.get("CONDUCTOR_SERVE_STATIC", "1") != "0"
http_app = ASGIStaticFilesHandler(django_asgi_app) if serve_static else django_asgi_app

application = ProtocolTypeRouter(
    {
        "http": ReusedRequestThreads(http_app),
        # The run socket reads its session or token itself, with the run, in one database round
        # trip on threads of its own (webui.socket_access): no session middleware here.
        "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
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
