"""Starting the site, its checks and its Celery worker never pays for importing litellm.

litellm takes seconds to import; only a model call may load it. Each test starts a fresh
interpreter, because this one has imported everything the suite touches.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.imports import HEAVY, STARTUP, embedded_env, modules_imported

ROOT = Path(__file__).resolve().parent.parent


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
