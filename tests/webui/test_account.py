"""The account page and /api/keys/: a key is shown once, stored hashed, revocable, and only
admins and reviewers of a project get one."""

from __future__ import annotations

import hashlib
import re

import pytest
from rest_framework.test import APIClient

from orchestrator.models import ApiKey
from orchestrator.services.api_keys import api_key_authenticate, api_key_create

pytestmark = pytest.mark.django_db


def test_creating_a_key_shows_it_once_and_stores_only_its_hash(client, project, reviewer, sim_pool):
    client.force_login(reviewer)
    response = client.post("/account/", {"project": project.pk, "name": "notebook"})
    assert response.status_code == 201
    assert (
        response["Cache-Control"].startswith("max-age=0") or "no-cache" in response["Cache-Control"]
    )
    html = response.content.decode()
    key = re.search(r'id="new-key"[^>]*value="(cs-[^"]+)"', html).group(1)
    stored = ApiKey.objects.get(user=reviewer)
    assert stored.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in str(ApiKey.objects.values().get())  # never stored as such
    assert stored.name == "notebook" and key.startswith(stored.prefix)
    assert sim_pool.api_slug in html  # the models it can use

    again = client.get("/account/").content.decode()
    assert key not in again and f"{stored.prefix}…" in again and "never" in again


def test_last_used_shows_and_a_revoked_key_stops_working(client, project, reviewer):
    client.force_login(reviewer)
    unused, _ = api_key_create(user=reviewer, project=project, name="unused")
    used, key = api_key_create(user=reviewer, project=project, name="used")
    assert api_key_authenticate(key=key).pk == used.pk
    used.refresh_from_db()
    assert used.last_used_at is not None and unused.last_used_at is None
    page = client.get("/account/").content.decode()
    assert page.count(">never<") == 1
    assert used.last_used_at.strftime("%Y-%m-%d %H:%M") in page

    response = client.post(f"/account/keys/{used.pk}/revoke/")
    assert response.status_code == 302
    assert api_key_authenticate(key=key) is None
    assert "revoked" in client.get("/account/").content.decode()


def test_a_viewer_cannot_create_keys_and_nobody_revokes_anothers(client, project, viewer, reviewer):
    client.force_login(viewer)
    page = client.get("/account/").content.decode()
    assert "you have none" in page
    response = client.post("/account/", {"project": project.pk})
    assert response.status_code == 400
    assert not ApiKey.objects.exists()

    theirs, _ = api_key_create(user=reviewer, project=project)
    assert client.post(f"/account/keys/{theirs.pk}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_the_api_lists_creates_and_revokes_keys_with_the_same_rules(
    project, reviewer, viewer, outsider
):
    api = APIClient()
    api.force_authenticate(reviewer)
    created = api.post("/api/keys/", {"project": project.slug, "name": "ci"}, format="json")
    assert created.status_code == 201
    key = created.json()["key"]
    assert api_key_authenticate(key=key).user == reviewer
    listed = api.get("/api/keys/").json()
    assert [k["name"] for k in listed] == ["ci"] and "key" not in listed[0]
    assert listed[0]["prefix"] == key[:10]
    revoked = api.post(f"/api/keys/{listed[0]['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert api_key_authenticate(key=key) is None

    api.force_authenticate(viewer)
    assert api.post("/api/keys/", {"project": project.slug}, format="json").status_code == 403
    api.force_authenticate(outsider)
    assert api.post("/api/keys/", {"project": project.slug}, format="json").status_code == 400
    assert api.post(f"/api/keys/{listed[0]['id']}/revoke/").status_code == 404


def test_a_superuser_sees_keys_in_the_admin_without_their_hash_and_can_revoke_them(
    client, project, reviewer, superuser
):
    api_key, key = api_key_create(user=reviewer, project=project, name="laptop")
    client.force_login(superuser)
    listing = client.get("/admin/orchestrator/apikey/").content.decode()
    assert "laptop" in listing and api_key.prefix in listing
    detail = client.get(f"/admin/orchestrator/apikey/{api_key.pk}/change/").content.decode()
    assert api_key.key_hash not in detail and key not in detail
    response = client.post(
        "/admin/orchestrator/apikey/",
        {"action": "revoke", "_selected_action": [api_key.pk]},
    )
    assert response.status_code == 302
    assert api_key_authenticate(key=key) is None
