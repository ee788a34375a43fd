from django.apps import AppConfig


class WebuiConfig(AppConfig):
    name = "webui"

    def ready(self) -> None:
        from webui import socket_access

        socket_access.connect_signals()
