"""Celery tasks: they take ids, re-fetch, and call one service.

``run_execute_task`` is ``acks_late``: the broker keeps the message until the task returns, so a
worker that dies mid-run (SIGKILL, lost machine) has its run delivered again and resumed by
``run_execute``, which never calls a finished step's model again.

The Redis transport also delivers a message again when it stays unacknowledged longer than the
visibility timeout (``CONDUCTOR_VISIBILITY_TIMEOUT``), even if its worker is alive and still
running it. Two workers executing one run would call models twice and race on its rows, so the
task holds a short per-run lease in Redis while it executes, renewed by a heartbeat
(``orchestrator/lease.py``). A delivery
that finds the lease held by another worker neither runs nor waits: it asks to be retried once the
lease could have expired, so the run still finishes if the holder dies.

A delivery that takes the lease takes the run over in the database too (``services/ownership``):
the run's fencing token goes up, so a worker that stalled past its lease and wakes up later
cannot record anything more, and a run whose earlier workers all died holding it is failed
once that happened ``CONDUCTOR_RUN_MAX_INTERRUPTIONS`` times, instead of being delivered again
forever.

A database that is away or full (too many clients; a pool timeout, which Django raises as an
OperationalError too) fails the task, which is retried with backoff and resumes the run. Runs left
``queued`` because their message was lost are enqueued again by ``runs_requeue_stale_task``, which
the workers send periodically (webui/celery.py); a duplicate delivery is harmless (status check,
then the lease).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Task, shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from orchestrator import selectors
from orchestrator.lease import LEASE_KEY_PREFIX, RunLease, redis_client
from orchestrator.models import Run
from orchestrator.services.execution import (
    BATCH_ADVANCE_TASK,
    EXPERIMENT_EXECUTE_TASK,
    RUN_EXECUTE_TASK,
)

log = logging.getLogger(__name__)

REQUEUE_KEY_PREFIX = "conductor:run-requeued:"
# Errors that mean "the database is not available right now", not "this run is broken".
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
STALE_RUNS_PER_SWEEP = 1000
# A task that executes long work and may be delivered again: acknowledged only once it returns,
# redelivered when its worker is lost, and retried with backoff while the database is away.
RESUMABLE_TASK = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
    "max_retries": None,
    "autoretry_for": DATABASE_UNAVAILABLE,
    "retry_backoff": 1,
    "retry_backoff_max": 60,
    "retry_jitter": True,
}


@shared_task(name=RUN_EXECUTE_TASK, **RESUMABLE_TASK)
def run_execute_task(self: Task, run_id: int) -> None:
    """Execute (or resume) run ``run_id``. Idempotent: a finished or missing run is a no-op."""
    from orchestrator.services.runs import run_execute  # the engine loads only when a run does

    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        log.warning("run %s no longer exists; nothing to execute", run_id)
        return
    if status in Run.FINISHED:
        return
    redis_url = settings.REDIS_URL
    if not redis_url:  # an in-process broker (tests, eager mode): there is no second worker
        run_execute(run_id=run_id, resumable=True)
        return
    lease_seconds = settings.CONDUCTOR_RUN_LEASE_SECONDS
    lease = RunLease(run_id, redis_url=redis_url, seconds=lease_seconds)
    if not lease.acquire():
        # Another live worker is executing it (this is a duplicate delivery). Look again once
        # its lease could have lapsed; a retry is a new message, so this one is acknowledged.
        log.info("run %s is being executed elsewhere; checking again in %ss", run_id, lease_seconds)
        raise self.retry(countdown=lease_seconds)
    with lease:
        # The Redis lease makes this delivery the run's only executor: take the run over (its
        # fence goes up, so a stalled earlier holder can no longer record anything).
        run_execute(run_id=run_id, executor=lease.token, exclusive=True, resumable=True)


@shared_task(name="orchestrator.tasks.runs_requeue_stale_task", ignore_result=True)
def runs_requeue_stale_task() -> None:
    """Enqueue again the runs still queued past CONDUCTOR_QUEUED_DEADLINE_SECONDS.

    A run whose lease is held is being executed and is left alone; any other gets one new message
    per deadline at most, so a long backlog is not multiplied at every sweep.
    """
    from orchestrator.services.execution import run_enqueue

    deadline = settings.CONDUCTOR_QUEUED_DEADLINE_SECONDS
    client = redis_client(settings.REDIS_URL)
    stale = selectors.run_ids_queued_before(
        timezone.now() - timedelta(seconds=deadline), limit=STALE_RUNS_PER_SWEEP
    )
    for run_id in stale:
        if client.exists(f"{LEASE_KEY_PREFIX}{run_id}"):
            continue
        if not client.set(
            f"{REQUEUE_KEY_PREFIX}{run_id}", "1", nx=True, px=max(1, int(deadline * 1000))
        ):
            continue
        log.warning("run %s was still queued after %gs; enqueuing it again", run_id, deadline)
        run_enqueue(run_id=run_id)


@shared_task(name=EXPERIMENT_EXECUTE_TASK, **RESUMABLE_TASK)
def experiment_execute_task(self: Task, experiment_id: int) -> None:
    """Execute trials of experiment ``experiment_id`` one at a time until none is left to claim.
    Several run side by side (on any workers); a redelivery after a lost worker goes on with the
    trials not finished. Idempotent: a finished or cancelled experiment is a no-op."""
    from orchestrator.services.experiments import experiment_execute

    experiment_execute(experiment_id=experiment_id)


@shared_task(
    name=BATCH_ADVANCE_TASK,
    acks_late=True,
    ignore_result=True,
    max_retries=None,
    autoretry_for=DATABASE_UNAVAILABLE,
    retry_backoff=1,
    retry_backoff_max=60,
    retry_jitter=True,
)
def batch_advance_task(batch_id: int) -> None:
    """Make the replays of the next few pending items of batch ``batch_id``, then send itself
    again while items remain (a new message each time: it never waits on another task).
    Idempotent: an item already done is skipped, a finished batch is a no-op."""
    from orchestrator.services.batches import batch_advance, batch_enqueue

    if batch_advance(batch_id=batch_id):
        batch_enqueue(batch_id=batch_id)
