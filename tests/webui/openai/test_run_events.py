"""``run_events``: the events a /v1 completion or stream follows, stored then live."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from orchestrator import events, wire
from orchestrator.services.runs import run_create
from webui.openai import views

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]


async def test_a_batch_of_live_events_ending_the_run_ends_it_at_once(sim_pool, monkeypatch):
    # Were the batch not read, the events would be waited for until the next poll: never here.
    monkeypatch.setattr(views, "EVENT_POLL_SECONDS", 3600.0)
    run = await sync_to_async(run_create)(pool=sim_pool, input="What is 2 + 2?", enqueue=False)
    followed = views.run_events(run.pk)
    first = await asyncio.wait_for(anext(followed), 5)  # stored: run.status queued
    assert first["seq"] == 1

    def event(seq: int, type: str, data: dict) -> dict:
        return {"run": run.pk, "seq": seq, "type": type, "data": data}

    batch = [
        event(2, wire.RUN_STATUS, {"status": "running"}),
        event(3, wire.RUN_FINISHED, {"status": "succeeded"}),
    ]
    await get_channel_layer().group_send(
        events.group_name(run.pk), {"type": events.LAYER_BATCH_TYPE, "events": batch}
    )

    async def rest() -> list[dict]:
        return [event async for event in followed]

    received = await asyncio.wait_for(rest(), 5)
    assert [(e["seq"], e["type"]) for e in received] == [
        (2, wire.RUN_STATUS),
        (3, wire.RUN_FINISHED),
    ]
