"""API keys for the OpenAI-compatible endpoint: create (the key is returned once), revoke, and
recognise a key a client sends.

A key is ``cs-`` and 43 random URL-safe characters (256 bits); only its SHA-256 is stored, so a
fast hash is enough (nothing to guess from a key of that strength). The key itself never enters
the database, a log or any response but the one that creates it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from orchestrator.models import ApiKey, Project
from orchestrator.selectors import user_can_run

KEY_PREFIX = "cs-"
SHOWN_PREFIX_LENGTH = 10
# A key's last-used time is written at most this often (a busy key would otherwise write on
# every request).
LAST_USED_RESOLUTION = timedelta(seconds=30)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@transaction.atomic
def api_key_create(*, user: Any, project: Project, name: str = "") -> tuple[ApiKey, str]:
    """A new key of ``user`` for ``project``'s pools; returns the stored key and the key itself,
    which is never available again.

    Only admins and reviewers of the project (who may start runs) get keys (PermissionDenied).
    """
    if not user_can_run(user=user, project=project):
        raise PermissionDenied("Only admins and reviewers of a project may create API keys for it.")
    name = (name or "").strip()
    if len(name) > 100:
        raise ValidationError({"name": ["Keep the name to 100 characters."]})
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        user=user,
        project=project,
        name=name,
        prefix=key[:SHOWN_PREFIX_LENGTH],
        key_hash=hash_key(key),
    )
    return api_key, key


def api_key_revoke(*, user: Any, key_id: int) -> ApiKey:
    """Revoke one of ``user``'s keys (at once: the next request with it is refused). Revoking a
    revoked key changes nothing. Raises ApiKey.DoesNotExist for a key that is not theirs."""
    api_key = ApiKey.objects.get(pk=key_id, user_id=user.pk)
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


def api_key_authenticate(*, key: str) -> ApiKey | None:
    """The active key a client sent, with its user and project, its last-used time brought up
    to date; None for an unknown, revoked or malformed key, or one whose user is inactive."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    digest = hash_key(key)
    api_key = (
        ApiKey.objects.select_related("user", "project")
        .filter(key_hash=digest, revoked_at__isnull=True)
        .first()
    )
    if api_key is None or not hmac.compare_digest(api_key.key_hash, digest):
        return None
    if not api_key.user.is_active:
        return None
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at >= LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key
