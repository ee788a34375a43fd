"""The production path for real: PostgreSQL, Redis, channels_redis and Celery worker processes.

A run created through the services executes on a separate `celery worker` process, is stored in
PostgreSQL, and its live events reach the page's websocket consumer (and a bare channel-layer
subscriber) in this process through channels_redis. A worker killed
with SIGKILL mid-run loses nothing: another worker finishes the run and no finished step is sent
to its model again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter

import channels_redis.core
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connections

from orchestrator import events, selectors, wire
from orchestrator.models import Membership, Plan, Run, RunEvent, Step
from orchestrator.providers.simulator import demo_pool, load_suite
from orchestrator.services.execution import run_enqueue
from orchestrator.services.pools import pool_sync_from_data, project_get_or_create
from orchestrator.services.runs import run_create
from tests.factories import make_member
from tests.production.conftest import VISIBILITY_TIMEOUT_SECONDS
from webui.routing import websocket_urlpatterns

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

RUN_TIMEOUT = 45.0


def first_task(domain: str):
    return next(task for task in load_suite() if task.domain == domain)


def simulated_pool(*, latency: float):
    """The demo pool with every model call (conductor and workers) taking about ``latency`` s."""
    project = project_get_or_create(name="Production path")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=latency))
    return pool


def enqueued_code_run(*, latency: float) -> Run:
    """A run of the suite's first code task (plan, implement, review: steps one after another)
    on the demo pool with every call taking about ``latency`` s, enqueued on the workers."""
    task = first_task("code")
    pool = simulated_pool(latency=latency)
    return run_create(pool=pool, input=task.question, reference=task.reference, grader=task.grader)


def wait_for(condition, *, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def wait_until_finished(run: Run, *, what: str = "the run to finish") -> None:
    """Until ``run`` has finished (any way), then refresh it."""
    wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=Run.FINISHED).exists(),
        timeout=RUN_TIMEOUT,
        what=what,
    )
    run.refresh_from_db()


def stored_events(run_id: int) -> list[dict]:
    return selectors.run_events_after(run_id=run_id, seq=0)


@pytest.fixture
async def close_thread_connections():
    """Close the connections of the thread that runs this async test's ORM calls, so the test
    database can be dropped at the end of the session."""
    yield
    await sync_to_async(connections.close_all)()


async def test_run_executes_on_a_celery_worker_and_streams_events_through_redis(
    start_celery_worker, close_thread_connections
):
    worker = await sync_to_async(start_celery_worker)()
    task = first_task("arithmetic")
    pool = await sync_to_async(simulated_pool)(latency=0.05)
    viewer = await sync_to_async(
        lambda: make_member(project=pool.project, role=Membership.Role.VIEWER)
    )()
    run = await sync_to_async(run_create)(
        pool=pool, input=task.question, reference=task.reference, enqueue=False
    )
    layer = get_channel_layer()
    assert isinstance(layer, channels_redis.core.RedisChannelLayer)
    # Two listeners in this process, while the run executes in the worker process: the page's
    # websocket consumer, and a bare subscriber of the run's group on the channel layer.
    channel = await layer.new_channel()
    await layer.group_add(events.group_name(run.pk), channel)
    page = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/runs/{run.pk}/")
    page.scope["user"] = viewer
    try:
        connected, _ = await page.connect(timeout=10)
        assert connected
        snapshot = await page.receive_json_from(timeout=10)
        assert snapshot["type"] == wire.SNAPSHOT and snapshot["seq"] == 1  # queued
        # Listening first, then handed to Celery: every later event must arrive live.
        await sync_to_async(run_enqueue)(run_id=run.pk)
        async with asyncio.timeout(RUN_TIMEOUT):
            on_page: list[dict] = []
            while not on_page or on_page[-1]["type"] != wire.RUN_FINISHED:
                on_page.append(await page.receive_json_from(timeout=RUN_TIMEOUT))
            on_layer: list[dict] = []
            while not on_layer or on_layer[-1]["type"] != wire.RUN_FINISHED:
                message = await layer.receive(channel)
                if message["type"] == events.LAYER_BATCH_TYPE:
                    on_layer.extend(message["events"])
                else:
                    assert message["type"] == events.LAYER_MESSAGE_TYPE
                    on_layer.append(message["event"])
        assert await page.receive_nothing(timeout=0.2)
    finally:
        await page.disconnect()
        await layer.group_discard(events.group_name(run.pk), channel)
        await layer.close_pools()

    run = await Run.objects.aget(pk=run.pk)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.answer
    assert run.score is not None  # graded against the reference
    steps = [step async for step in Step.objects.filter(run=run).order_by("round", "index")]
    assert len(steps) == run.step_count >= 2
    for step in steps:
        assert step.status == Step.Status.SUCCEEDED
        assert step.response and step.messages and step.tokens_in > 0 and step.attempts == 1
    assert run.answer == steps[-1].response  # the answer is the last step's response
    assert await Plan.objects.filter(run=run).acount() >= 1

    # The live stream: seq 2..last without a gap, ending with run.finished, equal to what is
    # stored (seq 1, "queued", was published before anyone could subscribe), on both listeners.
    live = on_page
    assert [event["seq"] for event in live] == list(range(2, run.last_seq + 1))
    stored = await sync_to_async(stored_events)(run.pk)
    assert stored[0] == {"type": wire.RUN_STATUS, "run": run.pk, "seq": 1, "status": "queued"}
    assert live == stored[1:]
    assert on_layer == live
    assert live[0] == {"type": wire.RUN_STATUS, "run": run.pk, "seq": 2, "status": "planning"}
    assert live[-1]["status"] == Run.Status.SUCCEEDED and live[-1]["answer"] == run.answer
    for step in steps:
        kinds = [e["type"] for e in live if e.get("step", {}).get("id") == step.pk]
        assert kinds == [wire.STEP_CREATED, wire.STEP_STARTED, wire.STEP_FINISHED]

    # It really ran on the worker process (this process never executes a celery-backend run).
    log = await sync_to_async(worker.log)()
    assert "orchestrator.tasks.run_execute_task[" in log and " succeeded in " in log


def test_run_survives_its_worker_being_killed_mid_run(start_celery_worker):
    first = start_celery_worker()
    run = enqueued_code_run(latency=0.5)  # plan, implement, review: three steps, one after another

    def one_step_done_and_more_to_do():
        steps = list(Step.objects.filter(run=run))
        done = [step for step in steps if step.status == Step.Status.SUCCEEDED]
        return done if done and len(done) < len(steps) else None

    wait_for(one_step_done_and_more_to_do, timeout=RUN_TIMEOUT, what="the first finished step")
    first.kill()
    run.refresh_from_db()
    assert not run.is_finished, "the run finished before the kill; it proves nothing"

    before = {step.pk: step for step in Step.objects.filter(run=run, status=Step.Status.SUCCEEDED)}
    plans_before = {plan.round: len(plan.attempts) for plan in Plan.objects.filter(run=run)}
    assert before and plans_before

    second = start_celery_worker()
    wait_until_finished(run, what="the run to finish on the second worker")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert "run_execute_task" in second.log()

    after = {step.pk: step for step in Step.objects.filter(run=run)}
    assert all(step.status == Step.Status.SUCCEEDED for step in after.values())
    assert len(after) > len(before)
    for step_id, kept in before.items():
        # Same row, same result, same single call: the second worker never sent it again.
        resumed = after[step_id]
        assert resumed.attempts == kept.attempts == 1
        assert resumed.finished_at == kept.finished_at
        assert resumed.response == kept.response
    for round_, attempts in plans_before.items():
        # The conductor was not asked again for a plan it had already written.
        assert len(Plan.objects.get(run=run, round=round_).attempts) == attempts

    stored = stored_events(run.pk)
    assert [event["seq"] for event in stored] == list(range(1, run.last_seq + 1))
    started = Counter(e["step"]["id"] for e in stored if e["type"] == wire.STEP_STARTED)
    finished = Counter(e["step"]["id"] for e in stored if e["type"] == wire.STEP_FINISHED)
    for step_id in before:
        assert started[step_id] == 1
    assert all(finished[step_id] == 1 for step_id in after)
    assert [e["type"] for e in stored].count(wire.RUN_FINISHED) == 1
    assert RunEvent.objects.filter(run=run, type=wire.RUN_FINISHED).count() == 1


def test_a_run_longer_than_the_visibility_timeout_executes_once(start_celery_worker):
    # Redis hands an unacknowledged message to another worker after the visibility timeout,
    # although its first worker is alive and still executing the run. The run's lease must
    # turn that second delivery away instead of executing the run a second time alongside.
    workers = [start_celery_worker(), start_celery_worker()]
    run = enqueued_code_run(latency=1.5)  # five calls one after another: well over the timeout
    wait_until_finished(run)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.wall_time > VISIBILITY_TIMEOUT_SECONDS, "the run was too short to be redelivered"

    logs = [worker.log() for worker in workers]
    received = sum(
        1
        for log in logs
        for line in log.splitlines()
        if "run_execute_task[" in line and line.endswith(" received")
    )
    assert received >= 2, "the message was never delivered a second time; this proves nothing"

    stored = stored_events(run.pk)
    started = Counter(e["step"]["id"] for e in stored if e["type"] == wire.STEP_STARTED)
    steps = list(Step.objects.filter(run=run))
    assert steps and all(step.attempts == 1 for step in steps)
    assert {step.pk: started[step.pk] for step in steps} == {step.pk: 1 for step in steps}
    assert all(len(plan.attempts) == 1 for plan in Plan.objects.filter(run=run))
    assert [e["type"] for e in stored].count(wire.RUN_FINISHED) == 1
    assert any("is being executed elsewhere" in log for log in logs)


def test_a_run_survives_its_pool_process_being_killed(start_celery_worker):
    # The worker's main process survives and (reject_on_worker_lost) puts the message back at
    # once; its new pool process takes over when the dead process's lease lapses.
    worker = start_celery_worker()
    run = enqueued_code_run(latency=0.5)
    wait_for(
        lambda: Step.objects.filter(run=run, status=Step.Status.SUCCEEDED).exists(),
        timeout=RUN_TIMEOUT,
        what="the first finished step",
    )
    (child,) = worker.pool_children()
    os.kill(child, signal.SIGKILL)
    done_before = {
        step.pk: step.finished_at
        for step in Step.objects.filter(run=run, status=Step.Status.SUCCEEDED)
    }
    wait_until_finished(run, what="the run to finish after its pool process died")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert "WorkerLostError" in worker.log() or "SIGKILL" in worker.log()
    for step in Step.objects.filter(run=run):
        assert step.status == Step.Status.SUCCEEDED
        if step.pk in done_before:
            assert step.finished_at == done_before[step.pk] and step.attempts == 1
