"""The audit log in the Django admin: superusers read it; nobody adds, edits or deletes it there."""

import pytest

from orchestrator.services.audit import audit_record
from tests.factories import make_pool, make_project, make_user

pytestmark = pytest.mark.django_db


def test_a_superuser_reads_the_audit_log_but_cannot_change_or_delete_it(client):
    pool = make_pool(project=make_project())
    actor = make_user(username="ada")
    entry = audit_record(
        project=pool.project, actor=actor, action="pool.update", target=pool, after={"x": 1}
    )
    client.force_login(make_user(is_superuser=True, is_staff=True))

    listing = client.get("/admin/orchestrator/auditentry/")
    assert listing.status_code == 200
    assert "pool.update" in listing.content.decode()
    assert client.get("/admin/orchestrator/auditentry/add/").status_code == 403
    assert client.post(f"/admin/orchestrator/auditentry/{entry.pk}/delete/").status_code == 403
    page = client.get(f"/admin/orchestrator/auditentry/{entry.pk}/change/")
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
