"""A run executed by another process than the server's (``manage.py conduct``) reaches the run's
open sockets on the embedded default (SQLite, the in-memory channel layer), within a second.

A real Daphne server (``harness/server.py``, inline execution, its own SQLite file) serves the
socket; the run is executed by ``manage.py conduct`` in a process of its own, so nothing the
in-memory layer carries can come from it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
import subprocess
import sys
import time
import urllib.request
from contextlib import closing, suppress

import pytest

from harness.server import REPO_ROOT, LiveServer

# Four steps one after another, about 1.2 s each (the demo's "forge" worker at full latency).
QUESTION = "What is 17 * 23?"
CONDUCT = ["--strategy", "reflection", "--option", "rounds=3", "--option", "worker=2"]
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = LiveServer(
        directory=tmp_path_factory.mktemp("across"), extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": "1"}
    )
    server.prepare()
    server.start()
    output = server.manage("drf_create_token", server.admin_username).stdout
    server.token = output.split()[2]  # "Generated token <key> for user admin"
    yield server
    server.stop()


def query(server: LiveServer, sql: str, *params) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True, timeout=10)) as db:
        return db.execute(sql, params).fetchall()


def conduct(server: LiveServer) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "conduct", QUESTION, *CONDUCT],
        cwd=REPO_ROOT,
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def running_run(server: LiveServer, after_id: int) -> tuple[int, int]:
    """The run the CLI executes, once it has started a step: (id, last seq)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        rows = query(
            server,
            "SELECT r.id, r.last_seq FROM orchestrator_run r WHERE r.id > ? AND EXISTS "
            "(SELECT 1 FROM orchestrator_step s WHERE s.run_id = r.id AND s.status = 'running')",
            after_id,
        )
        if rows:
            return rows[0]
        time.sleep(0.05)
    raise AssertionError("the CLI's run never started a step")


def newest_run_id(server: LiveServer) -> int:
    return query(server, "SELECT coalesce(max(id), 0) FROM orchestrator_run")[0][0]


async def watch(
    server: LiveServer, run_id: int, after: int, during=None
) -> list[tuple[float, dict]]:
    """The events the run's socket sends (with the time each came), until ``run.finished``."""
    import aiohttp

    url = f"ws://127.0.0.1:{server.port}/ws/runs/{run_id}/?after={after}&token={server.token}"
    received: list[tuple[float, dict]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, headers={"Origin": server.url}) as socket_,
    ):
        if during is not None:
            await asyncio.get_running_loop().run_in_executor(None, during)

        async def read() -> None:
            async for message in socket_:
                event = json.loads(message.data)
                received.append((time.time(), event))
                if event["type"] == "run.finished":
                    return

        with suppress(TimeoutError):
            await asyncio.wait_for(read(), TIMEOUT)
    return received


def stored_events(server: LiveServer, run_id: int, after: int) -> list[tuple[dict, float]]:
    rows = query(
        server,
        "SELECT data, created_at FROM orchestrator_runevent WHERE run_id = ? AND seq > ? "
        "ORDER BY seq",
        run_id,
        after,
    )
    return [
        (json.loads(data), dt.datetime.fromisoformat(created).replace(tzinfo=dt.UTC).timestamp())
        for data, created in rows
    ]


def test_a_run_executed_by_the_cli_reaches_its_open_socket_within_a_second(server):
    cli = conduct(server)
    try:
        run_id, seq = running_run(server, newest_run_id(server))
        received = asyncio.run(watch(server, run_id, seq))
    finally:
        output = cli.communicate(timeout=TIMEOUT)[0]
    assert cli.returncode == 0, output
    stored = stored_events(server, run_id, seq)
    assert [event for _, event in received] == [event for event, _ in stored]
    types = [event["type"] for event, _ in stored]
    assert types.count("step.finished") >= 3 and types[-1] == "run.finished"
    lags = sorted(came - created for (came, _), (_, created) in zip(received, stored, strict=True))
    # Each within a second of being stored (a loaded machine: the slowest within two).
    assert lags[len(lags) // 2] < 1.0, lags
    assert lags[-1] < 2.0, lags


def test_a_cancel_from_the_page_of_a_cli_run_keeps_every_event_in_order(server):
    cli = conduct(server)
    try:
        run_id, seq = running_run(server, newest_run_id(server))

        def cancel() -> None:
            time.sleep(1.5)  # a step or two stored by the CLI first, not yet sent
            request = urllib.request.Request(
                f"{server.url}/api/runs/{run_id}/cancel/",
                data=b"{}",
                method="POST",
                headers={
                    "Authorization": f"Token {server.token}",
                    "Content-Type": "application/json",
                },
            )
            with urllib.request.urlopen(request, timeout=10):
                pass

        received = asyncio.run(watch(server, run_id, seq, during=cancel))
    finally:
        cli.communicate(timeout=TIMEOUT)
    stored = [event for event, _ in stored_events(server, run_id, seq)]
    got = [event for _, event in received]
    assert got == stored[: len(got)]
    assert got[-1]["type"] == "run.finished" and got[-1]["status"] == "cancelled"
    assert any(event["type"] in {"step.started", "step.finished"} for event in got[:-1])
