"""The ASGI application serves HTTP as Django's own handler does: synchronous views with every
middleware in one hop to the request's thread, async views (``/v1``) on Django's async path."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.test import Client
from rest_framework.authtoken.models import Token

from webui.handler import _view_is_async

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]

SITE = [(b"host", b"127.0.0.1:8000")]


async def asgi_get(path: str, headers: list[tuple[bytes, bytes]] = ()) -> dict:
    """GET ``path`` through the site's ASGI application: status, headers and the whole body
    (streamed ones included)."""
    from webui.asgi import application

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [*SITE, *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=10)
    body = b""
    while True:
        chunk = await communicator.receive_output(timeout=10)
        body += chunk.get("body", b"")
        if not chunk.get("more_body"):
            break
    await communicator.wait(timeout=10)
    return {"status": start["status"], "headers": start["headers"], "body": body}


def header(response: dict, name: bytes) -> str | None:
    found = [value for key, value in response["headers"] if key.lower() == name]
    return found[0].decode() if found else None


def test_only_the_async_views_take_the_async_path():
    assert _view_is_async("/v1/models")
    assert not _view_is_async("/api/runs/")
    assert not _view_is_async("/no/such/page/")


async def test_an_api_view_answers_as_through_django_s_own_handler(sim_pool, viewer):
    token = await sync_to_async(Token.objects.create)(user=viewer)
    authorization = (b"authorization", f"Token {token.key}".encode())
    response = await asgi_get("/api/runs/", [authorization])
    assert response["status"] == 200
    assert json.loads(response["body"])["results"] == []
    assert header(response, b"x-frame-options") == "DENY"  # the synchronous middleware ran

    anonymous = await asgi_get("/api/runs/")
    assert anonymous["status"] in (401, 403)


async def test_a_page_gets_its_content_security_policy_and_a_missing_one_a_404(viewer):
    browser = Client()
    await sync_to_async(browser.force_login)(viewer)
    cookie = (b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode())
    page = await asgi_get("/", [cookie])
    assert page["status"] == 200
    assert "default-src" in (header(page, b"content-security-policy") or "")
    missing = await asgi_get("/no/such/page/", [cookie])
    assert missing["status"] == 404


async def test_an_async_view_still_answers(viewer):
    response = await asgi_get("/v1/models")
    assert response["status"] == 401
    assert "error" in json.loads(response["body"])


async def test_a_streamed_export_is_read_through_the_one_hop_path(reviewer):
    token = await sync_to_async(Token.objects.create)(user=reviewer)
    authorization = (b"authorization", f"Token {token.key}".encode())
    response = await asgi_get("/api/export/trajectories.jsonl", [authorization])
    assert response["status"] == 200
    assert header(response, b"content-type").startswith("application/jsonl")
    assert response["body"] == b""  # no conductor decisions yet: read after the view returned
