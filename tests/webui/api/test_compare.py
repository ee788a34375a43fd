"""``GET /api/compare/`` and the ``/compare/`` page: who may compare which runs, bad queries."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from orchestrator import comparing
from orchestrator.models import Run
from tests.factories import make_pool, make_run, make_step

URL = reverse("api-compare")
PAGE = reverse("runs-compare")

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(sim_pool):
    first = make_run(pool=sim_pool, status=Run.Status.SUCCEEDED, answer="391", step_count=2)
    second = make_run(pool=sim_pool, status=Run.Status.SUCCEEDED, answer="390", step_count=2)
    for run, last in ((first, "Check the product twice."), (second, "Check the product.")):
        make_step(run=run, index=0, instruction="Multiply 17 by 23.", response="391")
        make_step(run=run, index=1, instruction=last, access=[0], response="Checked.")
    return first, second


@pytest.fixture
def theirs(outsider):
    return make_run(pool=make_pool(project=outsider.memberships.get().project))


def test_a_viewer_compares_two_runs_of_their_project(api_as, viewer, runs):
    first, second = runs
    response = api_as(viewer).get(URL, {"runs": f"{first.pk},{second.pk}"})

    assert response.status_code == 200, response.json()
    body = response.json()
    assert [entry["run"]["id"] for entry in body["runs"]] == [first.pk, second.pk]
    assert [(row["index"], row["change"]) for row in body["steps"]] == [(0, "same"), (1, "changed")]
    assert body["steps"][1]["diffs"][1]["instruction"] == [
        {"op": "equal", "text": "Check the product"},
        {"op": "delete", "text": " twice"},
        {"op": "equal", "text": "."},
    ]
    assert body["counts"] == {"same": 1, "changed": 1, "added": 0, "removed": 0}
    answer = next(line for line in body["outcome"] if line["key"] == "answer")
    assert answer["values"] == ["391", "390"] and answer["differs"] == [False, True]


def test_a_run_of_another_project_makes_the_whole_request_a_404(
    api_as, viewer, outsider, runs, theirs
):
    first, _ = runs
    for user, ids in ((viewer, [first.pk, theirs.pk]), (outsider, [theirs.pk, first.pk])):
        response = api_as(user).get(URL, {"runs": ",".join(map(str, ids))})
        assert response.status_code == 404
        assert "steps" not in response.json()
    assert api_as(viewer).get(URL, {"runs": f"{first.pk},999999"}).status_code == 404


def test_anonymous_requests_are_refused(api_as, runs):
    first, second = runs
    assert api_as(None).get(URL, {"runs": f"{first.pk},{second.pk}"}).status_code == 403


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "7",
        "1,2,3,4,5",
        "a,b",
        "1, 2",
        " 1,2",
        "1,,2",
        "1;2",
        "0,1",
        "-1,2",
        "1.0,2",
        "99999999999999999999,1",
        "9223372036854775808,1",
        "١,٢",
    ],
)
def test_a_bad_runs_parameter_is_a_400_naming_it(api_as, viewer, runs, value):
    query = {} if value is None else {"runs": value}
    response = api_as(viewer).get(URL, query)
    assert response.status_code == 400, (value, response.content)
    assert list(response.json()) == ["runs"]


def test_a_run_named_twice_is_a_400(api_as, viewer, runs):
    first, _ = runs
    response = api_as(viewer).get(URL, {"runs": f"{first.pk},{first.pk}"})
    assert response.status_code == 400
    assert response.json() == {"runs": ["Name each run once."]}


def test_runs_holding_too_many_steps_together_are_a_400(api_as, viewer, runs, monkeypatch):
    monkeypatch.setattr(comparing, "MAX_STEPS", 3)
    first, second = runs
    response = api_as(viewer).get(URL, {"runs": f"{first.pk},{second.pk}"})
    assert response.status_code == 400
    assert "4 steps" in response.json()["runs"][0]


def test_the_operation_is_in_the_schema(api_as, viewer):
    schema = api_as(viewer).get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/compare/"]["get"]
    assert operation["operationId"] == "compare_runs"
    (parameter,) = operation["parameters"]
    assert parameter["name"] == "runs" and parameter["required"] is True
    assert re.fullmatch(parameter["schema"]["pattern"], "12,15")
    assert {"200", "400", "403", "404"} <= set(operation["responses"])


# The page ----------------------------------------------------------------------------------------


def page_state(response) -> dict:
    html = response.content.decode()
    match = re.search(r'<script id="compare-state" type="application/json">(.*?)</script>', html)
    return json.loads(match.group(1))


def test_the_page_embeds_the_comparison_and_each_runs_graph(client, viewer, runs):
    first, second = runs
    client.force_login(viewer)
    response = client.get(PAGE, {"runs": f"{first.pk},{second.pk}"})

    assert response.status_code == 200
    state = page_state(response)
    assert [row["change"] for row in state["comparison"]["steps"]] == ["same", "changed"]
    assert [page["state"]["run"]["id"] for page in state["pages"]] == [first.pk, second.pk]
    # Each step is in the page once: in its run's state; the graph and the rows name it by id.
    # (The steps are a table: columns, then one row of values per step.)
    steps = [
        [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]
        for table in (page["state"]["steps"] for page in state["pages"])
    ]
    for page, page_steps in zip(state["pages"], steps, strict=True):
        ids = [step["id"] for step in page_steps]
        assert len(ids) == 2 and page["graph"]["steps"][::3] == ids
    for row in state["comparison"]["steps"]:
        assert row["steps"] == [
            next(step["id"] for step in page_steps if step["index"] == row["index"])
            for page_steps in steps
        ]
    html = response.content.decode()
    assert f'href="/runs/{first.pk}/"' in html and "js/compare.js" in html


def test_the_page_takes_runs_once_per_ticked_row_as_the_list_sends_them(client, viewer, runs):
    first, second = runs
    client.force_login(viewer)
    response = client.get(f"{PAGE}?runs={second.pk}&runs={first.pk}")
    assert response.status_code == 200
    assert [r["run"]["id"] for r in page_state(response)["comparison"]["runs"]] == [
        second.pk,
        first.pk,
    ]


def test_the_page_keeps_the_apis_rules(client, viewer, runs, theirs):
    first, _ = runs
    client.force_login(viewer)
    assert client.get(PAGE, {"runs": f"{first.pk},{theirs.pk}"}).status_code == 404
    response = client.get(PAGE, {"runs": str(first.pk)})
    assert response.status_code == 400
    assert "Give from 2 to 4 run ids" in response.content.decode()
    client.logout()
    assert client.get(PAGE, {"runs": f"{first.pk},{theirs.pk}"}).status_code == 302


def test_the_runs_list_offers_a_box_per_row_for_compare(client, viewer, runs):
    first, second = runs
    client.force_login(viewer)
    html = client.get("/").content.decode()
    assert 'id="compare-form"' in html and f'action="{PAGE}"' in html
    for run in (first, second):
        assert f'class="compare-pick" name="runs" value="{run.pk}" form="compare-form"' in html
