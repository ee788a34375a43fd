"""Exporting the runs list: CSV and JSON Lines of the runs a filter selects, for the people who
may see them, from the API and from the list page's links."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from rest_framework.test import APIClient

from orchestrator.models import Run
from orchestrator.run_export import EXPORT_FIELDS
from orchestrator.services.api_keys import api_key_create
from tests.factories import make_member, make_pool, make_project, make_run

pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")


@pytest.fixture
def runs(sim_pool):
    right = make_run(
        pool=sim_pool, input="What is 17 * 23?", status=Run.Status.SUCCEEDED,
        answer="17 * 23 = 391\nAnswer: 391", reference="391", grader="numeric", score=1.0,
        tokens_in=120, tokens_out=30, cost=0.0012, model_calls=3, wall_time=1.5, step_count=2,
    )  # fmt: skip
    wrong = make_run(
        pool=sim_pool, input="=HYPERLINK(\"http://evil\")", status=Run.Status.SUCCEEDED,
        answer="Answer: 5", reference="4", grader="numeric", score=0.0,
    )  # fmt: skip
    failed = make_run(
        pool=sim_pool, input="Quoted, \"comma\"\nand a newline", status=Run.Status.FAILED,
        error="the conductor could not be reached",
    )  # fmt: skip
    return right, wrong, failed


def download(client: APIClient, kind: str, **query) -> str:
    response = client.get(f"/api/runs/export.{kind}", query)
    assert response.status_code == 200, response.content
    expected = "text/csv" if kind == "csv" else "application/jsonl"
    assert response["Content-Type"].startswith(expected)
    assert response["Content-Disposition"] == f'attachment; filename="runs.{kind}"'
    return b"".join(response).decode()


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_has_a_row_per_run_newest_first_with_what_the_list_shows(api_as, viewer, runs):
    right, wrong, failed = runs
    text = download(api_as(viewer), "csv")
    assert text.splitlines()[0] == ",".join(EXPORT_FIELDS)
    rows = csv_rows(text)
    assert [int(row["id"]) for row in rows] == [failed.pk, wrong.pk, right.pk]
    first = rows[2]
    assert first["verdict"] == "right" and first["answer_shown"] == "391"
    assert first["answer"] == "17 * 23 = 391\nAnswer: 391"  # the whole answer, newline and all
    assert (first["tokens_in"], first["cost"], first["model_calls"]) == ("120", "0.0012", "3")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", first["created_at"])
    assert rows[0]["verdict"] == "failed"
    assert rows[0]["error"] == "the conductor could not be reached"
    assert rows[0]["input"] == 'Quoted, "comma"\nand a newline'


def test_csv_cells_never_run_as_formulas(api_as, viewer, runs):
    (row,) = [r for r in csv_rows(download(api_as(viewer), "csv")) if r["verdict"] == "wrong"]
    assert row["input"] == '\'=HYPERLINK("http://evil")'


def test_jsonl_keeps_types_and_takes_the_lists_filters(api_as, viewer, runs):
    right, wrong, _ = runs
    lines = download(api_as(viewer), "jsonl", verdict="wrong").splitlines()
    (row,) = [json.loads(line) for line in lines]
    assert list(row) == list(EXPORT_FIELDS)
    assert row["id"] == wrong.pk and row["score"] == 0.0 and row["verdict"] == "wrong"
    assert row["input"] == '=HYPERLINK("http://evil")'  # JSON needs no apostrophe
    texts = download(api_as(viewer), "jsonl", q="17 * 23", status="succeeded")
    assert [json.loads(line)["id"] for line in texts.splitlines()] == [right.pk]


def test_a_bad_filter_is_a_400_naming_it(api_as, viewer, runs):
    response = api_as(viewer).get("/api/runs/export.csv", {"verdict": "vibes"})
    assert response.status_code == 400 and "verdict" in response.json()


def test_only_runs_the_user_may_see_are_exported(api_as, runs, db):
    elsewhere = make_project()
    stranger_run = make_run(pool=make_pool(project=elsewhere), input="Not yours?")
    stranger = make_member(project=elsewhere)
    rows = csv_rows(download(api_as(stranger), "csv"))
    assert [int(row["id"]) for row in rows] == [stranger_run.pk]
    assert APIClient().get("/api/runs/export.csv").status_code in (401, 403)


def test_an_api_key_exports_its_own_projects_runs(runs, project, project_admin):
    _, secret = api_key_create(user=project_admin, project=project, name="export")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    rows = [json.loads(line) for line in download(client, "jsonl").splitlines()]
    assert sorted(row["id"] for row in rows) == sorted(run.pk for run in runs)


def test_the_list_page_links_to_the_export_of_what_it_shows(client, viewer, runs, sim_pool):
    client.force_login(viewer)
    page = client.get("/", {"verdict": "wrong", "created_after": "2000-01-01"}).content.decode()
    link = re.search(r'id="export-csv"', page) and re.search(
        r'href="(/api/runs/export\.csv\?[^"]+)"', page
    )
    assert link, "no export link on the list"
    href = link.group(1).replace("&amp;", "&")
    assert "verdict=wrong" in href and "created_after=2000-01-01T00%3A00%3A00" in href
    rows = csv_rows(b"".join(client.get(href)).decode())
    assert [int(row["id"]) for row in rows] == [runs[1].pk]
