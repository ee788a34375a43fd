"""The replay API: POST /api/runs/{id}/replays/ and GET /api/runs/{id}/family/; who may do what,
and every bad edit refused with a 400 naming its field and nothing created."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator.models import AuditEntry, Membership, Run, Step, Worker
from orchestrator.services import execution
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_member, make_pool, make_project

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(execution, "run_enqueue", lambda *, run_id: calls.append(run_id))
    return calls


@pytest.fixture
def source(sim_pool) -> Run:
    run = run_create(
        pool=sim_pool,
        input="What is 17 * 23?",
        strategy="reflection",
        strategy_options={"rounds": 3},
        enqueue=False,
    )
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    return run


def replays_url(run) -> str:
    return reverse("api-run-replays", args=[run.pk])


def steps_of(run) -> list[Step]:
    return list(Step.objects.filter(run=run).order_by("round", "index"))


def test_admin_replays_with_an_edit_and_gets_the_new_run(
    api_as, project_admin, source, enqueued, django_capture_on_commit_callbacks
):
    last = steps_of(source)[-1]
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(project_admin).post(
            replays_url(source),
            {"edits": [{"step": last.pk, "instruction": "Check it twice."}]},
            format="json",
        )

    assert response.status_code == 201, response.json()
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert body["replay_of"] == source.pk and run.replay_of == source
    assert body["status"] == "queued"
    assert [(e["step"], e["field"], e["after"]) for e in body["edits"]] == [
        (last.pk, "instruction", "Check it twice.")
    ]
    assert body["edits"][0]["before"] == last.instruction
    assert body["edits"][0]["who"] == project_admin.username
    assert enqueued == [run.pk]
    # Same shape as GET /api/runs/{id}/.
    detail = api_as(project_admin).get(reverse("api-run-detail", args=[run.pk])).json()
    assert set(detail) == set(body)
    assert detail["edits"] == body["edits"]


def test_replay_unchanged_and_fresh(api_as, project_admin, source, enqueued):
    unchanged = api_as(project_admin).post(replays_url(source), {}, format="json")
    fresh = api_as(project_admin).post(replays_url(source), {"fresh": True}, format="json")

    assert unchanged.status_code == fresh.status_code == 201
    assert unchanged.json()["edits"] == []
    assert [e["field"] for e in fresh.json()["edits"]] == ["fresh"]


def test_the_replay_runs_only_the_edited_step(api_as, project_admin, source, enqueued):
    last = steps_of(source)[-1]
    body = (
        api_as(project_admin)
        .post(
            replays_url(source),
            {"edits": [{"step": last.pk, "instruction": "Check it twice."}]},
            format="json",
        )
        .json()
    )
    run_execute(run_id=body["id"])

    run = api_as(project_admin).get(reverse("api-run-detail", args=[body["id"]])).json()
    assert run["status"] == "succeeded"
    assert run["totals"]["model_calls"] == 1
    assert [s["reused_from"] is not None for s in run["steps"]] == [True, True, True, False]


def bad_edits(source, other_run, other_worker):
    steps = steps_of(source)
    return {
        "unknown step": ({"edits": [{"step": 10**9, "instruction": "x"}]}, "edits[0].step"),
        "step of another run": (
            {"edits": [{"step": steps_of(other_run)[0].pk, "instruction": "x"}]},
            "edits[0].step",
        ),
        "worker of another pool": (
            {"edits": [{"step": steps[1].pk, "worker": other_worker.pk}]},
            "edits[0].worker",
        ),
        "access to itself": ({"edits": [{"step": steps[1].pk, "access": [1]}]}, "edits[0].access"),
        "access to a later step": (
            {"edits": [{"step": steps[1].pk, "access": [0, 3]}]},
            "edits[0].access",
        ),
        "empty instruction": (
            {"edits": [{"step": steps[1].pk, "instruction": "   "}]},
            "edits[0].instruction",
        ),
        "instruction not text": (
            {"edits": [{"step": steps[1].pk, "instruction": 5}]},
            "edits[0].instruction",
        ),
        "second edit bad": (
            {
                "edits": [
                    {"step": steps[0].pk, "instruction": "Fine."},
                    {"step": steps[2].pk, "access": "some"},
                ]
            },
            "edits[1].access",
        ),
        "replan_from a fixed strategy": ({"replan_from": steps[1].pk}, "replan_from"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unknown step",
        "step of another run",
        "worker of another pool",
        "access to itself",
        "access to a later step",
        "empty instruction",
        "instruction not text",
        "second edit bad",
        "replan_from a fixed strategy",
    ],
)
def test_bad_edit_is_a_400_naming_the_field_and_creates_nothing(
    api_as, project_admin, source, project, enqueued, case
):
    other_pool = make_pool(project=project, workers=1)
    other_run = run_create(
        pool=other_pool, input="What is 2 + 2?", strategy="single", enqueue=False
    )
    run_execute(run_id=other_run.pk)
    body, field = bad_edits(source, other_run, Worker.objects.get(pool=other_pool))[case]
    runs = Run.objects.count()

    response = api_as(project_admin).post(replays_url(source), body, format="json")

    assert response.status_code == 400, response.json()
    errors = response.json()
    assert field in errors, errors
    assert all(isinstance(messages, list) for messages in errors.values())
    assert Run.objects.count() == runs
    assert not AuditEntry.objects.filter(action="replay.create").exists()
    assert enqueued == []


def test_reviewer_and_viewer_get_403_and_nothing_is_created(
    api_as, reviewer, project, source, enqueued
):
    viewer = make_member(project=project, role=Membership.Role.VIEWER)
    for user in (reviewer, viewer):
        response = api_as(user).post(replays_url(source), {}, format="json")
        assert response.status_code == 403
    assert Run.objects.count() == 1


def test_a_run_of_another_project_is_a_404(api_as, source, enqueued):
    outsider = make_member(project=make_project(), role=Membership.Role.ADMIN)

    assert api_as(outsider).post(replays_url(source), {}, format="json").status_code == 404
    family = api_as(outsider).get(reverse("api-run-family", args=[source.pk]))
    assert family.status_code == 404
    assert Run.objects.count() == 1


def test_an_unfinished_run_cannot_be_replayed(api_as, project_admin, sim_pool, enqueued):
    queued = run_create(pool=sim_pool, input="What is 3 + 4?", enqueue=False)

    response = api_as(project_admin).post(replays_url(queued), {}, format="json")

    assert response.status_code == 400 and "run" in response.json()


def test_family_lists_the_root_and_every_replay_with_edits_and_totals(
    api_as, project_admin, reviewer, source, enqueued
):
    last = steps_of(source)[-1]
    first = (
        api_as(project_admin)
        .post(
            replays_url(source),
            {"edits": [{"step": last.pk, "instruction": "Again."}]},
            format="json",
        )
        .json()
    )
    run_execute(run_id=first["id"])
    second = (
        api_as(project_admin)
        .post(replays_url(Run.objects.get(pk=first["id"])), {"fresh": True}, format="json")
        .json()
    )

    # Asked from the last replay, by a reviewer (anyone who can see the run).
    response = api_as(reviewer).get(reverse("api-run-family", args=[second["id"]]))

    assert response.status_code == 200
    family = response.json()
    assert family["root"] == source.pk
    runs = family["runs"]
    assert [r["id"] for r in runs] == [source.pk, first["id"], second["id"]]
    assert [r["replay_of"] for r in runs] == [None, source.pk, first["id"]]
    assert [r["status"] for r in runs] == ["succeeded", "succeeded", "queued"]
    assert runs[1]["edits"][0]["after"] == "Again."
    assert runs[1]["totals"]["model_calls"] == 1
    assert runs[0]["totals"]["model_calls"] == 4
    assert set(runs[0]) >= {"score", "totals", "edits", "status"}
