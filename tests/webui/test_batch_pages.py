"""Batch replay pages through Django's test client: the runs list's "Replay these…" for admins,
the override form with the list's filters, the batch page and the batches list, who sees what."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from orchestrator import wire
from orchestrator.models import Membership, Run
from orchestrator.services.batches import batch_create
from tests.factories import make_member, make_pool, make_run, make_step, make_worker

pytestmark = pytest.mark.django_db

WEAK_TO_STRONG = {"kind": "worker", "from": "Weak", "to": "Strong"}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin(project):
    return make_member(project=project, role=Membership.Role.ADMIN)


@pytest.fixture
def failed(project):
    pool = make_pool(project=project, workers=0)
    make_worker(pool=pool, name="Weak", position=0)
    make_worker(pool=pool, name="Strong", position=1)
    runs = [make_run(pool=pool, status=Run.Status.FAILED) for _ in range(2)]
    for run in runs:
        make_step(run=run, worker_name="Weak")
    make_run(pool=pool, status=Run.Status.SUCCEEDED)
    return runs


@pytest.fixture
def batch(project, admin, failed):
    return batch_create(
        project=project,
        actor=admin,
        filters={"status": "failed"},
        override=WEAK_TO_STRONG,
        enqueue=False,
    )


def test_admins_get_replay_these_with_the_lists_filters(admin, viewer, failed):
    page = client_for(admin).get("/?status=failed&worker=Weak").content.decode()
    link = re.search(r'href="([^"]+)" id="batch-replay-link"', page)
    assert link and link.group(1) == "/batches/new/?status=failed&amp;worker=Weak"

    assert "batch-replay-link" not in client_for(viewer).get("/?status=failed").content.decode()


def test_the_form_counts_the_matching_runs_and_carries_the_filters(admin, project, failed):
    response = client_for(admin).get("/batches/new/?status=failed&worker=Weak")

    assert response.status_code == 200
    page = response.content.decode()
    assert "2 runs match these filters." in page
    filters = re.search(r'<script id="batch-filters" type="application/json">(.*?)</script>', page)
    assert json.loads(filters.group(1)) == {"status": "failed", "worker": "Weak"}
    assert f'<option value="{project.pk}">{project.name}</option>' in page
    assert 'value="Weak"' in page  # the worker filter is the worker to replace


def test_the_form_is_refused_to_members_who_are_not_admins(viewer, failed):
    response = client_for(viewer).get("/batches/new/?status=failed")

    assert response.status_code == 403
    assert "needs the admin role" in response.content.decode()


def test_the_batch_page_embeds_its_state_for_members_only(batch, viewer, outsider):
    response = client_for(viewer).get(f"/batches/{batch.pk}/")

    assert response.status_code == 200
    page = response.content.decode()
    state = json.loads(
        re.search(r'<script id="batch-state" type="application/json">(.*?)</script>', page).group(1)
    )
    assert wire.check(state, wire.BatchSummary) == []
    assert state["progress"]["total"] == 2 and state["status"] == "creating"
    assert client_for(outsider).get(f"/batches/{batch.pk}/").status_code == 404


def test_the_batches_list_shows_the_batches_of_ones_projects(batch, viewer, outsider):
    page = client_for(viewer).get("/batches/").content.decode()
    assert f'data-batch-id="{batch.pk}"' in page
    assert "Worker “Weak” → “Strong”" in page
    assert "0 / 2" in page

    assert (
        f'data-batch-id="{batch.pk}"' not in client_for(outsider).get("/batches/").content.decode()
    )
