"""`manage.py check --deploy` in the production configuration, with HTTPS settings from the
environment (README, Production)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DATABASE_URL": "postgres://conductor@db.invalid:5432/conductor",  # check does not connect
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
    "DJANGO_ALLOWED_HOSTS": "conductor.example.org",
}
HTTPS_ONE_BY_ONE = {
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
    "DJANGO_SESSION_COOKIE_SECURE": "1",
    "DJANGO_CSRF_COOKIE_SECURE": "1",
}


def check_deploy(extra: dict[str, str]) -> subprocess.CompletedProcess:
    ignored = ("DJANGO_", "DATABASE_URL", "REDIS_URL", "CONDUCTOR_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ignored)}
    env.update(PRODUCTION, **extra)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "https", [{"DJANGO_HTTPS": "1"}, HTTPS_ONE_BY_ONE], ids=["one-switch", "one-by-one"]
)
def test_check_deploy_is_clean_with_the_https_settings(https):
    result = check_deploy(https)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_without_them_check_deploy_names_what_is_missing():
    result = check_deploy({})
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout
