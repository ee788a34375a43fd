"""Membership changes: invite existing users, change roles, remove; a project keeps an admin."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from orchestrator.models import AuditEntry, Membership
from orchestrator.services.members import (
    membership_change_role,
    membership_invite,
    membership_remove,
)
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def test_an_existing_user_is_invited_with_a_role(project, project_admin):
    make_user(username="newcomer")
    membership = membership_invite(
        project=project, actor=project_admin, username="newcomer", role="reviewer"
    )
    assert membership.role == "reviewer"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.after) == (
        "membership.create",
        {"user": "newcomer", "role": "reviewer"},
    )


@pytest.mark.parametrize(
    ("username", "role", "field"),
    [("nobody-here", "viewer", "username"), ("vera-viewer", "viewer", "username"),
     ("newcomer", "owner", "role")],
)  # fmt: skip
def test_bad_invitations_are_refused(project, project_admin, viewer, username, role, field):
    make_user(username="newcomer")
    with pytest.raises(ValidationError) as refused:
        membership_invite(project=project, actor=project_admin, username=username, role=role)
    assert field in refused.value.message_dict
    assert not AuditEntry.objects.exists()


def test_a_role_change_is_audited_before_and_after(project, project_admin, viewer):
    membership = Membership.objects.get(user=viewer)
    membership_change_role(membership=membership, actor=project_admin, role="reviewer")
    entry = AuditEntry.objects.get()
    assert (entry.before["role"], entry.after["role"]) == ("viewer", "reviewer")


def test_the_last_admin_can_be_neither_demoted_nor_removed(project, project_admin):
    membership = Membership.objects.get(user=project_admin)
    with pytest.raises(ValidationError):
        membership_change_role(membership=membership, actor=project_admin, role="viewer")
    with pytest.raises(ValidationError):
        membership_remove(membership=membership, actor=project_admin)
    second = make_user(username="second-admin")
    Membership.objects.create(project=project, user=second, role="admin")
    membership_remove(membership=membership, actor=second)
    assert not Membership.objects.filter(user=project_admin).exists()
    assert AuditEntry.objects.get().before == {"user": "ada-admin", "role": "admin"}
