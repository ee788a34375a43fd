"""``manage.py api_key``: create, list and revoke keys for the OpenAI-compatible endpoint."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from orchestrator.models import ApiKey, Project
from orchestrator.selectors import api_keys_of
from orchestrator.services.api_keys import api_key_create, api_key_revoke


class Command(BaseCommand):
    help = (
        "Keys for /v1 (the OpenAI-compatible endpoint). `create USERNAME --project SLUG` prints "
        "the new key alone on its last line; it is shown only this once."
    )

    def add_arguments(self, parser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Create a key for a user and a project.")
        create.add_argument("username")
        create.add_argument("--project", required=True, help="The project's slug.")
        create.add_argument("--name", default="", help="A name to tell the key apart.")
        listing = actions.add_parser("list", help="A user's keys (prefixes only).")
        listing.add_argument("username")
        revoke = actions.add_parser("revoke", help="Revoke a key by its id.")
        revoke.add_argument("username")
        revoke.add_argument("key_id", type=int)

    def handle(self, *args: Any, action: str, username: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        if action == "create":
            project = Project.objects.filter(slug=options["project"]).first()
            if project is None:
                raise CommandError(f"No project with slug {options['project']!r}.")
            try:
                api_key, key = api_key_create(user=user, project=project, name=options["name"])
            except (PermissionDenied, ValidationError) as error:
                raise CommandError(" ".join(getattr(error, "messages", [str(error)]))) from None
            self.stdout.write(
                f"Created key {api_key.pk} ({api_key.prefix}…) for {username} in project "
                f"{project.slug}. Keep it now: it is not shown again."
            )
            self.stdout.write(key)
        elif action == "list":
            for api_key in api_keys_of(user=user):
                state = "revoked" if api_key.revoked_at else "active"
                used = api_key.last_used_at.isoformat() if api_key.last_used_at else "never"
                self.stdout.write(
                    f"{api_key.pk}\t{api_key.prefix}…\t{api_key.project.slug}\t{state}\t"
                    f"last used {used}\t{api_key.name}"
                )
        else:
            try:
                api_key = api_key_revoke(user=user, key_id=options["key_id"])
            except ApiKey.DoesNotExist:
                raise CommandError(f"{username} has no key {options['key_id']}.") from None
            self.stdout.write(f"Revoked key {api_key.pk} ({api_key.prefix}…).")
