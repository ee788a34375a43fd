import pytest
from django.db import transaction

from orchestrator.models import AuditEntry
from orchestrator.services.audit import audit_record
from tests.factories import make_pool, make_project, make_user

pytestmark = pytest.mark.django_db


def test_an_entry_names_who_what_and_the_change():
    pool = make_pool(project=make_project())
    admin = make_user(username="ada")
    entry = audit_record(
        project=pool.project,
        actor=admin,
        action="pool.update",
        target=pool,
        before={"max_steps": 5},
        after={"max_steps": 8},
    )
    stored = AuditEntry.objects.get(pk=entry.pk)
    assert (stored.actor_name, stored.action, stored.target_type, stored.target_id) == (
        "ada",
        "pool.update",
        "pool",
        pool.pk,
    )
    assert (stored.before, stored.after) == ({"max_steps": 5}, {"max_steps": 8})
    assert stored.project_id == pool.project_id


def test_an_entry_is_rolled_back_with_the_action_it_records():
    pool = make_pool(project=make_project())
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(
            project=pool.project, actor=make_user(username="bo"), action="pool.update", target=pool
        )
        raise RuntimeError("the action failed")
    assert not AuditEntry.objects.exists()
