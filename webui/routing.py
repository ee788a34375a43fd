"""Websocket routes."""

from django.urls import path

from webui.consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi(), name="ws-run"),
]
