"""``manage.py seed_demo``: the offline demo pool and an administrator, idempotently."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from orchestrator.models import Membership
from orchestrator.providers.simulator import demo_pool
from orchestrator.services.accounts import superuser_ensure
from orchestrator.services.pools import membership_set, pool_sync_from_data, project_get_or_create

PROJECT_NAME = "Default"
ADMIN_USERNAME = "admin"


class Command(BaseCommand):
    help = (
        'Create (or update) the project "Default", the simulated demo pool and the "admin" '
        "account, and print how to log in. Safe to run again."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="Give the admin account a new generated password and print it.",
        )

    def handle(self, *args: Any, reset_password: bool = False, **options: Any) -> None:
        project = project_get_or_create(name=PROJECT_NAME)
        pool, created = pool_sync_from_data(project=project, data=demo_pool())
        verb = "Created" if created else "Updated"
        workers = pool.workers.filter(enabled=True).count()
        self.stdout.write(
            f'{verb} pool "{pool.name}" ({workers} simulated workers) in project "{project.name}".'
        )

        user, password = superuser_ensure(username=ADMIN_USERNAME, reset_password=reset_password)
        membership_set(project=project, user=user, role=Membership.Role.ADMIN)

        login_url = settings.CONDUCTOR_BASE_URL.rstrip("/") + settings.LOGIN_URL
        self.stdout.write(f"Log in at {login_url}")
        self.stdout.write(f"  user:     {user.get_username()}")
        if password:
            self.stdout.write(f"  password: {password}")
        else:
            self.stdout.write(
                "  password: unchanged (the account already exists; "
                "`python manage.py seed_demo --reset-password` sets and prints a new one)"
            )
        # A shell of its own has the default address unless told this one (make demo PORT=...).
        base_url = settings.CONDUCTOR_BASE_URL.rstrip("/")
        prefix = f"CONDUCTOR_BASE_URL={base_url} " if os.environ.get("CONDUCTOR_BASE_URL") else ""
        self.stdout.write(
            "From the shell (its links point at the same address): "
            f'{prefix}.venv/bin/python manage.py conduct "What is 6 times 7?"'
        )
