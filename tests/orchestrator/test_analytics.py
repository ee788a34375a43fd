"""Usage over time: sums, error rates and latency percentiles per bucket and group, computed in
the database, on what the user may see."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from orchestrator.analytics import MAX_SERIES, usage_over_time, window_problem
from orchestrator.models import Run, Step
from tests.factories import make_member, make_pool, make_project, make_run

DAY = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def run_at(pool, moment, **fields):
    run = make_run(pool=pool, **fields)
    Run.objects.filter(pk=run.pk).update(created_at=moment)
    return run


def step(run, index, worker, **fields):
    return Step.objects.create(
        run=run, round=0, index=index, instruction="Do it.", worker_index=0,
        worker_name=worker, model=f"sim/{worker}", **fields,
    )  # fmt: skip


@pytest.fixture
def runs(sim_pool, project):
    other_pool = make_pool(project=project, name="Second pool")
    made = []
    # Day 1: ten runs of the first pool, wall times 1..10 s, two failed.
    for i in range(10):
        status = Run.Status.FAILED if i < 2 else Run.Status.SUCCEEDED
        made.append(
            run_at(
                sim_pool,
                DAY + dt.timedelta(hours=i),
                status=status,
                wall_time=float(i + 1),
                tokens_in=100,
                tokens_out=10,
                cost=0.5,
                model_calls=3,
            )  # fmt: skip
        )
    # Day 2: one run of the second pool, still running.
    made.append(
        run_at(
            other_pool,
            DAY + dt.timedelta(days=1, hours=3),
            status=Run.Status.RUNNING,
            tokens_in=7,
            model_calls=1,
        )  # fmt: skip
    )
    return made


def test_a_day_per_pool_sums_and_percentiles(runs, viewer, sim_pool, project):
    usage = usage_over_time(
        user=viewer, project=project, group="pool", interval="day",
        since=DAY, until=DAY + dt.timedelta(days=3),
    )  # fmt: skip
    assert usage["buckets"] == [
        "2026-12-01T00:00:00Z",
        "2026-12-02T00:00:00Z",
        "2026-12-03T00:00:00Z",
    ]
    first, second = usage["series"]
    assert first["key"] == str(sim_pool.pk) and first["label"] == sim_pool.name
    day1 = first["points"][0]
    assert (day1["runs"], day1["calls"], day1["tokens_in"], day1["tokens_out"]) == (
        10,
        30,
        1000,
        100,
    )
    assert day1["cost"] == 5.0
    # Nearest rank of 1..10 s, read from the histogram: within 2.5%, never past the slowest.
    assert day1["latency_p50"] == pytest.approx(5.0, rel=0.025)
    assert day1["latency_p95"] == pytest.approx(10.0, rel=0.025) and day1["latency_p95"] <= 10
    assert day1["error_rate"] == 0.2 and day1["errors"] == 2
    assert first["points"][1]["runs"] == 0 and first["points"][1]["error_rate"] is None
    day2 = second["points"][1]
    assert second["label"] == "Second pool"
    assert day2["runs"] == 1 and day2["error_rate"] is None and day2["latency_p50"] is None
    assert usage["totals"]["runs"] == 11 and usage["totals"]["calls"] == 31


def test_hours_per_strategy(runs, viewer, project):
    usage = usage_over_time(
        user=viewer, project=project, group="strategy", interval="hour",
        since=DAY, until=DAY + dt.timedelta(hours=5),
    )  # fmt: skip
    assert len(usage["buckets"]) == 5
    (conductor,) = usage["series"]
    assert conductor["key"] == "conductor"
    assert [p["runs"] for p in conductor["points"]] == [1, 1, 1, 1, 1]
    # One run an hour: its latency is its own least and most, so exact.
    assert [p["latency_p50"] for p in conductor["points"]] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_per_worker_counts_steps_not_reused_ones(runs, viewer, project):
    first = runs[2]
    step(first, 0, "solver", status=Step.Status.SUCCEEDED, attempts=2, tokens_in=40,
         latency=0.5, cost=0.1)  # fmt: skip
    step(first, 1, "checker", status=Step.Status.FAILED, attempts=1, latency=2.0)
    original = step(runs[3], 0, "solver", status=Step.Status.SUCCEEDED, attempts=1, latency=1.5)
    step(runs[4], 0, "solver", status=Step.Status.SUCCEEDED, attempts=0, reused_from=original)
    usage = usage_over_time(
        user=viewer, project=project, group="worker", interval="day",
        since=DAY, until=DAY + dt.timedelta(days=1),
    )  # fmt: skip
    by_key = {s["key"]: s["points"][0] for s in usage["series"]}
    assert set(by_key) == {"solver", "checker"}
    solver = by_key["solver"]
    assert (solver["runs"], solver["calls"], solver["tokens_in"]) == (2, 3, 40)
    assert solver["latency_p50"] == pytest.approx(0.5, rel=0.025)
    assert solver["latency_p95"] == pytest.approx(1.5, rel=0.025)
    assert by_key["checker"]["error_rate"] == 1.0
    # The series with the most calls comes first.
    assert usage["series"][0]["key"] == "solver"


def test_what_the_user_may_not_see_is_not_counted(runs, project):
    stranger = make_member(project=make_project())
    usage = usage_over_time(
        user=stranger, project=project, group="pool", interval="day",
        since=DAY, until=DAY + dt.timedelta(days=2),
    )  # fmt: skip
    assert usage["series"] == []


def test_groups_past_the_limit_are_summed_as_other(project, viewer):
    for number in range(MAX_SERIES + 3):
        pool = make_pool(project=project, name=f"P{number:02d}", workers=1)
        run_at(pool, DAY, status=Run.Status.SUCCEEDED, model_calls=number + 1, wall_time=1.0)
    usage = usage_over_time(
        user=viewer, project=project, group="pool", interval="day",
        since=DAY, until=DAY + dt.timedelta(days=1),
    )  # fmt: skip
    assert len(usage["series"]) == MAX_SERIES + 1
    other = usage["series"][-1]
    assert other["key"] == "other" and other["points"][0]["runs"] == 3
    assert other["points"][0]["calls"] == 1 + 2 + 3
    assert usage["totals"]["runs"] == MAX_SERIES + 3


def test_a_window_too_long_or_backwards_is_refused():
    now = timezone.now()
    assert window_problem(interval="hour", since=now, until=now - dt.timedelta(1))
    assert "At most" in window_problem(
        interval="hour", since=now, until=now + dt.timedelta(days=90)
    )
    assert window_problem(interval="day", since=now, until=now + dt.timedelta(days=90)) == ""
