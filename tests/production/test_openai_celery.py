"""/v1 on the production path: the run executes on a Celery worker process and the endpoint
(in this process, served through its ASGI application) follows it through channels_redis."""

from __future__ import annotations

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from orchestrator.models import Membership, Run
from orchestrator.providers.simulator import demo_pool
from orchestrator.services.api_keys import api_key_create
from orchestrator.services.pools import pool_sync_from_data, project_get_or_create
from tests.factories import make_member

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

QUESTION = [{"role": "user", "content": "What is 17 * 23?"}]


def setup() -> tuple[str, str]:
    project = project_get_or_create(name="Served")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=0.02))
    user = make_member(project=project, role=Membership.Role.REVIEWER)
    _, key = api_key_create(user=user, project=project)
    return pool.api_slug, key


async def test_a_completion_streamed_and_not_follows_a_run_on_a_celery_worker(
    start_celery_worker, monkeypatch
):
    from webui.asgi import application

    # Each request's database thread closes its connection when the request ends, so the test
    # database can be dropped afterwards.
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)

    worker = await sync_to_async(start_celery_worker)()
    model, key = await sync_to_async(setup)()
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://testserver", timeout=60
    )
    client = openai.AsyncOpenAI(
        base_url="http://testserver/v1", api_key=key, http_client=http, max_retries=0
    )
    try:
        raw = await client.chat.completions.with_raw_response.create(model=model, messages=QUESTION)
        completion = raw.parse()
        run = await Run.objects.aget(pk=int(raw.headers["X-Conductor-Run-Id"]))
        assert run.status == Run.Status.SUCCEEDED
        assert completion.choices[0].message.content == run.answer
        assert completion.usage.total_tokens == run.tokens_in + run.tokens_out

        stream = await client.chat.completions.create(
            model=f"{model}:moa", messages=QUESTION, stream=True
        )
        chunks = [chunk async for chunk in stream]
        progress = [
            c.model_extra["conductor"] for c in chunks if "conductor" in (c.model_extra or {})
        ]
        streamed = await Run.objects.aget(pk=progress[0]["run_id"])
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == streamed.answer
        assert {"step.started", "step.finished"} <= {p["event"] for p in progress}
    finally:
        await http.aclose()
        await sync_to_async(connections.close_all)()
    log = await sync_to_async(worker.log)()
    assert log.count("orchestrator.tasks.run_execute_task[") >= 2  # both ran on the worker
