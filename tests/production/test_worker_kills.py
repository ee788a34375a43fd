"""Celery workers killed and stalled for real: a run that keeps killing its worker is failed with
that reason, and a worker that stalled past its lease cannot record anything once another worker
has taken the run over (the run's fencing token moved on)."""

from __future__ import annotations

import os
import signal

import pytest

from orchestrator import selectors, wire
from orchestrator.models import Run, RunEvent, Step
from tests.production.test_celery_path import (
    RUN_TIMEOUT,
    enqueued_code_run,
    wait_for,
    wait_until_finished,
)

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


def executor_pid(run: Run) -> int:
    """The process executing a run, from its executor token ("host:pid:random")."""
    run.refresh_from_db(fields=["executor"])
    return int(run.executor.split(":")[1])


def wait_for_execution(run: Run, number: int) -> None:
    """Until the ``number``-th execution of the run has claimed it and is calling models."""
    wait_for(
        lambda: Run.objects.filter(
            pk=run.pk, fence=number, status=Run.Status.RUNNING, executor__gt=""
        ).exists(),
        timeout=RUN_TIMEOUT,
        what=f"execution {number} of the run",
    )


def test_a_run_that_keeps_killing_its_worker_is_failed_with_that_reason(start_celery_worker):
    # A limit of 2, so the third delivery fails the run instead of executing it again.
    worker = start_celery_worker(CONDUCTOR_RUN_MAX_INTERRUPTIONS="2")
    run = enqueued_code_run(latency=1.0)

    # First, the whole worker dies (a lost machine); a new worker gets the run again.
    wait_for_execution(run, 1)
    worker.kill()
    worker = start_celery_worker(CONDUCTOR_RUN_MAX_INTERRUPTIONS="2")
    # Then the pool process executing it dies (out of memory); its worker survives.
    wait_for_execution(run, 2)
    os.kill(executor_pid(run), signal.SIGKILL)

    wait_until_finished(run, what="the run to be failed")
    assert run.status == Run.Status.FAILED
    assert "killed its worker 2 times" in run.error
    assert (run.fence, run.interruptions, run.executor) == (3, 2, "")
    finished = RunEvent.objects.get(run=run, type=wire.RUN_FINISHED)
    assert finished.data["status"] == "failed" and finished.data["error"] == run.error
    assert "killed its executor 2 times" in worker.log()


def test_a_stalled_worker_cannot_record_after_another_took_the_run_over(start_celery_worker):
    workers = [start_celery_worker(), start_celery_worker()]
    run = enqueued_code_run(latency=1.5)
    wait_for(
        lambda: Step.objects.filter(run=run, status=Step.Status.RUNNING).exists(),
        timeout=RUN_TIMEOUT,
        what="a step to be sent to its model",
    )
    stalled_step = Step.objects.get(run=run, status=Step.Status.RUNNING)
    stalled = executor_pid(run)
    os.kill(stalled, signal.SIGSTOP)  # stalls mid-call, holding its (soon lapsed) leases
    try:
        # Its leases lapse and the run's message comes back: the other worker takes it over.
        wait_for_execution(run, 2)
        assert executor_pid(run) != stalled
    finally:
        # It wakes up with its model call answered, while the other worker is mid-run.
        os.kill(stalled, signal.SIGCONT)
    wait_for(
        lambda: any("was taken over by another execution" in w.log() for w in workers),
        timeout=RUN_TIMEOUT,
        what="the stalled execution to be turned away at its first write",
    )
    wait_until_finished(run)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert (run.fence, run.interruptions) == (2, 1)

    stored = selectors.run_events_after(run_id=run.pk, seq=0)
    assert [event["seq"] for event in stored] == list(range(1, run.last_seq + 1))
    assert [event["type"] for event in stored].count(wire.RUN_FINISHED) == 1
    steps = list(Step.objects.filter(run=run))
    assert all(step.status == Step.Status.SUCCEEDED and step.attempts == 1 for step in steps)
    assert run.model_calls == len(steps) + sum(len(p.attempts) for p in run.plans.all())
    for step in steps:
        kinds = [e["type"] for e in stored if e.get("step", {}).get("id") == step.pk]
        if step.pk == stalled_step.pk:
            # Sent by the stalled worker, then again by the one that took over, whose result
            # is the one stored: the stalled worker's answer never was.
            assert kinds == [
                wire.STEP_CREATED, wire.STEP_STARTED, wire.STEP_STARTED,
                wire.STEP_FINISHED,
            ]  # fmt: skip
        else:
            assert kinds.count(wire.STEP_FINISHED) == 1
            assert kinds.count(wire.STEP_STARTED) == 1
