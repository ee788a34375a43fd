"""Input that once made the API or the pages answer 500 is refused with a 400 naming the field
(or a 404 for an id no row can have, a 413 for a body over the size limit)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from orchestrator.models import Run
from tests.factories import make_run

RUNS_URL = reverse("api-run-list")
TOO_BIG = "9223372036854775808"  # 2**63: past every integer column
DEEP = 5000


@pytest.fixture
def api(api_as, reviewer):
    client = api_as(reviewer)
    client.raise_request_exception = False  # a 500 is what is being tested for
    return client


@pytest.fixture
def page_client(client, reviewer):
    client.force_login(reviewer)
    client.raise_request_exception = False
    return client


def post_json(api, text: str):
    return api.post(RUNS_URL, text, content_type="application/json")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"pool": TOO_BIG}, "pool"),
        ({"pool": "9" * 5000}, "pool"),
        ({"page": "9223372036854775807"}, "page"),
        ({"page": "9" * 5000}, "page"),
        ({"score_min": "1e999"}, "score_min"),
    ],
)
def test_huge_numbers_in_list_queries_are_a_400_naming_the_field(api, sim_pool, query, field):
    make_run(pool=sim_pool)
    response = api.get(RUNS_URL, query)
    assert response.status_code == 400, response.content[:300]
    assert field in response.json()


def test_a_huge_page_size_is_a_400_at_once(api, sim_pool):
    make_run(pool=sim_pool)
    response = api.get(RUNS_URL, {"page_size": "9" * 5000})  # never parsed digit by digit
    assert response.status_code == 400 and "page_size" in response.json()


def test_the_last_allowed_page_is_empty_not_an_error(api, sim_pool):
    make_run(pool=sim_pool)
    response = api.get(RUNS_URL, {"page": "100000", "page_size": "200"})
    assert response.status_code == 200 and response.json()["results"] == []


def test_a_huge_round_on_the_graph_is_a_400(api, sim_pool):
    run = make_run(pool=sim_pool)
    response = api.get(reverse("api-run-graph", args=[run.pk]), {"round": TOO_BIG})
    assert response.status_code == 400 and "round" in response.json()


@pytest.mark.parametrize(
    "path",
    [
        f"/api/runs/{TOO_BIG}/",
        f"/api/runs/{TOO_BIG}/graph/",
        f"/api/steps/{'9' * 40}/",
        f"/runs/{TOO_BIG}/",
    ],
)
def test_an_id_past_the_integer_range_is_a_404(api, page_client, path):
    assert api.get(path).status_code == 404
    assert page_client.get(path).status_code == 404


def test_cancel_of_an_id_past_the_integer_range_is_a_404(api):
    assert api.post(f"/api/runs/{TOO_BIG}/cancel/").status_code == 404


@pytest.mark.parametrize("page", ["99999999999999999999", "9223372036854775807", "9" * 5000])
def test_a_huge_page_on_the_runs_page_is_reported_not_a_500(page_client, sim_pool, page):
    run = make_run(pool=sim_pool)
    response = page_client.get("/", {"page": page})
    assert response.status_code == 200
    html = response.content.decode()
    assert "less than or equal to 100000" in html or "Enter a whole number" in html
    assert f'data-run-id="{run.pk}"' in html  # the invalid page is left out: page 1


@pytest.mark.parametrize(
    ("query", "shown"),
    [({"created_before": "9999-12-31"}, True), ({"created_after": "9999-12-31"}, False)],
)
def test_the_last_day_there_is_filters_without_a_500(page_client, sim_pool, query, shown):
    run = make_run(pool=sim_pool)
    response = page_client.get("/", query)
    assert response.status_code == 200
    assert (f'data-run-id="{run.pk}"' in response.content.decode()) is shown


@pytest.mark.parametrize(
    ("body", "field"),
    [("[" * DEEP + "]" * DEEP, "non_field_errors"), ('{"a":' * DEEP + "1" + "}" * DEEP, "a")],
)
def test_a_body_nested_5000_deep_is_a_400(api, body, field):
    response = post_json(api, body)
    assert response.status_code == 400
    assert response.json() == {field: ["Nested deeper than 20 levels."]}


def test_deep_nesting_inside_a_field_names_the_field(api, sim_pool):
    options = '{"a":' * DEEP + "1" + "}" * DEEP
    body = f'{{"input": "What is 2+2?", "pool": {sim_pool.pk}, "strategy_options": {options}}}'
    response = post_json(api, body)
    assert response.status_code == 400
    assert response.json() == {"strategy_options": ["Nested deeper than 20 levels."]}
    assert not Run.objects.exists()


def test_brackets_inside_strings_do_not_count_as_nesting(api, sim_pool, monkeypatch):
    from orchestrator.services import execution

    monkeypatch.setattr(execution, "run_enqueue", lambda *, run_id: None)
    question = "Is [[[[{{{{ " * 100 + ' \\" [ balanced?'
    body = json.dumps({"input": "x", "pool": sim_pool.pk})[:-1] + f', "reference": "{question}"}}'
    response = post_json(api, body)
    assert response.status_code == 201, response.json()


def test_a_lone_surrogate_is_a_400_naming_the_field(api, sim_pool):
    body = f'{{"input": "caf\\ud800", "pool": {sim_pool.pk}}}'
    response = post_json(api, body)
    assert response.status_code == 400
    assert "input" in response.json()


@pytest.mark.parametrize("body", ["{", '{"input": NaN}', "[1e99999999999]", "\xff"])
def test_a_body_that_is_not_json_is_a_400(api, body):
    response = api.post(RUNS_URL, body.encode("latin-1"), content_type="application/json")
    assert response.status_code == 400 and "detail" in response.json()


@pytest.mark.parametrize(
    "payload",
    [
        {"pool": TOO_BIG},
        {"pool": 10**30},
        {"strategy": "reflection", "strategy_options": {"rounds": 1_000_000_000}},
        {"strategy": "reflection", "strategy_options": {"rounds": 10**30}},
        {"strategy": "moa", "strategy_options": {"proposers": [0, 1, 2, 3, 4] * 1000}},
    ],
)
def test_huge_numbers_in_a_body_are_a_400_naming_the_field(api, sim_pool, payload):
    data = {"input": "What is 2+2?", "pool": sim_pool.pk, **payload}
    response = api.post(RUNS_URL, data, format="json")
    assert response.status_code == 400
    field = "pool" if "pool" in payload else "strategy_options"
    assert list(response.json()) == [field]
    assert not Run.objects.exists()


def test_a_question_over_the_limit_is_a_400_naming_the_limit(api, sim_pool, settings):
    settings.CONDUCTOR_MAX_TEXT_BYTES = 2048
    data = {"input": "x" * 3000, "pool": sim_pool.pk, "reference": "4"}
    response = api.post(RUNS_URL, data, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "input": [
            "Too long: 3,000 bytes in UTF-8; the limit is 2,048 bytes (2 KB) "
            "(CONDUCTOR_MAX_TEXT_BYTES)."
        ]
    }


def test_a_body_over_the_upload_limit_is_a_413_naming_it(api, sim_pool, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    data = {"input": "x" * 20_000, "pool": sim_pool.pk}
    response = api.post(RUNS_URL, data, format="json")
    assert response.status_code == 413
    assert "10,000 bytes" in response.json()["detail"]


def test_other_content_types_are_a_415(api, sim_pool):
    response = api.post(RUNS_URL, {"input": "What is 2+2?", "pool": sim_pool.pk})
    assert response.status_code == 415
