"""RunConsumer: snapshot, live events, resuming with ?after, and who may watch."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.test import Client

from orchestrator import delivery, events, selectors, wire
from orchestrator.models import Run
from orchestrator.services.runs import run_create, run_execute_async
from tests.factories import make_step
from webui.routing import websocket_urlpatterns

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]

QUESTION = (
    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?"
)


def communicator_for(run_id: int, user, query: str = "") -> WebsocketCommunicator:
    path = f"/ws/runs/{run_id}/" + (f"?{query}" if query else "")
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    return communicator


async def new_run(pool) -> Run:
    return await sync_to_async(run_create)(pool=pool, input=QUESTION, enqueue=False)


async def publish(run_id: int, status: str) -> dict:
    return await sync_to_async(events.publish)(run_id, wire.RUN_STATUS, {"status": status})


async def close_code(communicator) -> int | None:
    """Connect, and return the code the consumer closed with (None if it sent something else)."""
    try:
        await communicator.connect()
        output = await communicator.receive_output(timeout=2)
    finally:
        await communicator.disconnect()
    return output.get("code") if output["type"] == "websocket.close" else None


async def first_frame(communicator) -> dict:
    """Connect (which must be accepted), take the first frame the consumer sends, disconnect."""
    try:
        connected, _ = await communicator.connect()
        assert connected
        return await communicator.receive_json_from()
    finally:
        await communicator.disconnect()


async def receive_until_finished(communicator) -> list[dict]:
    received = []
    while not received or received[-1]["type"] != "run.finished":
        received.append(await communicator.receive_json_from(timeout=5))
    return received


async def test_connect_sends_a_snapshot_of_the_run(sim_pool, viewer):
    run = await new_run(sim_pool)
    step = await sync_to_async(make_step)(run=run, instruction="Add the numbers.")
    communicator = communicator_for(run.pk, viewer)
    snapshot = await first_frame(communicator)

    assert snapshot["type"] == "snapshot"
    assert snapshot["run"] == run.pk and snapshot["seq"] == 1  # run.status queued
    assert snapshot["state"]["run"]["status"] == "queued"
    assert [s["id"] for s in snapshot["state"]["steps"]] == [step.pk]
    assert snapshot["state"]["steps"][0]["instruction"] == "Add the numbers."


async def test_live_events_of_an_executing_run_arrive_in_order_once(sim_pool, viewer):
    run = await new_run(sim_pool)
    communicator = communicator_for(run.pk, viewer)
    try:
        await communicator.connect()
        snapshot = await communicator.receive_json_from()
        await run_execute_async(run_id=run.pk)
        received = await receive_until_finished(communicator)
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()

    await run.arefresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert [e["seq"] for e in received] == list(range(snapshot["seq"] + 1, run.last_seq + 1))
    stored = await sync_to_async(selectors.run_events_after)(run_id=run.pk, seq=snapshot["seq"])
    assert received == stored
    assert {"step.created", "step.started", "step.finished"} <= {e["type"] for e in received}


async def test_after_resumes_without_gaps_or_duplicates(sim_pool, viewer):
    run = await new_run(sim_pool)  # seq 1
    await publish(run.pk, "planning")  # seq 2
    await publish(run.pk, "running")  # seq 3
    communicator = communicator_for(run.pk, viewer, query="after=1")
    try:
        await communicator.connect()
        missed = [await communicator.receive_json_from() for _ in range(2)]
        live = await publish(run.pk, "planning")  # seq 4
        arrived = await communicator.receive_json_from()
        # An event the client already has (seq 3) is not sent again.
        await communicator.send_input({"type": "run.event", "event": missed[-1]})
        layer_message = {"type": events.LAYER_MESSAGE_TYPE, "event": missed[-1]}
        await get_channel_layer().group_send(events.group_name(run.pk), layer_message)
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()

    assert [e["seq"] for e in missed] == [2, 3]
    assert [e["status"] for e in missed] == ["planning", "running"]
    assert arrived == live and arrived["seq"] == 4


async def test_an_after_that_is_not_a_plain_number_gets_a_snapshot(sim_pool, viewer):
    run = await new_run(sim_pool)
    communicator = communicator_for(run.pk, viewer, query="after=%C2%B2")  # "²"
    first = await first_frame(communicator)

    assert first["type"] == "snapshot" and first["run"] == run.pk


async def test_the_snapshot_covers_events_sent_while_connecting(sim_pool, viewer):
    run = await new_run(sim_pool)
    old_event = (await sync_to_async(selectors.run_events_after)(run_id=run.pk, seq=0))[0]
    communicator = communicator_for(run.pk, viewer)
    try:
        await communicator.connect()
        snapshot = await communicator.receive_json_from()
        await get_channel_layer().group_send(
            events.group_name(run.pk), {"type": events.LAYER_MESSAGE_TYPE, "event": old_event}
        )
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()
    assert snapshot["seq"] == old_event["seq"]


@pytest.mark.parametrize("who", ["anonymous", "outsider"])
async def test_anonymous_users_and_outsiders_are_refused(sim_pool, outsider, who):
    run = await new_run(sim_pool)
    user = AnonymousUser() if who == "anonymous" else outsider
    assert await close_code(communicator_for(run.pk, user)) == 4403


@pytest.mark.parametrize("query", ["", "after=0"])
async def test_a_socket_marks_its_run_watched_before_it_reads_and_an_outsiders_does_not(
    sim_pool, viewer, outsider, monkeypatch, query
):
    """Until a run is marked watched its execution need not send its events to the channel
    layer (PostgreSQL): the socket marks it before it reads what it sends first (the snapshot,
    or the events after ``after``), so what it does not read is sent to it; a refused socket
    leaves the run as it was."""
    from webui import snapshots

    run = await new_run(sim_pool)
    assert await close_code(communicator_for(run.pk, outsider)) == 4403
    await run.arefresh_from_db()
    assert not run.watched

    marked_when_read: list[bool] = []

    def reading(read):
        def read_and_note(**arguments):
            marked_when_read.append(Run.objects.get(pk=run.pk).watched)
            return read(**arguments)

        return read_and_note

    monkeypatch.setattr(snapshots, "snapshot_text", reading(snapshots.snapshot_text))
    monkeypatch.setattr(selectors, "run_events_after", reading(selectors.run_events_after))
    first = await first_frame(communicator_for(run.pk, viewer, query))
    assert first["type"] == ("snapshot" if not query else "run.status")
    assert marked_when_read == [True]


async def test_an_unknown_run_is_refused_like_someone_elses(sim_pool, outsider):
    # The same close code for both, so nobody learns which run ids exist.
    others = await new_run(sim_pool)
    assert await close_code(communicator_for(others.pk, outsider)) == 4403
    assert await close_code(communicator_for(others.pk + 1000, outsider)) == 4403


async def test_the_site_authenticates_websockets_with_the_session(sim_pool, viewer):
    from webui.asgi import application

    run = await new_run(sim_pool)
    client = Client()
    await sync_to_async(client.force_login)(viewer)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [
        (b"cookie", cookie),
        (b"origin", b"http://127.0.0.1:8000"),
        (b"host", b"127.0.0.1:8000"),
    ]
    communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
    snapshot = await first_frame(communicator)
    assert snapshot["type"] == "snapshot" and snapshot["run"] == run.pk


async def test_events_sent_on_the_consumers_loop_arrive_once_each_in_order(sim_pool, viewer):
    run = await new_run(sim_pool)  # seq 1

    async def store(status: str) -> dict:
        stored = await sync_to_async(events.publish_many)(
            run.pk, [(wire.RUN_STATUS, {"status": status})], deliver=lambda event: None
        )
        return stored[0]

    communicator = communicator_for(run.pk, viewer)
    try:
        await communicator.connect()
        await communicator.receive_json_from()  # the snapshot, at seq 1
        second, third = await store("planning"), await store("running")
        # As the recorder sends them: straight to this loop's consumers, then through the layer.
        # The consumer cannot take 3 before 2 from the local path, and never sends one twice.
        (listener,) = delivery._local_listeners[run.pk]
        await listener(third, '{"not": "sent"}')
        await events.send_async(second)
        await events.send_async(third)
        await events.send_async(second)
        arrived = [await communicator.receive_json_from() for _ in range(2)]
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()

    assert arrived == [second, third]


async def test_a_closed_consumer_stops_listening_locally(sim_pool, viewer):
    run = await new_run(sim_pool)
    communicator = communicator_for(run.pk, viewer)
    await communicator.connect()
    await communicator.receive_json_from()
    assert delivery._local_listeners.get(run.pk)
    await communicator.disconnect()

    assert run.pk not in delivery._local_listeners


async def test_a_batch_from_another_process_arrives_in_order_once(sim_pool, viewer):
    """A worker process sends each callback's events in one layer message (``run.events``)."""
    run = await new_run(sim_pool)  # seq 1
    held: list[dict] = []
    items = [(wire.RUN_STATUS, {"status": "planning"}), (wire.RUN_STATUS, {"status": "running"})]
    communicator = communicator_for(run.pk, viewer)
    try:
        await communicator.connect()
        await communicator.receive_json_from()  # the snapshot, at seq 1
        stored = await sync_to_async(events.publish_many)(run.pk, items, deliver=held.append)
        batch = {"type": events.LAYER_BATCH_TYPE, "events": held}
        await get_channel_layer().group_send(events.group_name(run.pk), batch)
        arrived = [await communicator.receive_json_from() for _ in range(2)]
        await get_channel_layer().group_send(events.group_name(run.pk), batch)
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()
    assert arrived == stored and [event["seq"] for event in arrived] == [2, 3]
