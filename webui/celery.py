"""The Celery application. Tasks live in orchestrator/tasks.py and take ids only."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")

app = Celery("conductor_studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["orchestrator"])
