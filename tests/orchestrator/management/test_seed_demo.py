"""``manage.py seed_demo``: idempotent, prints the login, never changes a password unasked."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command

from orchestrator.models import Membership, Pool, Project, Worker
from orchestrator.providers.simulator import DEMO_POOL_NAME, demo_pool

pytestmark = pytest.mark.django_db


def seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def printed_password(output: str) -> str | None:
    match = re.search(r"password: (\S+)$", output, re.MULTILINE)
    return match.group(1) if match else None


def test_creates_the_demo_and_prints_a_working_login(settings):
    output = seed()

    pool = Pool.objects.get(name=DEMO_POOL_NAME)
    assert pool.project.name == "Default" and pool.is_simulated
    assert list(pool.workers.values_list("name", flat=True)) == [
        w.name for w in demo_pool().workers
    ]
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser
    assert Membership.objects.get(user=admin, project=pool.project).role == "admin"
    assert f"{settings.CONDUCTOR_BASE_URL}/accounts/login/" in output
    password = printed_password(output)
    assert password and authenticate(username="admin", password=password) == admin


def test_running_twice_creates_no_duplicates_and_keeps_the_password():
    password = printed_password(seed())
    Worker.objects.update(description="edited")

    output = seed()

    assert Project.objects.count() == 1 and Pool.objects.count() == 1
    assert Worker.objects.count() == len(demo_pool().workers)
    assert not Worker.objects.filter(description="edited").exists()  # updated in place
    assert get_user_model().objects.count() == 1 and Membership.objects.count() == 1
    assert printed_password(output) is None and "--reset-password" in output
    assert authenticate(username="admin", password=password) is not None


def test_reset_password_prints_a_new_one():
    old = printed_password(seed())
    new = printed_password(seed("--reset-password"))

    assert new and new != old
    assert authenticate(username="admin", password=old) is None
    assert authenticate(username="admin", password=new) is not None


def test_make_demo_on_another_port_prints_links_to_that_port(monkeypatch, settings):
    """``make demo PORT=8801`` seeds with the served address: the login link and the CLI's
    command line it prints name port 8801, not 8000."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    plan = subprocess.run(
        ["make", "-n", "demo", "PORT=8801", "PY_STAMP=Makefile", "JS_STAMP=Makefile"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seed_line = next(line for line in plan.splitlines() if "seed_demo" in line)
    assert "CONDUCTOR_BASE_URL=http://127.0.0.1:8801 " in seed_line

    monkeypatch.setenv("CONDUCTOR_BASE_URL", "http://127.0.0.1:8801")
    settings.CONDUCTOR_BASE_URL = "http://127.0.0.1:8801"
    output = seed()
    assert "Log in at http://127.0.0.1:8801/accounts/login/" in output
    assert "CONDUCTOR_BASE_URL=http://127.0.0.1:8801 .venv/bin/python manage.py conduct" in output
    assert ":8000" not in output
