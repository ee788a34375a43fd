"""Review changes reach the open pages of a run over its websocket, also once it has finished."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import reverse

from orchestrator import delivery, wire
from orchestrator.models import Run
from orchestrator.services import review
from tests.factories import make_run, make_step
from webui.routing import websocket_urlpatterns

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]


async def opened(run_id: int) -> None:
    """Wait until the socket has opened. It is accepted before its checks and first reads (the
    handshake does not wait for them), and on the test database (in memory, shared between
    threads) a write made meanwhile finds the tables they read locked, at once."""
    for _ in range(500):
        if delivery.listening_locally(run_id):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the socket of run {run_id} never opened")


def finished_run(pool) -> tuple[Run, int]:
    run = make_run(pool=pool, status="succeeded", answer="42", score=0.0)
    step = make_step(run=run)
    return run, step.pk


async def test_a_comment_and_a_label_reach_a_viewer_watching_a_finished_run(
    sim_pool, viewer, reviewer
):
    run, step_id = await sync_to_async(finished_run)(sim_pool)
    kinds = await sync_to_async(review.failure_kinds_ensure)(project=sim_pool.project_id)
    # The page's socket asks for what comes after the seq its embedded state is current to.
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/runs/{run.pk}/?after={run.last_seq}"
    )
    communicator.scope["user"] = viewer
    connected, _ = await communicator.connect()
    assert connected
    await opened(run.pk)
    try:
        # The reviewer acts through the API, as their page does.
        client = Client()
        await sync_to_async(client.force_login)(reviewer)
        response = await sync_to_async(client.post)(
            reverse("api-run-comments", args=[run.pk]),
            {"body": "Wrong worker for this step.", "step": step_id},
            content_type="application/json",
        )
        assert response.status_code == 201
        response = await sync_to_async(client.post)(
            reverse("api-run-labels", args=[run.pk]),
            {"kind": kinds[1].pk},
            content_type="application/json",
        )
        assert response.status_code == 200

        comment = await communicator.receive_json_from(timeout=5)
        label = await communicator.receive_json_from(timeout=5)
    finally:
        await communicator.disconnect()

    assert comment["type"] == wire.COMMENT_CREATED and comment["seq"] == run.last_seq + 1
    assert comment["comment"]["step"] == step_id
    assert comment["comment"]["body"] == "Wrong worker for this step."
    assert label["type"] == wire.REVIEW_CHANGED and label["seq"] == run.last_seq + 2
    assert label["review"]["labels"] == [{"id": kinds[1].pk, "name": "wrong worker"}]
    assert label["by"] == "rui-reviewer"


async def test_a_page_that_reconnects_gets_the_review_events_it_missed(sim_pool, reviewer, viewer):
    run, _ = await sync_to_async(finished_run)(sim_pool)
    comment = await sync_to_async(review.comment_create)(actor=reviewer, run=run, body="Hmm.")
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/runs/{run.pk}/?after={run.last_seq}"
    )
    communicator.scope["user"] = viewer
    await communicator.connect()
    try:
        missed = await communicator.receive_json_from(timeout=5)
    finally:
        await communicator.disconnect()
    assert missed["type"] == wire.COMMENT_CREATED and missed["comment"]["id"] == comment.pk
