"""The review queue and its insight counts: which runs want review, filters, visibility."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from orchestrator import selectors
from orchestrator.services import review
from tests.factories import make_pool, make_project, make_run, make_step

pytestmark = pytest.mark.django_db

THRESHOLD = 0.5


@pytest.fixture
def runs(sim_pool, reviewer):
    """One run of each kind the queue takes, and two it leaves out."""
    kinds = review.failure_kinds_ensure(project=sim_pool.project)
    made = {
        "failed": make_run(pool=sim_pool, status="failed"),
        "wrong": make_run(pool=sim_pool, status="succeeded", score=0.0),
        "right": make_run(pool=sim_pool, status="succeeded", score=1.0),
        "unscored": make_run(pool=sim_pool, status="succeeded"),
        "flagged": make_run(pool=sim_pool, status="succeeded", score=1.0),
        "labelled": make_run(pool=sim_pool, status="succeeded"),
        "human_wrong": make_run(pool=sim_pool, status="succeeded", score=1.0),
    }
    review.run_flag(actor=reviewer, run=made["flagged"], flagged=True)
    review.label_add(actor=reviewer, run=made["labelled"], kind=kinds[1])
    # The human score wins over the grader's.
    review.review_score_set(actor=reviewer, run=made["human_wrong"], score=0.0)
    return made


def queue_ids(user, **filters) -> list[int]:
    return list(
        selectors.review_queue(user=user, threshold=THRESHOLD, **filters).values_list(
            "pk", flat=True
        )
    )


def test_the_queue_holds_failed_wrong_flagged_and_labelled_runs_newest_first(runs, viewer):
    expected = [runs[name].pk for name in ("failed", "wrong", "flagged", "labelled", "human_wrong")]
    assert queue_ids(viewer) == sorted(expected, reverse=True)


def test_a_human_score_that_says_right_takes_a_run_out_of_the_queue(runs, reviewer):
    review.review_score_set(actor=reviewer, run=runs["wrong"], score=1.0)
    assert runs["wrong"].pk not in queue_ids(reviewer)


def test_resolved_runs_leave_the_open_queue(runs, reviewer):
    review.review_resolve(actor=reviewer, run=runs["failed"], note="Known.")
    assert runs["failed"].pk not in queue_ids(reviewer)
    assert queue_ids(reviewer, state="resolved") == [runs["failed"].pk]
    assert runs["failed"].pk in queue_ids(reviewer, state="all")


def test_the_queue_filters_by_label_assignee_and_the_runs_list_filters(runs, reviewer):
    kind = review.failure_kinds_ensure(project=runs["labelled"].project)[1]
    assert queue_ids(reviewer, kind=kind.pk) == [runs["labelled"].pk]
    review.run_assign(actor=reviewer, run=runs["wrong"], assignee=reviewer)
    assert queue_ids(reviewer, assignee="rui-reviewer") == [runs["wrong"].pk]
    assert queue_ids(reviewer, status="failed") == [runs["failed"].pk]


def test_the_queue_shows_only_the_users_projects(runs, outsider):
    own = make_run(pool=make_pool(project=outsider.memberships.get().project), status="failed")
    assert queue_ids(outsider) == [own.pk]


def test_a_queue_page_costs_the_same_queries_however_many_runs(
    runs, reviewer, django_assert_max_num_queries
):
    with django_assert_max_num_queries(4):
        page = list(selectors.review_queue(user=reviewer, threshold=THRESHOLD)[:50])
        for run in page:
            getattr(run, "review", None)
            list(run.labels.all())
    assert len(page) == 5


def test_insights_count_by_label_worker_and_strategy_per_day(runs, sim_pool, reviewer):
    make_step(run=runs["failed"], worker_name="sim-math")
    make_step(run=runs["failed"], index=1, worker_name="sim-math")
    make_step(run=runs["wrong"], worker_name="sim-code")
    make_step(run=runs["right"], worker_name="sim-code")  # not a run that wants review
    old = make_run(pool=sim_pool, status="failed")
    old.created_at = timezone.now() - dt.timedelta(days=40)
    old.save(update_fields=["created_at"])
    make_run(pool=make_pool(project=make_project()), status="failed")  # another project

    counts = selectors.review_insights(
        user=reviewer,
        project=sim_pool.project,
        threshold=THRESHOLD,
        since=timezone.now() - dt.timedelta(days=30),
    )
    assert [(row["name"], row["runs"]) for row in counts["by_kind"]] == [("wrong worker", 1)]
    assert counts["by_worker"] == [
        {"worker": "sim-code", "runs": 1},
        {"worker": "sim-math", "runs": 1},
    ]
    today = timezone.localdate().isoformat()
    assert counts["by_day"] == [{"day": today, "strategy": "conductor", "runs": 5}]
