"""The batch API: create (admins), bad input per field, detail and list, who sees what."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator.models import AuditEntry, Batch, BatchItem, Membership, Run
from orchestrator.services import batches as batch_services
from tests.factories import make_member, make_pool, make_run, make_step, make_worker

BATCHES_URL = reverse("api-batch-list")
WEAK_TO_STRONG = {"kind": "worker", "from": "Weak", "to": "Strong"}


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(batch_services, "batch_enqueue", lambda *, batch_id: calls.append(batch_id))
    return calls


@pytest.fixture
def pool(project):
    pool = make_pool(project=project, workers=0)
    make_worker(pool=pool, name="Weak", position=0)
    make_worker(pool=pool, name="Strong", position=1)
    return pool


@pytest.fixture
def failed_runs(pool):
    """Three failed runs whose one step ran on Weak, and a succeeded one on Strong."""
    runs = []
    for number in range(3):
        run = make_run(pool=pool, status=Run.Status.FAILED, input=f"Question {number}")
        make_step(run=run, worker_name="Weak", status="failed")
        runs.append(run)
    make_step(run=make_run(pool=pool, status=Run.Status.SUCCEEDED), worker_name="Strong")
    return runs


def body(of, **changes):
    return {
        "project": of.pk,
        "filters": {"status": "failed", "worker": "Weak"},
        "override": WEAK_TO_STRONG,
        **changes,
    }


def test_an_admin_creates_a_batch_of_the_filtered_runs(
    api_as, project, project_admin, failed_runs, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(project_admin).post(BATCHES_URL, body(project), format="json")

    assert response.status_code == 201, response.json()
    data = response.json()
    batch = Batch.objects.get(pk=data["id"])
    assert enqueued == [batch.pk]
    assert data["status"] == "creating"
    assert data["filters"] == {"status": "failed", "worker": "Weak"}
    assert data["override"] == WEAK_TO_STRONG
    assert data["progress"]["total"] == 3 and data["progress"]["done"] == 0
    assert [item["source"]["id"] for item in data["items"]] == [r.pk for r in failed_runs[::-1]]
    assert all(item["source"]["outcome"] == "failed" for item in data["items"])
    assert AuditEntry.objects.filter(action="batch.create", target_id=batch.pk).exists()


def test_the_runs_lists_verdict_filter_is_taken(
    api_as, project, project_admin, failed_runs, enqueued
):
    """ "Replay these…" from the list's "Failed" result filter sends ``verdict``."""
    response = api_as(project_admin).post(
        BATCHES_URL, body(project, filters={"verdict": "failed"}), format="json"
    )

    assert response.status_code == 201, response.json()
    assert response.json()["progress"]["total"] == 3


def test_an_instruction_override_is_taken(api_as, project, project_admin, failed_runs, enqueued):
    override = {"kind": "instruction", "match": "regex", "pattern": r"part \d", "replacement": ""}

    response = api_as(project_admin).post(
        BATCHES_URL, body(project, override=override), format="json"
    )

    assert response.status_code == 201, response.json()
    assert Batch.objects.get().override == override


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"project": None}, "project"),
        ({"project": "Team"}, "project"),
        ({"project": 10**9}, "project"),
        ({"override": None}, "override"),
        ({"override": {"kind": "model"}}, "override.kind"),
        ({"override": {"kind": "worker", "from": "Weak"}}, "override.to"),
        ({"override": {"kind": "worker", "from": "Weak", "to": "Ghost"}}, "override.to"),
        ({"override": {"kind": "worker", "from": 3, "to": "Strong"}}, "override.from"),
        (
            {"override": {"kind": "instruction", "match": "regex", "pattern": "(?"}},
            "override.pattern",
        ),
        (
            {"override": {"kind": "instruction", "match": "regex", "pattern": "x?"}},
            "override.pattern",
        ),
        ({"override": {"kind": "instruction", "pattern": "p" * 201}}, "override.pattern"),
        (
            {"override": {"kind": "instruction", "pattern": "a", "replacement": 5}},
            "override.replacement",
        ),
        ({"filters": {"status": "lost"}}, "filters.status"),
        ({"filters": {"pool": "x"}}, "filters.pool"),
        ({"filters": {"pool": 10**9}}, "filters.pool"),
        ({"filters": {"score_min": "high"}}, "filters.score_min"),
        ({"filters": {"q": "no such text anywhere"}}, "filters"),
        ({"override": {"kind": "worker", "from": "Nonexistent", "to": "Strong"}}, "override.from"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_creates_nothing(
    api_as, project, project_admin, failed_runs, enqueued, changes, field
):
    response = api_as(project_admin).post(BATCHES_URL, body(project, **changes), format="json")

    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert not Batch.objects.exists() and not BatchItem.objects.exists()
    assert enqueued == []


def test_a_project_of_someone_else_is_a_400_on_project(
    api_as, project, outsider, failed_runs, enqueued
):
    response = api_as(outsider).post(BATCHES_URL, body(project), format="json")

    assert response.status_code == 400
    assert "project" in response.json()
    assert not Batch.objects.exists()


@pytest.mark.parametrize("role", [Membership.Role.REVIEWER, Membership.Role.VIEWER])
def test_members_who_are_not_admins_get_a_403(api_as, project, failed_runs, enqueued, role):
    member = make_member(project=project, role=role)

    response = api_as(member).post(BATCHES_URL, body(project), format="json")

    assert response.status_code == 403
    assert not Batch.objects.exists()


def test_anonymous_requests_are_refused(api_as, project, failed_runs):
    assert api_as(None).post(BATCHES_URL, body(project), format="json").status_code in (401, 403)
    assert api_as(None).get(BATCHES_URL).status_code in (401, 403)


def test_members_see_a_batch_and_others_get_a_404(
    api_as, project, project_admin, viewer, outsider, failed_runs, enqueued
):
    created = api_as(project_admin).post(BATCHES_URL, body(project), format="json").json()
    url = reverse("api-batch-detail", args=[created["id"]])

    seen = api_as(viewer).get(url)
    assert seen.status_code == 200
    assert seen.json()["progress"]["total"] == 3
    assert seen.json()["aggregate"]["compared"] == 0
    assert api_as(outsider).get(url).status_code == 404
    assert (
        api_as(viewer).get(reverse("api-batch-detail", args=[created["id"] + 1])).status_code == 404
    )

    listed = api_as(viewer).get(BATCHES_URL).json()
    assert [entry["id"] for entry in listed["results"]] == [created["id"]]
    assert api_as(outsider).get(BATCHES_URL).json()["results"] == []
