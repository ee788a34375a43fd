"""The review pages through Django's test client: the queue, its filters, insight, the run
page's review state for each role."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from orchestrator import wire
from orchestrator.services import review
from tests.factories import make_run, make_step

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(sim_pool, reviewer):
    kinds = review.failure_kinds_ensure(project=sim_pool.project)
    failed = make_run(pool=sim_pool, status="failed", input="Which is larger, 2**10 or 10**3?")
    make_step(run=failed, worker_name="sim-math")
    wrong = make_run(pool=sim_pool, status="succeeded", score=0.0, input="Spell <b>bold</b>.")
    right = make_run(pool=sim_pool, status="succeeded", score=1.0)
    review.label_add(actor=reviewer, run=failed, kind=kinds[0])
    review.run_assign(actor=reviewer, run=wrong, assignee=reviewer)
    return {"failed": failed, "wrong": wrong, "right": right, "kinds": kinds}


def row_ids(response) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-run-id="(\d+)"', response.content.decode())]


def test_the_queue_lists_runs_that_want_review_newest_first(client, viewer, runs):
    client.force_login(viewer)
    response = client.get(reverse("review-queue"))
    assert response.status_code == 200
    assert row_ids(response) == [runs["wrong"].pk, runs["failed"].pk]
    html = response.content.decode()
    assert '<span class="label-chip">bad plan</span>' in html
    # Text users wrote is text.
    assert "Spell &lt;b&gt;bold&lt;/b&gt;." in html and "<b>bold</b>" not in html
    data = json.loads(
        re.search(r'id="queue-data" type="application/json">(.*?)</script>', html).group(1)
    )
    assert data["can_review"] == []  # a viewer: the label keys do nothing for them


def test_the_queue_filters_like_the_runs_list_and_by_assignee(client, reviewer, runs):
    client.force_login(reviewer)
    mine = client.get(reverse("review-queue"), {"assignee": "rui-reviewer"})
    assert row_ids(mine) == [runs["wrong"].pk]
    failed = client.get(reverse("review-queue"), {"status": "failed", "kind": runs["kinds"][0].pk})
    assert row_ids(failed) == [runs["failed"].pk]
    worker = client.get(reverse("review-queue"), {"worker": "sim-math"})
    assert row_ids(worker) == [runs["failed"].pk]


def test_the_queue_shows_nothing_of_other_projects(client, outsider, runs):
    client.force_login(outsider)
    response = client.get(reverse("review-queue"))
    assert response.status_code == 200 and row_ids(response) == []


def test_anonymous_users_are_sent_to_log_in(client):
    for name in ("review-queue", "review-insights"):
        response = client.get(reverse(name))
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_insight_bars_link_to_the_runs_behind_them(client, viewer, runs):
    client.force_login(viewer)
    response = client.get(reverse("review-insights"))
    assert response.status_code == 200
    html = response.content.decode()
    data = json.loads(
        re.search(r'id="insights-data" type="application/json">(.*?)</script>', html).group(1)
    )
    [by_kind] = data["by_kind"]
    assert by_kind["name"] == "bad plan" and by_kind["runs"] == 1
    linked = client.get(by_kind["url"])
    assert row_ids(linked) == [runs["failed"].pk]
    [by_worker] = data["by_worker"]
    assert row_ids(client.get(by_worker["url"])) == [runs["failed"].pk]
    [by_day] = data["by_day"]
    assert by_day["runs"] == 2
    assert row_ids(client.get(by_day["url"])) == [runs["wrong"].pk, runs["failed"].pk]
    assert "vendor/chart.umd.js" in html


@pytest.mark.parametrize(
    ("role", "can_review"),
    [("viewer", False), ("reviewer", True), ("project_admin", True), ("superuser", True)],
)
def test_the_run_page_embeds_the_review_and_whether_the_user_may_review(
    client, request, runs, role, can_review
):
    review.comment_create(
        actor=request.getfixturevalue("reviewer"), run=runs["failed"], body="<script>x</script>"
    )
    client.force_login(request.getfixturevalue(role))
    response = client.get(reverse("run-detail", args=[runs["failed"].pk]))
    html = response.content.decode()
    state = json.loads(
        re.search(r'id="review-state" type="application/json">(.*?)</script>', html).group(1)
    )
    assert wire.check(state, wire.ReviewPageState) == []
    assert state["can_review"] is can_review
    assert state["can_moderate"] is (role in ("project_admin", "superuser"))
    assert state["review"]["labels"][0]["name"] == "bad plan"
    assert [c["body"] for c in state["comments"]] == ["<script>x</script>"]
    assert "<script>x</script>" not in html  # escaped inside the data block
    assert "rui-reviewer" in state["assignees"]  # reviewers and admins, never viewers


def test_admins_edit_their_projects_failure_kinds_on_the_queue_page(
    client, reviewer, project_admin, runs
):
    client.force_login(reviewer)
    assert 'id="failure-kinds"' not in client.get(reverse("review-queue")).content.decode()
    client.force_login(project_admin)
    html = client.get(reverse("review-queue")).content.decode()
    assert 'id="failure-kinds"' in html
    assert html.count('<li data-kind-id="') == len(runs["kinds"])
