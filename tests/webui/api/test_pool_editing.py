"""The pools API for admins: create and change pools and workers, reorder, disable, remove,
test a connection, read usage; members read, only admins write, others get 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator.models import AuditEntry, Pool, Worker
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_run, make_step
from tests.openai_server import running_openai_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def server():
    with running_openai_server() as url:
        yield url


WORKER = {"name": "Echo", "model": "openai/tiny", "description": "Repeats the question."}


def test_an_admin_creates_a_pool_and_adds_workers(api_as, project, project_admin):
    client = api_as(project_admin)
    created = client.post(
        reverse("api-pool-list"),
        {
            "project": project.slug,
            "name": "Research",
            "max_rounds": 3,
            "cost_budget": None,
            "conductor_prompt_style": "compact",
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    pool_id = created.json()["id"]
    body = created.json()
    assert (body["max_rounds"], body["cost_budget"], body["conductor_prompt_style"]) == (
        3,
        None,
        "compact",
    )
    worker = client.post(reverse("api-worker-create", args=[pool_id]), WORKER, format="json")
    assert worker.status_code == 201 and worker.json()["position"] == 0
    detail = client.get(reverse("api-pool-detail", args=[pool_id])).json()
    assert [w["name"] for w in detail["workers"]] == ["Echo"] and detail["can_edit"] is True
    assert AuditEntry.objects.filter(action__in=["pool.create", "worker.create"]).count() == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 1.5}, "max_steps"),
        ({"step_timeout": "NaN"}, "step_timeout"),
        ({"show_worker_names": "yes"}, "show_worker_names"),
        ({"conductor_api_key_env": "sk-abc123-looks-like-a-key"}, "conductor_api_key_env"),
        ({"conductor_params": {"api_key": "sk"}}, "conductor_params"),
        ({"conductor_params": "not json"}, "conductor_params"),
        ({"name": "x" * 101}, "name"),
        ({"conductor_prompt_style": "verbose"}, "conductor_prompt_style"),
    ],
)
def test_bad_pool_changes_get_a_400_naming_the_field(api_as, sim_pool, project_admin, body, field):
    response = api_as(project_admin).patch(
        reverse("api-pool-detail", args=[sim_pool.pk]), body, format="json"
    )
    assert response.status_code == 400 and field in response.json()
    assert not AuditEntry.objects.exists()


def test_workers_are_changed_reordered_and_disabled(api_as, sim_pool, project_admin):
    client = api_as(project_admin)
    ids = list(sim_pool.workers.order_by("position").values_list("pk", flat=True))
    changed = client.patch(
        reverse("api-worker-detail", args=[sim_pool.pk, ids[0]]),
        {"price_in": 1.5, "params": {"latency": 0, "seed": 3}},
        format="json",
    )
    assert changed.status_code == 200 and changed.json()["price_in"] == 1.5
    reordered = client.post(
        reverse("api-worker-reorder", args=[sim_pool.pk]), {"order": ids[::-1]}, format="json"
    )
    assert [w["id"] for w in reordered.json()] == ids[::-1]
    disabled = client.post(reverse("api-worker-disable", args=[sim_pool.pk, ids[1]]))
    assert disabled.json()["enabled"] is False
    # Runs leave a disabled worker out; the pool list shows only enabled workers.
    listed = client.get(reverse("api-pool-list")).json()[0]["workers"]
    assert ids[1] not in [w["id"] for w in listed]


def test_a_worker_of_another_pool_is_a_404(api_as, sim_pool, project, project_admin):
    other = Pool.objects.create(project=project, name="Other")
    worker = sim_pool.workers.first()
    response = api_as(project_admin).patch(
        reverse("api-worker-detail", args=[other.pk, worker.pk]), {"price_in": 1}, format="json"
    )
    assert response.status_code == 404


def test_removing_a_used_worker_disables_it(api_as, sim_pool, project_admin):
    used = sim_pool.workers.first()
    make_step(run=make_run(pool=sim_pool), worker=used)
    response = api_as(project_admin).delete(
        reverse("api-worker-detail", args=[sim_pool.pk, used.pk])
    )
    assert response.json() == {"deleted": False}
    assert Worker.objects.get(pk=used.pk).enabled is False


def test_viewers_read_but_cannot_change_and_outsiders_see_nothing(
    api_as, sim_pool, viewer, reviewer, outsider
):
    url = reverse("api-pool-detail", args=[sim_pool.pk])
    as_viewer = api_as(viewer).get(url).json()
    assert as_viewer["can_edit"] is False
    assert {w["api_key_env"] for w in as_viewer["workers"]} == {""}
    for user in (viewer, reviewer):
        assert api_as(user).patch(url, {"max_steps": 2}, format="json").status_code == 403
    assert api_as(outsider).get(url).status_code == 404
    assert api_as(outsider).patch(url, {"max_steps": 2}, format="json").status_code == 404
    assert Pool.objects.get(pk=sim_pool.pk).max_steps == 5


def test_test_connection_through_the_api(api_as, sim_pool, project_admin, server):
    worker = Worker.objects.create(
        pool=sim_pool, position=9, name="Local", model="openai/tiny", api_base=server,
        description="d",
    )  # fmt: skip
    response = api_as(project_admin).post(
        reverse("api-worker-test-connection", args=[sim_pool.pk, worker.pk])
    )
    body = response.json()
    assert response.status_code == 200 and body["ok"] is True
    assert (body["answer"], body["tokens_in"], body["tokens_out"]) == (
        "echo: This is a connection test. Reply with the single word: ok", 21, 7,
    )  # fmt: skip
    conductor = api_as(project_admin).post(reverse("api-pool-test-connection", args=[sim_pool.pk]))
    assert conductor.status_code == 200 and conductor.json()["model"] == "sim/conductor"


def test_usage_per_worker(api_as, sim_pool, viewer, django_assert_max_num_queries):
    for question in ("What is 17 * 23?", "What is 2 + 2?"):
        run_execute(run_id=run_create(pool=sim_pool, input=question, enqueue=False).pk)
    client = api_as(viewer)
    with django_assert_max_num_queries(12):
        usage = client.get(reverse("api-pool-usage", args=[sim_pool.pk])).json()
    used = [row for row in usage if row["steps"]]
    assert used and len(usage) == sim_pool.workers.count()
    for row in used:
        assert 1 <= row["runs"] <= 2 and 0 <= row["success_rate"] <= 1
        assert row["tokens_in"] > 0 and row["latency_p50"] <= row["latency_p95"]
