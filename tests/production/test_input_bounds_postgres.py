"""On PostgreSQL too, the inputs that were once 500s are refused cleanly (400 naming the field,
404 for an id past the integer range). The same cases run on SQLite in
tests/webui/api/test_input_bounds.py."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from orchestrator.models import Run
from tests.factories import make_run

pytestmark = pytest.mark.production

TOO_BIG = "9223372036854775808"  # 2**63: past PostgreSQL's bigint


@pytest.fixture
def api(reviewer):
    client = APIClient()
    client.force_authenticate(reviewer)
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize(
    ("query", "field"),
    [({"pool": TOO_BIG}, "pool"), ({"page": "9223372036854775807"}, "page")],
)
def test_huge_numbers_in_the_runs_query_are_a_400(api, sim_pool, query, field):
    make_run(pool=sim_pool)
    response = api.get("/api/runs/", query)
    assert response.status_code == 400 and field in response.json()


def test_huge_numbers_and_deep_nesting_in_a_body_are_a_400(api, sim_pool):
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    body = f'{{"input": "What is 2+2?", "pool": {sim_pool.pk}, "strategy_options": {deep}}}'
    response = api.post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400 and list(response.json()) == ["strategy_options"]
    response = api.post(
        "/api/runs/", {"input": "What is 2+2?", "pool": int(TOO_BIG)}, format="json"
    )
    assert response.status_code == 400 and list(response.json()) == ["pool"]
    assert not Run.objects.exists()


def test_ids_past_the_integer_range_are_a_404(api, client, reviewer):
    client.force_login(reviewer)
    assert api.get(f"/api/runs/{TOO_BIG}/").status_code == 404
    assert client.get(f"/runs/{TOO_BIG}/").status_code == 404


def test_a_huge_page_on_the_runs_page_is_not_a_500(client, reviewer, sim_pool):
    client.force_login(reviewer)
    client.raise_request_exception = False
    assert client.get("/", {"page": "99999999999999999999"}).status_code == 200
