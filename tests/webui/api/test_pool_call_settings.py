"""The pool settings that shape model calls (output bounds, the conductor's output form and its
fallback, concurrency) through the API: set, validated, audited, in the OpenAPI schema."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator.models import AuditEntry

pytestmark = pytest.mark.django_db


POOL_SETTINGS = [
    ("conductor_max_tokens", 256, None),
    ("worker_max_tokens", 512, None),
    ("conductor_output", "json", "text"),
    ("conductor_json_dialect", "vllm", "auto"),
    ("plan_fallback", "single", "fail"),
    ("conductor_max_concurrency", 1, None),
]
BAD_POOL_SETTINGS = [
    ("conductor_output", "yaml"),
    ("conductor_json_dialect", "xml"),
    ("plan_fallback", "retry"),
    ("plan_fallback", None),
    ("conductor_max_concurrency", 0),
    ("conductor_max_concurrency", 5000),
    ("conductor_max_tokens", 0),
    ("conductor_max_tokens", 1.5),
    ("conductor_max_tokens", 10**7),
    ("worker_max_tokens", -1),
    ("worker_max_tokens", "many"),
]
WORKER_SETTINGS = [("max_tokens", 64, None), ("max_concurrency", 2, None)]
BAD_WORKER_SETTINGS = [
    ("max_tokens", 0),
    ("max_tokens", 10**7),
    ("max_tokens", True),
    ("max_concurrency", 0),
    ("max_concurrency", 1.5),
]


@pytest.mark.parametrize(("field", "value", "other"), POOL_SETTINGS)
def test_an_admin_sets_a_pool_setting_and_it_is_audited(
    api_as, sim_pool, project_admin, field, value, other
):
    client = api_as(project_admin)
    url = reverse("api-pool-detail", args=[sim_pool.pk])
    before = client.get(url).json()[field]
    response = client.patch(url, {field: value}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()[field] == value
    entry = AuditEntry.objects.get(action="pool.update")
    assert (entry.before, entry.after) == ({field: before}, {field: value})
    again = client.patch(url, {field: other}, format="json")
    assert again.status_code == 200 and again.json()[field] == other


@pytest.mark.parametrize(("field", "value"), BAD_POOL_SETTINGS)
def test_a_bad_pool_setting_is_a_400_naming_it(api_as, sim_pool, project_admin, field, value):
    response = api_as(project_admin).patch(
        reverse("api-pool-detail", args=[sim_pool.pk]), {field: value}, format="json"
    )
    assert response.status_code == 400 and field in response.json()
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(("field", "value", "other"), WORKER_SETTINGS)
def test_an_admin_sets_a_worker_setting_and_it_is_audited(
    api_as, sim_pool, project_admin, field, value, other
):
    worker = sim_pool.workers.order_by("position").first()
    url = reverse("api-worker-detail", args=[sim_pool.pk, worker.pk])
    response = api_as(project_admin).patch(url, {field: value}, format="json")
    assert response.status_code == 200 and response.json()[field] == value
    entry = AuditEntry.objects.get(action="worker.update")
    assert entry.after == {field: value}
    pool = api_as(project_admin).get(reverse("api-pool-detail", args=[sim_pool.pk])).json()
    assert pool["workers"][0][field] == value
    again = api_as(project_admin).patch(url, {field: other}, format="json")
    assert again.status_code == 200 and again.json()[field] == other


@pytest.mark.parametrize(("field", "value"), BAD_WORKER_SETTINGS)
def test_a_bad_worker_setting_is_a_400_naming_it(api_as, sim_pool, project_admin, field, value):
    worker = sim_pool.workers.order_by("position").first()
    response = api_as(project_admin).patch(
        reverse("api-worker-detail", args=[sim_pool.pk, worker.pk]), {field: value}, format="json"
    )
    assert response.status_code == 400 and field in response.json()


def test_the_settings_are_in_the_openapi_schema(api_as, project_admin):
    schema = api_as(project_admin).get(reverse("api-schema"), {"format": "json"}).json()
    components = schema["components"]["schemas"]
    for name in ("PatchedPoolCreateInput", "PoolDetailOutput"):
        properties = components[name]["properties"]
        for field, *_ in POOL_SETTINGS:
            assert field in properties, (name, field)
    for name in ("PatchedWorkerInput", "WorkerDetailOutput"):
        for field, *_ in WORKER_SETTINGS:
            assert field in components[name]["properties"], (name, field)
