"""POST /api/runs/ with a code grader: only project admins may set one, and a server that cannot
grade code says so before the run starts."""

from __future__ import annotations

import pytest

from orchestrator.models import Run
from orchestrator.services import execution
from orchestrator.services.runs import run_execute
from tests.orchestrator.services.conftest import CODE_TASK, code_run

RUNS_URL = "/api/runs/"


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(execution, "run_enqueue", lambda *, run_id: calls.append(run_id))
    return calls


def payload(pool) -> dict:
    return {
        "input": CODE_TASK.question,
        "pool": pool.pk,
        "reference": CODE_TASK.reference,
        "grader": "code",
    }


def test_a_reviewer_gets_a_403_that_says_who_may(api_as, sim_pool, reviewer, enqueued):
    response = api_as(reviewer).post(RUNS_URL, payload(sim_pool), format="json")
    assert response.status_code == 403
    assert "Only admins of the project may set a code grader" in response.json()["detail"]
    assert not Run.objects.exists() and enqueued == []


def test_a_project_admin_and_a_superuser_may(
    code_sandbox, api_as, sim_pool, project_admin, superuser, enqueued
):
    for user in (project_admin, superuser):
        response = api_as(user).post(RUNS_URL, payload(sim_pool), format="json")
        assert response.status_code == 201, response.json()
    assert list(Run.objects.values_list("grader", flat=True)) == ["code", "code"]


def test_code_grading_turned_off_is_a_400_on_the_grader(
    api_as, sim_pool, project_admin, enqueued, settings
):
    settings.CONDUCTOR_CODE_GRADING = "off"
    response = api_as(project_admin).post(RUNS_URL, payload(sim_pool), format="json")
    assert response.status_code == 400
    assert response.json() == {
        "grader": ["Code grading is turned off on this server (CONDUCTOR_CODE_GRADING=off)."]
    }
    assert not Run.objects.exists()


def test_a_run_that_could_not_be_graded_says_why_in_the_api_and_on_its_page(
    code_sandbox, api_as, client, sim_pool, project_admin, settings,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    run = code_run(sim_pool, created_by=project_admin)
    settings.CONDUCTOR_CODE_GRADING = "off"
    with django_capture_on_commit_callbacks(execute=True):
        run_execute(run_id=run.pk)
    reason = "Not graded: Code grading is turned off on this server (CONDUCTOR_CODE_GRADING=off)."

    body = api_as(project_admin).get(f"{RUNS_URL}{run.pk}/").json()
    assert body["status"] == "succeeded" and body["answer"]
    assert body["score"] is None and body["error"] == reason

    client.force_login(project_admin)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert reason in page
