"""Login throttling (django-axes): wrong passwords lock the username on that address for a while."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.test import Client

from tests.factories import make_user

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
PASSWORD = "the-right-password-42"
REPO_ROOT = Path(__file__).resolve().parents[2]


def log_in(client: Client, password: str, address: str = "127.0.0.1"):
    return client.post(LOGIN, {"username": "ada", "password": password}, REMOTE_ADDR=address)


def is_logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@pytest.fixture
def ada(db):
    return make_user(username="ada", password=PASSWORD)


def test_after_the_limit_even_the_right_password_fails_until_the_cool_off(ada, settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = dt.timedelta(seconds=1.5)
    client = Client()
    wrong = [log_in(client, "wrong") for _ in range(3)]
    assert [r.status_code for r in wrong[:2]] == [200, 200]  # the form again, with its error
    assert wrong[2].status_code == 429

    locked = log_in(client, PASSWORD)
    assert locked.status_code == 429 and not is_logged_in(client)
    assert "Too many attempts" in locked.content.decode()

    # Another address is not locked out for this username.
    elsewhere = Client()
    assert log_in(elsewhere, PASSWORD, address="10.9.8.7").status_code == 302
    assert is_logged_in(elsewhere)

    time.sleep(1.6)
    assert log_in(client, PASSWORD).status_code == 302 and is_logged_in(client)


def test_a_success_before_the_limit_starts_the_count_again(ada, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    for _ in range(2):
        log_in(client, "wrong")
    assert log_in(client, PASSWORD).status_code == 302
    client.logout()
    for _ in range(2):
        log_in(client, "wrong")
    assert log_in(client, PASSWORD).status_code == 302


def test_the_admin_login_is_throttled_too(ada, settings):
    settings.AXES_FAILURE_LIMIT = 2
    client = Client()
    for _ in range(2):
        client.post("/admin/login/", {"username": "ada", "password": "wrong"})
    response = client.post("/admin/login/", {"username": "ada", "password": PASSWORD})
    assert response.status_code == 429


def test_the_limit_and_cool_off_come_from_the_environment():
    env = {
        **os.environ,
        "CONDUCTOR_LOGIN_FAILURE_LIMIT": "7",
        "CONDUCTOR_LOGIN_COOLOFF_SECONDS": "120",
        "CONDUCTOR_LOGIN_LOCKOUT": "ip_address,username+user_agent",
    }
    code = (
        "from django.conf import settings as s; "
        "print(s.AXES_FAILURE_LIMIT, s.AXES_COOLOFF_TIME.total_seconds(), s.AXES_LOCKOUT_PARAMETERS)"
    )
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    assert shown == "7 120.0 [['ip_address'], ['username', 'user_agent']]"
