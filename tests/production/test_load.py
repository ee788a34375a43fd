"""The production path under load: real Daphne processes, PostgreSQL, Redis, Celery workers.

Many concurrent API clients get answers, never a 5xx, and every run they create finishes, while
the PostgreSQL connections stay within the configured bound (web pool size + worker
concurrency). A pool that is exhausted on purpose answers 503 with Retry-After and recovers. Two
Daphne processes and two workers serve the same users: a websocket client on either process sees
every event of every run, in order, and the API answers the same on both.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import psycopg
import pytest
from django.db import connection
from django.test import Client
from rest_framework.authtoken.models import Token

from harness.connections import WEB_APP_NAME, WORKER_APP_NAME, ConnectionSampler
from orchestrator import wire
from orchestrator.models import Membership, Run
from orchestrator.providers.simulator import demo_pool
from orchestrator.services.pools import pool_sync_from_data, project_get_or_create
from orchestrator.services.runs import run_create
from tests.factories import make_member
from tests.production.conftest import created_database_url as database_url_for_tests
from tests.production.test_celery_path import stored_events

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

CLIENTS = 50
RUN_TIMEOUT = 120.0
QUESTIONS = ("What is 17 * 23?", "What is 12 * 12 - 4?", "What is 101 * 3 - 7?")


class Stack:
    """A project with the simulated pool, and an admin of it with an API token and a session."""

    def __init__(self, *, latency: float) -> None:
        project = project_get_or_create(name="Load")
        self.pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=latency))
        self.user = make_member(project=project, role=Membership.Role.ADMIN)
        self.token = Token.objects.create(user=self.user).key
        browser = Client()
        browser.force_login(self.user)
        self.session = browser.cookies["sessionid"].value

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}


def wait_for_runs(run_ids: list[int], *, timeout: float) -> list[Run]:
    deadline = time.monotonic() + timeout
    while True:
        runs = list(Run.objects.filter(pk__in=run_ids))
        if all(run.is_finished for run in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.2)


def test_fifty_concurrent_api_clients_get_answers_within_the_connection_bound(
    start_daphne, start_celery_worker
):
    stack = Stack(latency=0.01)
    pool_size, concurrency = 4, 2
    # Names of this test's own, so that nothing left by an earlier test is counted.
    suffix = uuid.uuid4().hex[:8]
    web, workers = f"{WEB_APP_NAME}-{suffix}", f"{WORKER_APP_NAME}-{suffix}"
    server = start_daphne(
        PGAPPNAME=web,
        CONDUCTOR_DB_POOL_MIN_SIZE="1",
        CONDUCTOR_DB_POOL_MAX_SIZE=str(pool_size),
        CONDUCTOR_DB_POOL_TIMEOUT="30",
    )
    start_celery_worker(concurrency=concurrency, PGAPPNAME=workers)
    statuses: list[tuple[str, int]] = []
    created: list[int] = []

    async def client(number: int, http: httpx.AsyncClient) -> None:
        async def call(label: str, method: str, path: str, **kwargs) -> httpx.Response:
            response = await http.request(method, path, **kwargs)
            statuses.append((label, response.status_code))
            return response

        await call("list", "GET", "/api/runs/")
        for round_ in range(2):
            answer = await call(
                "create",
                "POST",
                "/api/runs/",
                json={"input": QUESTIONS[(number + round_) % 3], "pool": stack.pool.pk},
            )
            if answer.status_code == 201:
                run_id = answer.json()["id"]
                created.append(run_id)
                await call("detail", "GET", f"/api/runs/{run_id}/")
            await call("filtered list", "GET", "/api/runs/?status=succeeded&page_size=20")

    async def all_clients() -> None:
        limits = httpx.Limits(max_connections=1)
        timeout = httpx.Timeout(60.0)
        clients = [
            httpx.AsyncClient(
                base_url=server.url, headers=stack.headers, limits=limits, timeout=timeout
            )
            for _ in range(CLIENTS)
        ]
        try:
            await asyncio.gather(*(client(n, http) for n, http in enumerate(clients)))
        finally:
            await asyncio.gather(*(http.aclose() for http in clients))

    database = connection.settings_dict["NAME"]
    with ConnectionSampler(conninfo=database_url_for_tests(), database=database) as sampler:
        asyncio.run(all_clients())
        runs = wait_for_runs(created, timeout=RUN_TIMEOUT)

    assert [s for s in statuses if s[1] >= 500] == []
    assert {label for label, _ in statuses} == {"list", "create", "detail", "filtered list"}
    assert all(code in (200, 201) for _, code in statuses), statuses
    assert len(created) == 2 * CLIENTS
    unfinished = [(run.pk, run.status) for run in runs if not run.is_finished]
    assert unfinished == []
    assert all(run.status == Run.Status.SUCCEEDED for run in runs), {r.status for r in runs}
    # Within the bound the README gives: web processes x pool size + Celery concurrency.
    assert sampler.samples > 20
    assert 1 <= sampler.peak[web] <= pool_size, sampler.peak
    assert 1 <= sampler.peak[workers] <= concurrency, sampler.peak
    assert "Traceback" not in server.log()


def test_an_exhausted_pool_answers_503_with_retry_after_then_recovers(start_daphne):
    stack = Stack(latency=0)
    web = f"{WEB_APP_NAME}-{uuid.uuid4().hex[:8]}"
    server = start_daphne(
        PGAPPNAME=web,
        CONDUCTOR_DB_POOL_MIN_SIZE="1",
        CONDUCTOR_DB_POOL_MAX_SIZE="2",
        CONDUCTOR_DB_POOL_TIMEOUT="1",
    )
    database = connection.settings_dict["NAME"]
    sampler = ConnectionSampler(conninfo=database_url_for_tests(), database=database)

    async def scenario(lock: psycopg.Connection) -> dict[str, list[httpx.Response]]:
        async with httpx.AsyncClient(
            base_url=server.url, headers=stack.headers, timeout=60.0
        ) as http:
            # Two slow requests take both pooled connections: the runs table is locked.
            holders = [asyncio.create_task(http.get("/api/runs/")) for _ in range(2)]
            await asyncio.to_thread(wait_for_blocked_connections, database, web, 2)
            # Everyone else waits one pool timeout, then is told to come back.
            api_refused = await asyncio.gather(*(http.get("/api/runs/") for _ in range(4)))
            page_refused = await http.get("/", headers={"Cookie": f"sessionid={stack.session}"})
            # The database itself still answers other clients.
            with psycopg.connect(database_url_for_tests(), connect_timeout=3) as other:
                assert other.execute("SELECT count(*) FROM orchestrator_pool").fetchone()[0] >= 1
            await asyncio.to_thread(lock.rollback)  # the slow requests can finish now
            held = await asyncio.gather(*holders)
            after = await asyncio.gather(*(http.get("/api/runs/") for _ in range(6)))
            page_after = await http.get("/", headers={"Cookie": f"sessionid={stack.session}"})
        return {
            "api_refused": list(api_refused),
            "page_refused": [page_refused],
            "held": list(held),
            "after": [*after, page_after],
        }

    with sampler, psycopg.connect(database_url_for_tests()) as lock:
        lock.execute("LOCK TABLE orchestrator_run IN ACCESS EXCLUSIVE MODE")
        responses = asyncio.run(scenario(lock))

    for response in responses["api_refused"]:
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "5"
        assert response.headers["Content-Type"].startswith("application/json")
        assert "busy" in response.json()["detail"]
    (page,) = responses["page_refused"]
    assert page.status_code == 503 and page.headers["Retry-After"] == "5"
    assert page.headers["Content-Type"].startswith("text/html")
    assert "busy" in page.text and "Traceback" not in page.text
    assert [r.status_code for r in responses["held"]] == [200, 200]
    assert [r.status_code for r in responses["after"]] == [200] * 7
    assert sampler.peak[web] <= 2, sampler.peak
    assert "Traceback" not in server.log()


def wait_for_blocked_connections(
    database: str, application: str, count: int, timeout: float = 20
) -> None:
    """Until ``count`` connections of ``application`` wait on a lock."""
    query = """
        SELECT count(*) FROM pg_stat_activity
        WHERE datname = %s AND application_name = %s AND wait_event_type = 'Lock'
    """
    deadline = time.monotonic() + timeout
    with psycopg.connect(database_url_for_tests(), autocommit=True) as watcher:
        while time.monotonic() < deadline:
            if watcher.execute(query, [database, application]).fetchone()[0] >= count:
                return
            time.sleep(0.05)
    raise AssertionError(f"{count} connections of {application} never blocked on the lock")


def test_two_web_processes_and_two_workers_serve_the_same_users(start_daphne, start_celery_worker):
    import aiohttp

    stack = Stack(latency=0.1)
    servers = [start_daphne(), start_daphne()]
    runs_per_server = 3

    async def create(session: aiohttp.ClientSession, server, number: int) -> int:
        payload = {"input": QUESTIONS[number % 3], "pool": stack.pool.pk}
        async with session.post(
            f"{server.url}/api/runs/", json=payload, headers=stack.headers
        ) as answer:
            assert answer.status == 201, await answer.text()
            return (await answer.json())["id"]

    async def scenario() -> tuple[list[int], list[tuple[int, str, list[dict]]]]:
        async with aiohttp.ClientSession() as session:
            # Runs created on both processes wait in the queue: no worker is up yet.
            run_ids = [
                await create(session, servers[number % 2], number)
                for number in range(runs_per_server * len(servers))
            ]
            sockets = []
            for run_id in run_ids:
                for server in servers:
                    socket = await session.ws_connect(
                        f"{server.ws_url}/ws/runs/{run_id}/",
                        headers={"Cookie": f"sessionid={stack.session}", "Origin": server.url},
                    )
                    snapshot = await socket.receive_json(timeout=30)
                    assert snapshot["type"] == wire.SNAPSHOT and snapshot["seq"] == 1
                    sockets.append((run_id, server.url, socket))
            # Every socket listens; now two workers (on neither web process) execute the runs,
            # so every later event reaches every socket through channels_redis.
            await asyncio.to_thread(start_celery_worker)
            await asyncio.to_thread(start_celery_worker)

            async def listen(run_id: int, url: str, socket) -> tuple[int, str, list[dict]]:
                live: list[dict] = []
                while not live or live[-1]["type"] != wire.RUN_FINISHED:
                    live.append(await socket.receive_json(timeout=RUN_TIMEOUT))
                await socket.close()
                return run_id, url, live

            heard = await asyncio.gather(*(listen(*entry) for entry in sockets))
        return run_ids, heard

    run_ids, heard = asyncio.run(scenario())

    runs = {run.pk: run for run in Run.objects.filter(pk__in=run_ids)}
    assert all(run.status == Run.Status.SUCCEEDED for run in runs.values())
    assert len(heard) == len(run_ids) * len(servers)
    for run_id, url, live in heard:
        # Everything after the snapshot (seq 1, queued), in order, as stored.
        assert [event["seq"] for event in live] == list(range(2, runs[run_id].last_seq + 1)), url
        assert live == stored_events(run_id)[1:], url

    async def read_both(path: str) -> list[object]:
        async with httpx.AsyncClient(headers=stack.headers, timeout=30) as http:
            answers = [await http.get(server.url + path) for server in servers]
        assert all(answer.status_code == 200 for answer in answers)
        # Links are absolute, to the process that answered; everything else must be equal.
        return [
            json.loads(answer.text.replace(server.url, "http://server"))
            for server, answer in zip(servers, answers, strict=True)
        ]

    for path in ["/api/runs/", *(f"/api/runs/{run_id}/" for run_id in run_ids)]:
        first, second = asyncio.run(read_both(path))
        assert first == second, path
    listed = asyncio.run(read_both("/api/runs/"))[0]["results"]
    assert {run["id"] for run in listed} == set(run_ids)


def test_access_ended_elsewhere_closes_sockets_on_every_web_process(start_daphne):
    """A membership removed, or a session logged out, in another process (here the test's
    own) closes the sockets concerned on every web process at once: the change is announced
    over the channel layer, not found by a poll; the other sockets stay open."""
    import aiohttp

    stack = Stack(latency=0)
    watcher = make_member(project=stack.pool.project)
    watcher_browser, admin_browser = Client(), Client()
    watcher_browser.force_login(watcher)
    admin_browser.force_login(stack.user)
    cookies = {
        "watcher": watcher_browser.cookies["sessionid"].value,
        "admin": admin_browser.cookies["sessionid"].value,
    }
    run = run_create(pool=stack.pool, input=QUESTIONS[0], enqueue=False)
    servers = [start_daphne(), start_daphne()]

    async def open_socket(session: aiohttp.ClientSession, server, who: str):
        socket = await session.ws_connect(
            f"{server.ws_url}/ws/runs/{run.pk}/",
            headers={"Cookie": f"sessionid={cookies[who]}", "Origin": server.url},
        )
        assert (await socket.receive_json(timeout=30))["type"] == wire.SNAPSHOT
        return socket

    async def close_codes(sockets, action) -> list[int | None]:
        await asyncio.to_thread(action)
        # Far below the backstop check's period (socket_access.ACCESS_BACKSTOP_SECONDS).
        messages = [await socket.receive(timeout=10) for socket in sockets]
        assert all(m.type == aiohttp.WSMsgType.CLOSE for m in messages), messages
        return [socket.close_code for socket in sockets]

    async def scenario() -> tuple[list[int | None], list[int | None]]:
        async with aiohttp.ClientSession() as session:
            leaving = [await open_socket(session, server, "watcher") for server in servers]
            staying = [await open_socket(session, server, "admin") for server in servers]
            removed = await close_codes(
                leaving, lambda: Membership.objects.filter(user=watcher).delete()
            )
            for socket in staying:  # the admin's sockets were checked too, and stay open
                with pytest.raises(asyncio.TimeoutError):
                    await socket.receive(timeout=1)
            logged_out = await close_codes(staying, lambda: admin_browser.post("/accounts/logout/"))
            return removed, logged_out

    removed, logged_out = asyncio.run(scenario())
    assert removed == [4403, 4403]
    assert logged_out == [4403, 4403]
