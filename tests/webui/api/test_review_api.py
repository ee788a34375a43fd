"""The review API for each role: viewers read, reviewers and admins change, others get 404s."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator.models import AuditEntry, Comment, RunLabel
from orchestrator.services import review
from tests.factories import make_run, make_step

pytestmark = pytest.mark.django_db

ROLES = ("viewer", "reviewer", "project_admin", "superuser", "outsider", "anonymous")
# What each role gets from a change and from a read: 404 where the run is not there for them.
CHANGE = {
    "viewer": 403,
    "reviewer": 2,
    "project_admin": 2,
    "superuser": 2,
    "outsider": 404,
    "anonymous": 403,
}
READ = {**CHANGE, "viewer": 2}


@pytest.fixture
def run(sim_pool):
    return make_run(pool=sim_pool, status="failed")


@pytest.fixture
def step(run):
    return make_step(run=run)


@pytest.fixture
def kinds(project):
    return review.failure_kinds_ensure(project=project)


@pytest.fixture
def users(request, viewer, reviewer, project_admin, superuser, outsider):
    return {
        "viewer": viewer,
        "reviewer": reviewer,
        "project_admin": project_admin,
        "superuser": superuser,
        "outsider": outsider,
        "anonymous": None,
    }


def same_class(status: int, expected: int) -> bool:
    return status // 100 == expected if expected < 10 else status == expected


def changes(run, step, kinds):
    """(method, url, body) of every review change on ``run``."""
    return [
        (
            "post",
            reverse("api-run-comments", args=[run.pk]),
            {"body": "On a step.", "step": step.pk},
        ),
        ("post", reverse("api-run-labels", args=[run.pk]), {"kind": kinds[0].pk}),
        ("delete", reverse("api-run-label-remove", args=[run.pk, kinds[0].pk]), None),
        ("put", reverse("api-run-assignee", args=[run.pk]), {"assignee": "rui-reviewer"}),
        ("put", reverse("api-run-score", args=[run.pk]), {"score": 0.0}),
        ("put", reverse("api-run-flag", args=[run.pk]), {"flagged": True}),
        ("put", reverse("api-run-resolution", args=[run.pk]), {"note": "Known."}),
        ("delete", reverse("api-run-resolution", args=[run.pk]), None),
    ]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_its_status_from_every_review_change(api_as, users, role, run, step, kinds):
    client = api_as(users[role])
    for method, url, body in changes(run, step, kinds):
        response = getattr(client, method)(url, body, format="json")
        assert same_class(response.status_code, CHANGE[role]), (role, method, url, response.data)
    if CHANGE[role] != 2:
        assert not Comment.objects.exists() and not RunLabel.objects.exists()
        assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_its_status_from_every_review_read(api_as, users, role, run, project):
    client = api_as(users[role])
    for url in (
        reverse("api-run-review", args=[run.pk]),
        reverse("api-run-comments", args=[run.pk]),
    ):
        assert same_class(client.get(url).status_code, READ[role]), (role, url)


def test_a_reviewer_comments_labels_scores_and_resolves_through_the_api(
    api_as, reviewer, run, step, kinds, sim_pool
):
    client = api_as(reviewer)
    response = client.post(
        reverse("api-run-comments", args=[run.pk]),
        {"body": "The *plan* skipped a step.", "step": step.pk},
        format="json",
    )
    assert response.status_code == 201
    assert response.data["step"] == step.pk and response.data["author"] == "rui-reviewer"

    labelled = client.post(
        reverse("api-run-labels", args=[run.pk]), {"kind": kinds[0].pk}, format="json"
    )
    assert labelled.data["labels"] == [{"id": kinds[0].pk, "name": "bad plan"}]
    client.put(reverse("api-run-score", args=[run.pk]), {"score": 0.0}, format="json")
    replay = make_run(pool=sim_pool, replay_of=run)
    resolved = client.put(
        reverse("api-run-resolution", args=[run.pk]),
        {"note": "Fixed by editing step 0.", "fixed_by": replay.pk},
        format="json",
    )
    assert resolved.status_code == 200
    assert resolved.data["resolution"]["fixed_by"] == replay.pk

    state = client.get(reverse("api-run-review", args=[run.pk])).data
    assert state["human_score"] == 0.0 and state["labels"][0]["name"] == "bad plan"
    comments = client.get(reverse("api-run-comments", args=[run.pk])).data
    assert [c["body"] for c in comments] == ["The *plan* skipped a step."]


def test_bad_input_is_a_400_naming_the_field_and_nothing_is_stored(
    api_as, reviewer, run, sim_pool, kinds
):
    client = api_as(reviewer)
    other_run_step = make_step(run=make_run(pool=sim_pool))
    cases = [
        ("post", reverse("api-run-comments", args=[run.pk]), {"body": ""}, "body"),
        ("post", reverse("api-run-comments", args=[run.pk]), {"body": "x" * 10_001}, "body"),
        (
            "post",
            reverse("api-run-comments", args=[run.pk]),
            {"body": "Hi.", "step": other_run_step.pk},
            "step",
        ),
        ("post", reverse("api-run-labels", args=[run.pk]), {"kind": 10**9}, "kind"),
        ("put", reverse("api-run-score", args=[run.pk]), {"score": 2}, "score"),
        ("put", reverse("api-run-assignee", args=[run.pk]), {"assignee": "nobody"}, "assignee"),
        ("put", reverse("api-run-resolution", args=[run.pk]), {"fixed_by": 10**9}, "fixed_by"),
        ("put", reverse("api-run-flag", args=[run.pk]), {}, "flagged"),
    ]
    for method, url, body, field in cases:
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code == 400, (url, body, response.data)
        assert field in response.data, (url, body, response.data)
    assert not Comment.objects.exists() and not RunLabel.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_comment_is_edited_by_its_author_only(api_as, reviewer, project_admin, run):
    comment = review.comment_create(actor=reviewer, run=run, body="Frist.")
    url = reverse("api-comment-detail", args=[comment.pk])
    assert api_as(project_admin).patch(url, {"body": "Mine."}, format="json").status_code == 403
    response = api_as(reviewer).patch(url, {"body": "First."}, format="json")
    assert response.status_code == 200 and response.data["edited_at"]
    assert api_as(project_admin).delete(url).status_code == 204
    assert api_as(reviewer).delete(url).status_code == 404


def test_the_queue_lists_runs_that_want_review_with_their_review(
    api_as, viewer, reviewer, outsider, run, sim_pool, kinds
):
    make_run(pool=sim_pool, status="succeeded", score=1.0)
    review.label_add(actor=reviewer, run=run, kind=kinds[2])
    review.run_assign(actor=reviewer, run=run, assignee=reviewer)

    response = api_as(viewer).get(reverse("api-review-queue"))
    assert response.status_code == 200
    [row] = response.data["results"]
    assert row["id"] == run.pk
    assert row["review"]["assignee"] == "rui-reviewer"
    assert row["review"]["labels"] == [{"id": kinds[2].pk, "name": kinds[2].name}]
    mine = api_as(reviewer).get(reverse("api-review-queue"), {"assignee": "rui-reviewer"})
    assert [r["id"] for r in mine.data["results"]] == [run.pk]
    assert api_as(outsider).get(reverse("api-review-queue")).data["results"] == []
    refused = api_as(outsider).get(reverse("api-review-queue"), {"project": sim_pool.project.slug})
    assert refused.status_code == 400 and "project" in refused.data


def test_insights_count_the_runs_of_one_project(api_as, viewer, outsider, reviewer, run, kinds):
    review.label_add(actor=reviewer, run=run, kind=kinds[0])
    url = reverse("api-review-insights")
    response = api_as(viewer).get(url, {"project": run.project.slug})
    assert response.status_code == 200
    assert response.data["by_kind"] == [{"kind": kinds[0].pk, "name": "bad plan", "runs": 1}]
    assert api_as(outsider).get(url, {"project": run.project.slug}).status_code == 400


def test_only_admins_change_failure_kinds(api_as, viewer, reviewer, project_admin, project):
    url = reverse("api-failure-kinds")
    listed = api_as(viewer).get(url, {"project": project.slug})
    assert [kind["name"] for kind in listed.data][:2] == ["bad plan", "wrong worker"]
    body = {"project": project.slug, "name": "Too slow"}
    assert api_as(reviewer).post(url, body, format="json").status_code == 403
    created = api_as(project_admin).post(url, body, format="json")
    assert created.status_code == 201
    detail = reverse("api-failure-kind", args=[created.data["id"]])
    assert api_as(reviewer).patch(detail, {"name": "Slow"}, format="json").status_code == 403
    assert api_as(project_admin).patch(detail, {"name": "Slow"}, format="json").data["name"] == (
        "Slow"
    )
    assert api_as(project_admin).delete(detail).status_code == 204
    assert AuditEntry.objects.filter(action__startswith="failure_kind.").count() == 3
