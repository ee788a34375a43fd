"""Project membership: project admins invite existing users, change roles, remove members.

Every change is audited. A project always keeps an admin: the last one can be neither demoted
nor removed.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from orchestrator.models import Membership, Project
from orchestrator.services.audit import audit_record

ROLES = tuple(Membership.Role.values)


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValidationError({"role": [f"Choose one of: {', '.join(ROLES)}."]})


def _other_admins(membership: Membership) -> bool:
    return (
        Membership.objects.select_for_update()
        .filter(project_id=membership.project_id, role=Membership.Role.ADMIN)
        .exclude(pk=membership.pk)
        .exists()
    )


@transaction.atomic
def membership_invite(*, project: Project, actor: Any, username: str, role: str) -> Membership:
    """Make the existing user ``username`` a member of ``project`` with ``role``."""
    _check_role(role)
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationError({"username": ["No active user has this username."]})
    if Membership.objects.filter(project=project, user=user).exists():
        raise ValidationError({"username": ["Already a member of this project."]})
    membership = Membership.objects.create(project=project, user=user, role=role)
    audit_record(
        project=project,
        actor=actor,
        action="membership.create",
        target=membership,
        after={"user": user.get_username(), "role": role},
    )
    return membership


@transaction.atomic
def membership_change_role(*, membership: Membership, actor: Any, role: str) -> Membership:
    """Give a member another role; the project's last admin keeps theirs."""
    _check_role(role)
    membership = Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
    if membership.role == role:
        return membership
    if membership.role == Membership.Role.ADMIN and not _other_admins(membership):
        raise ValidationError({"role": ["The project's last admin stays an admin."]})
    before = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(
        project=membership.project_id,
        actor=actor,
        action="membership.role",
        target=membership,
        before={"user": membership.user.get_username(), "role": before},
        after={"user": membership.user.get_username(), "role": role},
    )
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor: Any) -> None:
    """Take a member out of the project (their runs stay); never the last admin."""
    membership = Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
    if membership.role == Membership.Role.ADMIN and not _other_admins(membership):
        raise ValidationError({"non_field_errors": ["The project's last admin cannot be removed."]})
    audit_record(
        project=membership.project_id,
        actor=actor,
        action="membership.delete",
        target=membership,
        before={"user": membership.user.get_username(), "role": membership.role},
    )
    membership.delete()
