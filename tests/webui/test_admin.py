"""The admin refuses deeply nested JSON in a pool's or worker's parameters instead of a 500."""

from __future__ import annotations

import pytest

from orchestrator.models import Worker

DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture
def admin_client(client, superuser):
    client.force_login(superuser)
    client.raise_request_exception = False
    return client


def test_deep_json_in_a_worker_is_an_error_next_to_the_field(admin_client, sim_pool):
    worker = sim_pool.workers.order_by("position").first()
    url = f"/admin/orchestrator/worker/{worker.pk}/change/"
    form = {
        "pool": sim_pool.pk,
        "position": worker.position,
        "name": worker.name,
        "model": worker.model,
        "api_base": "",
        "api_key_env": "",
        "params": DEEP,
        "price_in": "1",
        "price_out": "1",
        "description": worker.description,
        "enabled": "on",
    }
    response = admin_client.post(url, form)

    assert response.status_code == 200
    assert "Nested deeper than 20 levels." in response.content.decode()
    assert Worker.objects.get(pk=worker.pk).params == worker.params

    response = admin_client.post(url, {**form, "params": '{"latency": 0}'})
    assert response.status_code == 302
    assert Worker.objects.get(pk=worker.pk).params == {"latency": 0}
