"""``GET /api/analytics/`` and ``/analytics/``: usage per group and interval, with links that
open the runs behind each point; who may ask."""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from orchestrator.models import Run
from tests.factories import make_member, make_project, make_run

DAY = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def run_at(pool, moment, **fields):
    run = make_run(pool=pool, **fields)
    Run.objects.filter(pk=run.pk).update(created_at=moment)
    return run


@pytest.fixture
def runs(sim_pool):
    early = run_at(sim_pool, DAY + dt.timedelta(hours=5, minutes=10), status=Run.Status.SUCCEEDED,
                   model_calls=2, wall_time=1.0)  # fmt: skip
    late = run_at(sim_pool, DAY + dt.timedelta(hours=6, minutes=1), status=Run.Status.FAILED,
                  model_calls=1, wall_time=3.0)  # fmt: skip
    return early, late


def test_hours_per_pool_with_links_to_the_runs_behind(
    api_as, viewer, project, sim_pool, runs, client
):
    response = api_as(viewer).get(
        "/api/analytics/",
        {"project": project.slug, "group": "pool", "interval": "hour",
         "since": "2026-12-01T04:00:00Z", "until": "2026-12-01T08:00:00Z"},
    )  # fmt: skip
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["buckets"][:3] == [
        "2026-12-01T04:00:00Z",
        "2026-12-01T05:00:00Z",
        "2026-12-01T06:00:00Z",
    ]
    (series,) = body["series"]
    points = {p["bucket"]: p for p in series["points"]}
    five, six = points["2026-12-01T05:00:00Z"], points["2026-12-01T06:00:00Z"]
    assert (five["runs"], five["calls"], five["error_rate"]) == (1, 2, 0.0)
    assert (six["runs"], six["error_rate"], six["latency_p95"]) == (1, 1.0, 3.0)  # one: exact
    assert points["2026-12-01T04:00:00Z"]["runs_url"] is None
    # The link opens the runs list with exactly that hour's runs of that pool.
    query = parse_qs(urlsplit(five["runs_url"]).query)
    assert query["pool"] == [str(sim_pool.pk)]
    client.force_login(viewer)
    page = client.get(five["runs_url"]).content.decode()
    shown = {int(n) for n in re.findall(r'href="/runs/(\d+)/"', page)}
    assert shown == {runs[0].pk}


def test_defaults_bad_windows_and_unknown_groups(api_as, viewer, project):
    client = api_as(viewer)
    body = client.get("/api/analytics/", {"project": project.pk}).json()
    assert body["group"] == "pool" and body["interval"] == "day" and len(body["buckets"]) == 14
    assert timezone.now().isoformat()[:10] in body["buckets"][-1]
    bad = client.get("/api/analytics/", {"project": project.pk, "group": "vibes"})
    assert bad.status_code == 400 and "group" in bad.json()
    long = client.get(
        "/api/analytics/",
        {"project": project.pk, "interval": "hour", "since": "2026-01-01T00:00:00Z",
         "until": "2026-12-01T00:00:00Z"},
    )  # fmt: skip
    assert long.status_code == 400 and "At most" in long.json()["since"][0]


def test_another_projects_analytics_are_a_400(api_as, project, runs):
    stranger = make_member(project=make_project())
    response = api_as(stranger).get("/api/analytics/", {"project": project.pk})
    assert response.status_code == 400 and "project" in response.json()


def test_the_page_draws_the_same_usage_and_is_in_the_navigation(client, viewer, project, runs):
    client.force_login(viewer)
    page = client.get(
        "/analytics/",
        {"group": "strategy", "interval": "day", "from": "2026-12-01", "to": "2026-12-01"},
    ).content.decode()
    assert 'href="/analytics/"' in page and 'aria-current="page">Analytics' in page
    assert "2 runs, 3 model calls" in page
    assert 'id="analytics-data"' in page and "chart-calls" in page
    bad = client.get("/analytics/", {"from": "yesterday"}).content.decode()
    assert "Give a date as YYYY-MM-DD." in bad
