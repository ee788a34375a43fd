"""The inline backend: a run executes as a task on the server's own loop, and its live events
reach the channel group on that loop (the in-memory layer only delivers within one loop)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.test import override_settings

from orchestrator import events
from orchestrator.models import Run
from orchestrator.services import execution
from orchestrator.services.runs import run_cancel, run_create

QUESTION = (
    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?"
)


async def drain(layer, channel: str) -> list[dict]:
    received = []
    while True:
        try:
            message = await asyncio.wait_for(layer.receive(channel), timeout=0.2)
        except TimeoutError:
            return received
        received.extend(message["events"] if "events" in message else [message["event"]])


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_a_run_created_in_a_sync_view_executes_on_the_server_loop(sim_pool, project_admin):
    layer = get_channel_layer()
    channel = await layer.new_channel()

    def create_as_a_sync_view_would() -> Run:
        # Django runs sync views through sync_to_async; on commit, run_enqueue runs there.
        return run_create(pool=sim_pool, input=QUESTION, created_by=project_admin)

    with override_settings(CONDUCTOR_EXECUTION="inline"):
        run = await sync_to_async(create_as_a_sync_view_would)()
        await layer.group_add(events.group_name(run.pk), channel)
        for _ in range(50):
            task = execution.inline_task(run.pk)
            if task is not None:
                break
            await asyncio.sleep(0.01)
    assert task is not None and task.get_loop() is asyncio.get_running_loop()
    await task

    await run.arefresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    received = await drain(layer, channel)
    assert received, "no live event reached the group"
    assert received[-1]["type"] == "run.finished"
    seqs = [event["seq"] for event in received]
    assert seqs == list(range(seqs[0], run.last_seq + 1))
    assert execution.inline_task(run.pk) is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_cancelling_stops_the_inline_task(sim_pool, monkeypatch):
    started = asyncio.Event()
    from orchestrator.services import runs

    async def slow_execution(*, run_id, observer=None):
        started.set()
        await asyncio.sleep(30)

    monkeypatch.setattr(runs, "run_execute_async", slow_execution)
    run = await sync_to_async(run_create)(pool=sim_pool, input=QUESTION, enqueue=False)
    execution.run_enqueue(run_id=run.pk)
    await asyncio.wait_for(started.wait(), 2)
    task = execution.inline_task(run.pk)

    await sync_to_async(run_cancel)(run_id=run.pk)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    await run.arefresh_from_db()
    assert run.status == Run.Status.CANCELLED


def test_celery_backend_sends_the_run_id_to_the_run_execute_task(settings):
    from celery import current_app

    import orchestrator.tasks  # noqa: F401  (registers the task the message names)

    settings.CONDUCTOR_EXECUTION = "celery"

    execution.run_enqueue(run_id=42)

    with current_app.connection_for_read() as connection:
        queue = connection.SimpleQueue(settings.CELERY_TASK_DEFAULT_QUEUE)
        try:
            message = queue.get(timeout=2)
            message.ack()
        finally:
            queue.close()
    assert message.headers["task"] == execution.RUN_EXECUTE_TASK
    assert message.headers["task"] in current_app.tasks  # a worker knows the name
    args, kwargs, _ = message.decode()
    assert (args, kwargs) == ([42], {})
