"""Accounts: the demo's administrator."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction


def generate_password() -> str:
    """A random password that is easy to copy (URL-safe characters, about 96 bits)."""
    return secrets.token_urlsafe(12)


@transaction.atomic
def superuser_ensure(*, username: str, reset_password: bool = False) -> tuple[Any, str | None]:
    """The superuser ``username``, created if missing. Returns the user and the new password when
    one was set (on creation or with ``reset_password``), else None: an existing password is
    never changed unasked."""
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is None:
        password = generate_password()
        user = users.objects.create_superuser(username=username, email="", password=password)
        return user, password
    changed = []
    if not (user.is_superuser and user.is_staff and user.is_active):
        user.is_superuser = user.is_staff = user.is_active = True
        changed += ["is_superuser", "is_staff", "is_active"]
    password = None
    if reset_password:
        password = generate_password()
        user.set_password(password)
        changed.append("password")
    if changed:
        user.save(update_fields=changed)
    return user, password
