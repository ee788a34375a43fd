"""What a fresh interpreter imports: litellm (and what it pulls in) takes seconds to import, and
only a model call may load it. ``tests/test_imports.py`` checks it; ``bench/check_time.py``
measures it."""

from __future__ import annotations

import os

# The modules that are slow to import and belong to model calls only.
HEAVY = ("litellm", "openai", "tiktoken")

STARTUP = f"""
import json, os, sys
HEAVY = {HEAVY!r}
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
import django
django.setup()
from django.urls import get_resolver
from django.core.management import call_command

def walk(patterns):
    for pattern in patterns:  # importing every view module the URLconf names
        if hasattr(pattern, "url_patterns"):
            walk(pattern.url_patterns)
        else:
            pattern.callback

walk(get_resolver().url_patterns)
import webui.asgi
import orchestrator.tasks
from webui.celery import app
app.loader.import_default_modules()
call_command("check", verbosity=0)
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in HEAVY)))
"""


def embedded_env() -> dict[str, str]:
    """This environment without the production variables: the embedded defaults."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["DJANGO_SETTINGS_MODULE"] = "webui.settings"
    return env


def modules_imported(importtime_stderr: str) -> set[str]:
    """Every module named in the stderr of ``python -X importtime``.

    It writes "import time: self | cumulative | module" for each module imported.
    """
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
