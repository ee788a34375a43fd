"""The Celery task that executes a run, outside the production stack: run in-process by Celery
itself (``apply``, as with an in-memory broker), and with its per-run lease in a real Redis.

The lease tests use TEST_REDIS_URL (default redis://127.0.0.1:6379/15, as the Makefile's); they
skip where no Redis answers, unless CONDUCTOR_REQUIRE_SERVICES=1 (CI), where that is a failure.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from celery.exceptions import Retry

from orchestrator.lease import RunLease
from orchestrator.models import Run, RunEvent
from orchestrator.services.runs import run_create
from orchestrator.tasks import run_execute_task
from tests.availability import unavailable

QUESTION = "What is 17 + 25?"
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
def queued_run(sim_pool) -> Run:
    return run_create(pool=sim_pool, input=QUESTION, reference="42", enqueue=False)


@pytest.fixture
def redis_client():
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as error:
        problem = f"Redis at {REDIS_URL} is unreachable ({error})"
        unavailable(problem, required_by="CONDUCTOR_REQUIRE_SERVICES")
    yield client
    client.close()


@pytest.fixture
def with_redis(settings, redis_client):
    """The task sees a Redis (so it takes the lease there), with a lease short enough to test."""
    settings.REDIS_URL = REDIS_URL
    settings.CONDUCTOR_RUN_LEASE_SECONDS = 2
    return redis_client


def lease_keys(client, run_id: int) -> list[bytes]:
    return list(client.scan_iter(match=f"*lease*:{run_id}"))


def event_types(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def execute(run_id: int, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return run_execute_task.apply(args=[run_id])


def test_the_task_executes_a_queued_run_to_its_end(
    settings, queued_run, django_capture_on_commit_callbacks
):
    settings.REDIS_URL = ""  # an in-process broker: no other worker, so no lease

    result = execute(queued_run.pk, django_capture_on_commit_callbacks)

    assert result.successful()
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.SUCCEEDED
    assert queued_run.answer and queued_run.model_calls > 0
    assert event_types(queued_run)[-1] == "run.finished"


def test_a_finished_or_missing_run_is_left_alone(
    settings, queued_run, django_capture_on_commit_callbacks
):
    settings.REDIS_URL = ""
    execute(queued_run.pk, django_capture_on_commit_callbacks)
    queued_run.refresh_from_db()
    finished_seq, finished_at = queued_run.last_seq, queued_run.finished_at

    again = execute(queued_run.pk, django_capture_on_commit_callbacks)  # a redelivery
    missing = execute(queued_run.pk + 1000, django_capture_on_commit_callbacks)

    assert again.successful() and missing.successful()
    queued_run.refresh_from_db()
    assert (queued_run.last_seq, queued_run.finished_at) == (finished_seq, finished_at)
    assert not Run.objects.filter(pk=queued_run.pk + 1000).exists()


def test_with_redis_the_run_executes_holding_a_lease_it_then_releases(
    with_redis, queued_run, django_capture_on_commit_callbacks
):
    fence_before = queued_run.fence

    result = execute(queued_run.pk, django_capture_on_commit_callbacks)

    assert result.successful()
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.SUCCEEDED
    assert queued_run.fence == fence_before + 1  # the delivery took the run over
    assert lease_keys(with_redis, queued_run.pk) == []


def test_a_delivery_that_finds_the_lease_held_elsewhere_neither_runs_nor_waits(
    with_redis, queued_run
):
    other = RunLease(queued_run.pk, redis_url=REDIS_URL, seconds=30)
    assert other.acquire()
    try:
        with pytest.raises(Retry):
            run_execute_task(queued_run.pk)  # called directly, a retry raises
        queued_run.refresh_from_db()
        assert queued_run.status == Run.Status.QUEUED
        assert event_types(queued_run) == ["run.status"]  # only "queued"
    finally:
        other.release()
    assert lease_keys(with_redis, queued_run.pk) == []


def test_a_lease_is_exclusive_renewed_while_held_and_free_once_released(with_redis):
    run_id = 10**12 + uuid.uuid4().int % 10**6  # no run of another test has this id
    first = RunLease(run_id, redis_url=REDIS_URL, seconds=1)
    second = RunLease(run_id, redis_url=REDIS_URL, seconds=1)
    assert first.acquire()
    try:
        assert not second.acquire()
        # Held past its own length: the heartbeat keeps renewing it.
        assert with_redis.pttl(first.key) > 0
        time.sleep(2.5)
        assert not second.acquire()
    finally:
        first.release()
    assert second.acquire()
    second.release()
    assert lease_keys(with_redis, run_id) == []


def test_a_lease_whose_holder_stopped_renewing_lapses(with_redis):
    run_id = 10**12 + uuid.uuid4().int % 10**6
    holder = RunLease(run_id, redis_url=REDIS_URL, seconds=1)
    # A holder that died: its key is there, but nothing renews it.
    with_redis.set(holder.key, holder.token, px=holder.milliseconds)
    later = RunLease(run_id, redis_url=REDIS_URL, seconds=1)
    assert not later.acquire()

    time.sleep(1.5)  # longer than the lease

    assert later.acquire()
    later.release()
