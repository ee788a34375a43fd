"""Starting the site, its checks and its Celery worker never pays for importing litellm.

litellm takes seconds to import; only a model call may load it. Each test starts a fresh
interpreter, because this one has imported everything the suite touches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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


def python(*arguments: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter run with ``arguments`` from the repository root, on the defaults."""
    return subprocess.run(
        [sys.executable, *arguments],
        check=False,
        cwd=ROOT,
        env=embedded_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def modules_imported(importtime_stderr: str) -> set[str]:
    """Every module named in the stderr of ``python -X importtime``.

    It writes "import time: self | cumulative | module" for each module imported.
    """
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_settings_urls_asgi_tasks_and_check_do_not_import_litellm():
    done = python("-c", STARTUP)
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert imported == [], f"startup imported {imported}"


def test_manage_py_check_does_not_import_litellm():
    done = python("-X", "importtime", "manage.py", "check")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "System check identified no issues" in done.stdout
    imported = modules_imported(done.stderr)
    assert "django" in imported  # the listing is really there
    heavy = sorted(name for name in imported if name.split(".")[0] in HEAVY)
    assert heavy == [], f"manage.py check imported {heavy}"
