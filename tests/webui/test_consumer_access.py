"""RunConsumer keeps checking access while a socket is open, and takes API tokens.

The periodic backstop check is put out of reach here (an hour): a socket that closes within the
wait below was closed by the change itself, however busy the machine is."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.authtoken.models import Token

from orchestrator.models import Membership
from orchestrator.services.runs import run_create
from tests.webui.test_consumers import QUESTION, close_code, communicator_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]

SITE = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
# How long a test waits for the close a change causes: far from the backstop, long enough for a
# loaded machine.
CLOSE_WAIT_SECONDS = 10


@pytest.fixture(autouse=True)
def _backstop_out_of_reach(monkeypatch):
    from webui import socket_access

    monkeypatch.setattr(socket_access, "ACCESS_BACKSTOP_SECONDS", 3600.0)


def site_communicator(path: str, headers: list[tuple[bytes, bytes]] = ()) -> WebsocketCommunicator:
    """A socket through the whole site (origin check, cookies, sessions), as a browser opens it."""
    from webui.asgi import application

    return WebsocketCommunicator(application, path, headers=[*SITE, *headers])


async def new_run_id(pool) -> int:
    run = await sync_to_async(run_create)(pool=pool, input=QUESTION, enqueue=False)
    return run.pk


async def close_code_after(communicator, action) -> int:
    """Do ``action`` on an open, snapshotted socket; the code the consumer closes it with (it
    must close it, and nothing else may come first)."""
    await action()
    output = await communicator.receive_output(timeout=CLOSE_WAIT_SECONDS)
    assert output["type"] == "websocket.close", output
    return output["code"]


async def close_code_once_open(communicator, action) -> int:
    """Open the socket, take its snapshot, do ``action``: the code the consumer closes it with."""
    try:
        connected, _ = await communicator.connect()
        assert connected
        assert (await communicator.receive_json_from())["type"] == "snapshot"
        return await close_code_after(communicator, action)
    finally:
        await communicator.disconnect()


async def session_cookie(user) -> tuple[tuple[bytes, bytes], Client]:
    """The cookie header of a new logged-in session of ``user``, and the client that holds it."""
    browser = Client()
    await sync_to_async(browser.force_login)(user)
    return (b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode()), browser


async def test_logging_out_closes_an_open_socket_at_once(sim_pool, viewer):
    run_id = await new_run_id(sim_pool)
    cookie, browser = await session_cookie(viewer)
    communicator = site_communicator(f"/ws/runs/{run_id}/", [cookie])
    try:
        connected, _ = await communicator.connect()
        assert connected
        assert (await communicator.receive_json_from())["type"] == "snapshot"
        assert await communicator.receive_nothing(timeout=0.3)  # still allowed: left open
        code = await close_code_after(
            communicator, sync_to_async(lambda: browser.post("/accounts/logout/"))
        )
    finally:
        await communicator.disconnect()
    assert code == 4403


async def test_leaving_the_project_closes_an_open_socket_at_once(sim_pool, viewer):
    run_id = await new_run_id(sim_pool)
    removal = sync_to_async(lambda: Membership.objects.filter(user=viewer).delete())
    code = await close_code_once_open(communicator_for(run_id, viewer), removal)
    assert code == 4403


async def test_a_deactivated_user_is_closed_out(sim_pool, viewer):
    run_id = await new_run_id(sim_pool)

    def deactivate_user():  # as the admin's user form does it
        viewer.is_active = False
        viewer.save(update_fields=["is_active"])

    deactivate = sync_to_async(deactivate_user)
    code = await close_code_once_open(communicator_for(run_id, viewer), deactivate)
    assert code == 4403


@pytest.mark.parametrize("how", ["query", "header"])
async def test_an_api_token_opens_a_socket(sim_pool, viewer, how):
    run_id = await new_run_id(sim_pool)
    token = await sync_to_async(Token.objects.create)(user=viewer)
    if how == "query":
        communicator = site_communicator(f"/ws/runs/{run_id}/?token={token.key}")
    else:
        header = (b"authorization", f"Token {token.key}".encode())
        communicator = site_communicator(f"/ws/runs/{run_id}/", [header])
    try:
        connected, _ = await communicator.connect()
        assert connected
        snapshot = await communicator.receive_json_from()
        assert snapshot["type"] == "snapshot" and snapshot["run"] == run_id
        code = await close_code_after(
            communicator, sync_to_async(token.delete)
        )  # a revoked token ends the socket too
    finally:
        await communicator.disconnect()
    assert code == 4403


async def test_a_wrong_token_or_an_outsiders_token_is_refused(sim_pool, outsider):
    run_id = await new_run_id(sim_pool)
    token = await sync_to_async(Token.objects.create)(user=outsider)
    assert await close_code(site_communicator(f"/ws/runs/{run_id}/?token=not-a-token")) == 4403
    assert await close_code(site_communicator(f"/ws/runs/{run_id}/?token={token.key}")) == 4403


async def test_a_password_change_closes_sockets_of_older_sessions(sim_pool, viewer):
    run_id = await new_run_id(sim_pool)
    cookie, _ = await session_cookie(viewer)
    communicator = site_communicator(f"/ws/runs/{run_id}/", [cookie])

    def change_password():
        viewer.set_password("a-new-password-9")
        viewer.save(update_fields=["password"])

    change = sync_to_async(change_password)
    code = await close_code_once_open(communicator, change)
    assert code == 4403


async def test_only_the_socket_whose_access_ended_is_closed(sim_pool, viewer, reviewer):
    run_id = await new_run_id(sim_pool)
    leaving, staying = communicator_for(run_id, viewer), communicator_for(run_id, reviewer)
    try:
        for communicator in (leaving, staying):
            await communicator.connect()
            await communicator.receive_json_from()
        removal = sync_to_async(lambda: Membership.objects.filter(user=viewer).delete())
        code = await close_code_after(leaving, removal)
        assert await staying.receive_nothing(timeout=1.2)
    finally:
        await leaving.disconnect()
        await staying.disconnect()
    assert code == 4403
