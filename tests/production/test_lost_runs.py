"""A run that was created always finishes, on the production path (PostgreSQL, Redis, Celery).

Its message may be lost (the broker was away when it was created, the web process died between
commit and enqueue): the workers' sweep hands it to Celery again. A sweep that re-enqueues a run
whose message is merely waiting executes nothing twice. A worker whose database connection is
dropped mid-run retries the task and resumes the run.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import psycopg
import pytest
import redis
from django.utils import timezone

from harness.connections import WORKER_APP_NAME
from orchestrator import wire
from orchestrator.models import Plan, Run, Step
from orchestrator.services.runs import run_create
from tests.production.conftest import created_database_url as database_url_for_tests
from tests.production.test_celery_path import (
    RUN_TIMEOUT,
    first_task,
    simulated_pool,
    stored_events,
    wait_for,
)

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

SWEEP = {"CONDUCTOR_QUEUED_DEADLINE_SECONDS": "1", "CONDUCTOR_SWEEP_INTERVAL_SECONDS": "0.5"}


def finished(run_ids: list[int]):
    return lambda: not Run.objects.filter(pk__in=run_ids).exclude(status__in=Run.FINISHED).exists()


def assert_executed_once(run: Run) -> None:
    """Every step and plan made by one model call; every event once, seq without a gap."""
    steps = list(Step.objects.filter(run=run))
    assert steps and all(step.attempts == 1 for step in steps)
    assert all(len(plan.attempts) == 1 for plan in Plan.objects.filter(run=run))
    stored = stored_events(run.pk)
    assert [event["seq"] for event in stored] == list(range(1, run.last_seq + 1))
    started = Counter(e["step"]["id"] for e in stored if e["type"] == wire.STEP_STARTED)
    assert started == Counter({step.pk: 1 for step in steps})
    assert [e["type"] for e in stored].count(wire.RUN_FINISHED) == 1


def test_a_run_whose_message_was_lost_is_swept_and_finishes(start_celery_worker):
    worker = start_celery_worker(**SWEEP)
    task = first_task("arithmetic")
    pool = simulated_pool(latency=0.05)
    # Stored and committed, but never handed to Celery: as if the web process died right here.
    run = run_create(pool=pool, input=task.question, reference=task.reference, enqueue=False)
    wait_for(finished([run.pk]), timeout=RUN_TIMEOUT, what="the lost run to finish")
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert f"run {run.pk} was still queued after 1s; enqueuing it again" in worker.log()
    assert_executed_once(run)


def test_a_sweep_that_duplicates_waiting_runs_executes_nothing_twice(
    start_celery_worker, route_runs_to, settings
):
    # Runs whose messages wait in the queue (no worker yet) past the deadline: the sweep sends
    # each a second message, once however often it runs. Two worker processes then get both
    # messages of every run, some at the same time.
    from django.conf import settings as live_settings

    from orchestrator.tasks import runs_requeue_stale_task

    settings.CONDUCTOR_QUEUED_DEADLINE_SECONDS = 5
    task = first_task("arithmetic")
    pool = simulated_pool(latency=0.2)
    runs = [run_create(pool=pool, input=task.question, reference=task.reference) for _ in range(3)]
    Run.objects.filter(pk__in=[run.pk for run in runs]).update(
        created_at=timezone.now() - timedelta(seconds=10)
    )
    broker = redis.Redis.from_url(live_settings.REDIS_URL)
    assert broker.llen(route_runs_to) == len(runs)
    runs_requeue_stale_task()
    runs_requeue_stale_task()
    assert broker.llen(route_runs_to) == 2 * len(runs)
    broker.close()

    worker = start_celery_worker(concurrency=2)
    wait_for(finished([run.pk for run in runs]), timeout=RUN_TIMEOUT, what="the runs to finish")

    def tasks_done() -> int:
        return sum(
            1
            for line in worker.log().splitlines()
            if "run_execute_task[" in line and " succeeded in " in line
        )

    # The duplicates find their runs executing (the lease sends them back for later) or
    # finished, and end without doing anything.
    wait_for(
        lambda: tasks_done() >= 2 * len(runs),
        timeout=RUN_TIMEOUT,
        what="every message to be handled",
    )
    for run in runs:
        run.refresh_from_db()
        assert run.status == Run.Status.SUCCEEDED, run.error
        assert_executed_once(run)


def test_a_worker_whose_database_connection_drops_mid_run_retries_and_resumes(
    start_celery_worker,
):
    worker = start_celery_worker(PGAPPNAME=WORKER_APP_NAME)
    task = first_task("code")  # plan, implement, review: three steps, one after another
    pool = simulated_pool(latency=0.5)
    run = run_create(pool=pool, input=task.question, reference=task.reference, grader=task.grader)
    wait_for(
        lambda: Step.objects.filter(run=run, status=Step.Status.SUCCEEDED).exists(),
        timeout=RUN_TIMEOUT,
        what="the first finished step",
    )
    # The server drops the worker's connection (a restart, a failover, an administrator).
    with psycopg.connect(database_url_for_tests(), autocommit=True) as admin:
        terminated = admin.execute(
            "SELECT count(*) FROM ("
            "  SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            "  WHERE datname = current_database() AND application_name = %s"
            ") AS t",
            [WORKER_APP_NAME],
        ).fetchone()[0]
    assert terminated == 1
    run.refresh_from_db()
    assert not run.is_finished, "the run finished before its connection dropped; proves nothing"
    done_before = {
        step.pk: step.finished_at
        for step in Step.objects.filter(run=run, status=Step.Status.SUCCEEDED)
    }

    wait_for(finished([run.pk]), timeout=RUN_TIMEOUT, what="the run to finish after the drop")
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert "Retry in" in worker.log()
    # Resumed, not restarted: what was finished before the drop was not sent to a model again
    # (a step that was under way then runs again), and the events go on without a gap.
    steps = {step.pk: step for step in Step.objects.filter(run=run)}
    assert all(step.status == Step.Status.SUCCEEDED for step in steps.values())
    assert {pk: steps[pk].finished_at for pk in done_before} == done_before
    stored = stored_events(run.pk)
    assert [event["seq"] for event in stored] == list(range(1, run.last_seq + 1))
    started = Counter(e["step"]["id"] for e in stored if e["type"] == wire.STEP_STARTED)
    assert all(started[pk] == 1 for pk in done_before)
    assert [e["type"] for e in stored].count(wire.RUN_FINISHED) == 1
