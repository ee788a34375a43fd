"""A server that sends ASGI lifespan events starts the inline recovery on ``lifespan.startup``:
a run that a stopped server left unfinished is resumed on this loop and finishes."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from orchestrator.models import Run, Step
from orchestrator.services import recovery
from orchestrator.services.runs import run_create
from webui.startup import with_server_startup


async def not_called(scope, receive, send):
    raise AssertionError("the lifespan scope must not reach the site")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_lifespan_startup_resumes_a_run_left_unfinished(sim_pool):
    def interrupted_run() -> Run:
        run = run_create(pool=sim_pool, input="What is 17 * 23?", strategy="single", enqueue=False)
        # A server stopped cleanly mid-run: planning, let go of, nothing executing it.
        Run.objects.filter(pk=run.pk).update(status=Run.Status.PLANNING)
        return run

    run = await sync_to_async(interrupted_run)()
    inbox: asyncio.Queue[dict] = asyncio.Queue()
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    with override_settings(CONDUCTOR_EXECUTION="inline"):
        application = with_server_startup(not_called)
        lifespan = asyncio.create_task(application({"type": "lifespan"}, inbox.get, send))
        await inbox.put({"type": "lifespan.startup"})
        try:
            async with asyncio.timeout(10):
                while (await Run.objects.aget(pk=run.pk)).status not in Run.FINISHED:
                    await asyncio.sleep(0.05)
        finally:
            watcher = recovery._watcher
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        await inbox.put({"type": "lifespan.shutdown"})
        await lifespan

    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]
    run = await Run.objects.aget(pk=run.pk)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert (run.fence, run.interruptions) == (1, 0)
    assert await Step.objects.filter(run=run, status=Step.Status.SUCCEEDED).acount() == 1


def test_nothing_is_started_when_runs_execute_on_celery(settings):
    settings.CONDUCTOR_EXECUTION = "celery"
    assert with_server_startup(not_called) is not_called
