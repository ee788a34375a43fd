"""Opening a run socket: one snapshot per (run, seq) shared by the sockets that may see the run,
and the access check made as the socket opens."""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from orchestrator import events
from orchestrator.models import Membership, Run
from tests.factories import make_step
from tests.webui.test_consumer_access import session_cookie, site_communicator
from tests.webui.test_consumers import close_code, communicator_for, first_frame, new_run, publish
from webui import snapshots, socket_access

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]


@pytest.fixture(autouse=True)
def nothing_kept():
    snapshots.forget()
    yield
    snapshots.forget()


async def test_sockets_of_the_same_run_get_the_snapshot_of_its_latest_seq(
    sim_pool, viewer, reviewer
):
    run = await new_run(sim_pool)
    first = await first_frame(communicator_for(run.pk, viewer))
    assert first["seq"] == 1 and first["state"]["run"]["status"] == "queued"
    assert await first_frame(communicator_for(run.pk, reviewer)) == first

    await publish(run.pk, "planning")
    await sync_to_async(Run.objects.filter(pk=run.pk).update)(status=Run.Status.PLANNING)
    later = await first_frame(communicator_for(run.pk, viewer))
    assert later["seq"] == 2 and later["state"]["run"]["status"] == "planning"


async def test_a_snapshot_kept_for_a_member_never_reaches_an_outsider(sim_pool, viewer, outsider):
    run = await new_run(sim_pool)
    assert (await first_frame(communicator_for(run.pk, viewer)))["type"] == "snapshot"

    assert await close_code(communicator_for(run.pk, outsider)) == 4403
    token = await sync_to_async(Token.objects.create)(user=outsider)
    assert await close_code(site_communicator(f"/ws/runs/{run.pk}/?token={token.key}")) == 4403
    cookie, _ = await session_cookie(outsider)
    assert await close_code(site_communicator(f"/ws/runs/{run.pk}/", [cookie])) == 4403


async def test_a_refused_socket_gets_no_event_of_the_run(sim_pool, outsider, monkeypatch):
    """The socket joins the run's group before its access is read: events published meanwhile
    never reach a socket that is then refused."""
    run = await new_run(sim_pool)
    opening = socket_access.opening

    def opening_while_the_run_moves(presented, run_id):
        result = opening(presented, run_id)
        async_to_sync(publish)(run_id, "planning")  # lands in the group, for this socket too
        return result

    monkeypatch.setattr(socket_access, "opening", opening_while_the_run_moves)
    communicator = communicator_for(run.pk, outsider)
    try:
        await communicator.connect()
        assert await communicator.receive_output(timeout=2) == {
            "type": "websocket.close",
            "code": 4403,
        }
        assert await communicator.receive_nothing(timeout=0.3)
    finally:
        await communicator.disconnect()


async def test_a_session_cookie_opens_the_socket_and_an_unknown_one_does_not(sim_pool, viewer):
    run = await new_run(sim_pool)
    cookie, _ = await session_cookie(viewer)
    snapshot = await first_frame(site_communicator(f"/ws/runs/{run.pk}/", [cookie]))
    assert snapshot["type"] == "snapshot" and snapshot["run"] == run.pk
    unknown = (b"cookie", b"sessionid=abcdefghijklmnopqrstuvwxyz012345")
    assert await close_code(site_communicator(f"/ws/runs/{run.pk}/", [unknown])) == 4403


async def test_access_ended_while_the_socket_opens_closes_it(sim_pool, viewer, monkeypatch):
    """Membership removed after the socket's access and what it sends first were read, and
    before it is watched: the announcement falls in between, and the socket is checked again
    and refused."""
    run = await new_run(sim_pool)
    snapshot_text = snapshots.snapshot_text

    def read_then_removed(**arguments):
        text = snapshot_text(**arguments)
        Membership.objects.filter(user=viewer).delete()
        return text

    monkeypatch.setattr(snapshots, "snapshot_text", read_then_removed)
    assert await close_code(communicator_for(run.pk, viewer)) == 4403


def test_a_kept_snapshot_is_read_again_for_a_later_seq_or_another_run_of_the_same_id(sim_pool):
    from tests.factories import make_run

    run = make_run(pool=sim_pool, last_seq=3)
    make_step(run=run)
    seq, text = snapshots.snapshot_text(run_id=run.pk, created_at=run.created_at, seq=3)
    assert seq == 3
    with CaptureQueriesContext(connection) as reads:
        assert snapshots.snapshot_text(run_id=run.pk, created_at=run.created_at, seq=3) == (3, text)
        assert snapshots.snapshot_text(run_id=run.pk, created_at=run.created_at, seq=2) == (3, text)
    assert len(reads) == 0

    Run.objects.filter(pk=run.pk).update(last_seq=4, status=Run.Status.RUNNING)
    seq, later = snapshots.snapshot_text(run_id=run.pk, created_at=run.created_at, seq=4)
    assert seq == 4 and '"status": "running"' in later

    # A run deleted and its id given to another one (SQLite may): never the old run's text.
    other_day = run.created_at + dt.timedelta(days=1)
    Run.objects.filter(pk=run.pk).update(created_at=other_day, input="Another question")
    seq, other = snapshots.snapshot_text(run_id=run.pk, created_at=other_day, seq=4)
    assert "Another question" in other and other != later


def members_of_the_group(run_id: int) -> set:
    return set(get_channel_layer().groups.get(events.group_name(run_id), {}))


async def test_a_socket_refused_while_it_opens_leaves_the_runs_group(sim_pool, viewer, monkeypatch):
    """Access ended as the socket is being watched: it is closed, and out of the run's group
    before its client goes."""
    run = await new_run(sim_pool)
    watch = socket_access.watch

    async def watch_then_refused(handle, watched, on_refused):
        await watch(handle, watched, on_refused)
        await on_refused()

    monkeypatch.setattr(socket_access, "watch", watch_then_refused)
    communicator = communicator_for(run.pk, viewer)
    try:
        await communicator.connect()
        assert (await communicator.receive_output(timeout=2))["code"] == 4403
        assert members_of_the_group(run.pk) == set()
        await publish(run.pk, "planning")
        assert await communicator.receive_nothing(timeout=0.3)
    finally:
        await communicator.disconnect()


async def test_a_run_deleted_while_the_socket_opens_is_refused_like_a_missing_one(
    sim_pool, viewer, monkeypatch
):
    run = await new_run(sim_pool)
    opening = socket_access.opening

    def opening_then_deleted(presented, run_id):
        result = opening(presented, run_id)
        Run.objects.filter(pk=run_id).delete()
        return result

    monkeypatch.setattr(socket_access, "opening", opening_then_deleted)
    communicator = communicator_for(run.pk, viewer)
    try:
        await communicator.connect()
        assert await communicator.receive_output(timeout=2) == {
            "type": "websocket.close",
            "code": 4403,
        }
        assert members_of_the_group(run.pk) == set()
    finally:
        await communicator.disconnect()
