"""The live runs list: what changed since an event id, through the API and the page's endpoint."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator import events, selectors, wire
from orchestrator.models import Run
from orchestrator.services import execution
from orchestrator.services.runs import run_cancel, run_create
from tests.factories import make_pool, make_project, make_run

CHANGES_URL = reverse("api-run-changes")


@pytest.fixture(autouse=True)
def not_enqueued(monkeypatch):
    monkeypatch.setattr(execution, "run_enqueue", lambda *, run_id: None)


def changes(client, after, **filters):
    response = client.get(CHANGES_URL, {"after": after, **filters})
    assert response.status_code == 200, response.json()
    return response.json()


def test_a_new_run_and_its_end_are_changes(api_as, sim_pool, reviewer):
    client = api_as(reviewer)
    start = changes(client, 0)["cursor"]
    run = run_create(pool=sim_pool, input="What is love?", created_by=reviewer)
    body = changes(client, start)
    assert body["changed"] == [run.pk]
    assert [item["id"] for item in body["runs"]] == [run.pk]
    assert body["runs"][0]["status"] == "queued" and body["runs"][0]["verdict"] == "pending"
    assert body["cursor"] > start

    run_cancel(run_id=run.pk)
    later = changes(client, body["cursor"])
    assert later["changed"] == [run.pk] and later["runs"][0]["verdict"] == "cancelled"
    # Nothing new: nothing changed, the cursor stays.
    quiet = changes(client, later["cursor"] + wire_lookback())
    assert quiet["changed"] == [] and quiet["cursor"] == later["cursor"]


def wire_lookback() -> int:
    return selectors.LIST_CHANGES_LOOKBACK


def test_filters_split_changes_into_matching_and_gone(api_as, sim_pool, reviewer):
    client = api_as(reviewer)
    start = changes(client, 0)["cursor"]
    run = run_create(pool=sim_pool, input="What is love?", created_by=reviewer)
    assert changes(client, start, status="queued")["changed"] == [run.pk]
    run_cancel(run_id=run.pk)
    body = changes(client, start, status="queued")
    assert body["changed"] == [] and body["gone"] == [run.pk]


def test_runs_of_other_projects_are_not_told(api_as, reviewer, sim_pool):
    elsewhere = make_pool(project=make_project())
    start = changes(api_as(reviewer), 0)["cursor"]
    other = make_run(pool=elsewhere)
    events.publish(other.pk, wire.RUN_STATUS, {"status": Run.Status.QUEUED.value})
    body = changes(api_as(reviewer), start)
    assert body["changed"] == [] and body["gone"] == []


def test_after_is_required_and_a_whole_number(api_as, reviewer):
    client = api_as(reviewer)
    for bad in ({}, {"after": "x"}, {"after": "-1"}):
        response = client.get(CHANGES_URL, bad)
        assert response.status_code == 400 and "after" in response.json()


def test_the_page_endpoint_sends_rows_as_the_list_draws_them(client, sim_pool, reviewer):
    client.force_login(reviewer)
    start = selectors.run_events_cursor()
    run = run_create(pool=sim_pool, input="What is <b>love</b>?", created_by=reviewer)
    response = client.get(reverse("runs-changes"), {"after": start})
    body = response.json()
    assert body["changed"] == [run.pk]
    assert f'data-run-id="{run.pk}"' in body["rows"]
    assert "What is &lt;b&gt;love&lt;/b&gt;?" in body["rows"]
    assert client.get(reverse("runs-changes"), {"after": "nope"}).status_code == 400
