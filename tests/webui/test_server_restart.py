"""A real Daphne server with inline execution, stopped mid-run (SIGKILL and SIGTERM) and started
again: the run finishes, and no step that had finished is sent to its model again.

The server is a subprocess over its own SQLite file (``harness/server.py``); the test
starts runs through the HTTP API and reads what is stored straight from that file.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
import urllib.request
from collections import Counter
from contextlib import closing

import pytest

from harness.server import LiveServer, pick_pool_id

# Four steps one after another, about 1.2 s each (the demo's "forge" worker at full latency).
RUN = {
    "input": "What is 17 * 23?",
    "strategy": "reflection",
    "strategy_options": {"rounds": 3, "worker": 2},
}
LEASE_SECONDS = 2
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = LiveServer(
        directory=tmp_path_factory.mktemp("restart"),
        extra_env={
            "CONDUCTOR_SIM_LATENCY_SCALE": "1",
            "CONDUCTOR_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
        },
    )
    server.prepare()
    server.start()
    output = server.manage("drf_create_token", server.admin_username).stdout
    server.token = output.split()[2]  # "Generated token <key> for user admin"
    yield server
    server.stop()


def api(server: LiveServer, path: str, payload: dict | None = None) -> dict:
    request = urllib.request.Request(
        server.url + path,
        data=None if payload is None else json.dumps(payload).encode(),
        headers={"Authorization": f"Token {server.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def query(server: LiveServer, sql: str, *params) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True, timeout=10)) as db:
        return db.execute(sql, params).fetchall()


def finished_steps(server: LiveServer, run_id: int) -> dict[int, tuple]:
    rows = query(
        server,
        "SELECT id, finished_at, response, attempts FROM orchestrator_step "
        "WHERE run_id = ? AND status = 'succeeded'",
        run_id,
    )
    return {row[0]: row[1:] for row in rows}


def wait_for(condition, what: str):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start_run_and_stop_server_mid_run(server: LiveServer, stop) -> tuple[int, dict[int, tuple]]:
    pool = pick_pool_id(api(server, "/api/pools/"))
    run_id = api(server, "/api/runs/", {**RUN, "pool": pool})["id"]

    def some_steps_done_and_more_to_do():
        done = finished_steps(server, run_id)
        (total,) = query(server, "SELECT count(*) FROM orchestrator_step WHERE run_id = ?", run_id)
        return done if 1 <= len(done) < total[0] else None

    wait_for(some_steps_done_and_more_to_do, "a finished step while others remain")
    stop(server.process)
    server.process.wait(timeout=20)
    server.process = None
    (status,) = query(server, "SELECT status FROM orchestrator_run WHERE id = ?", run_id)[0]
    assert status == "running", "the run was not in progress when the server stopped"
    return run_id, finished_steps(server, run_id)


def assert_resumed_without_calling_finished_steps_again(
    server: LiveServer, run_id: int, before: dict[int, tuple]
) -> tuple:
    server.start()
    run = wait_for(
        lambda: (run := api(server, f"/api/runs/{run_id}/"))["status"] != "running" and run,
        "the run to finish after the restart",
    )
    assert run["status"] == "succeeded", run.get("error")
    steps = query(
        server, "SELECT id, status, attempts FROM orchestrator_step WHERE run_id = ?", run_id
    )
    assert len(steps) == 4 and all(status == "succeeded" for _, status, _ in steps)
    after = finished_steps(server, run_id)
    for step_id, kept in before.items():
        assert after[step_id] == kept  # same result, same finish time, one attempt
        assert kept[2] == 1
    events = [
        json.loads(data)
        for (data,) in query(
            server, "SELECT data FROM orchestrator_runevent WHERE run_id = ? ORDER BY seq", run_id
        )
    ]
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    started = Counter(e["step"]["id"] for e in events if e["type"] == "step.started")
    assert all(started[step_id] == 1 for step_id in before)  # never sent again
    assert [e["type"] for e in events].count("run.finished") == 1
    (model_calls,) = query(server, "SELECT model_calls FROM orchestrator_run WHERE id = ?", run_id)[
        0
    ]
    assert model_calls == sum(attempts for _, _, attempts in steps) == 4
    sql = "SELECT fence, interruptions FROM orchestrator_run WHERE id = ?"
    return query(server, sql, run_id)[0]


def test_a_run_resumes_after_the_server_is_killed(server):
    run_id, before = start_run_and_stop_server_mid_run(
        server, lambda process: os.kill(process.pid, signal.SIGKILL)
    )
    # The dead server could not let go: its claim holds until its lease lapses.
    (executor,) = query(server, "SELECT executor FROM orchestrator_run WHERE id = ?", run_id)[0]
    assert executor

    fence, interruptions = assert_resumed_without_calling_finished_steps_again(
        server, run_id, before
    )
    assert (fence, interruptions) == (2, 1)  # the kill counts against the run
    assert f"resuming run {run_id}" in server.log_tail(20_000)


def test_a_run_resumes_after_the_server_is_stopped_with_sigterm(server):
    run_id, before = start_run_and_stop_server_mid_run(
        server, lambda process: process.send_signal(signal.SIGTERM)
    )
    # A clean stop lets go of its runs at exit: the next start resumes them at once, and the
    # stop is not counted against the run.
    row = query(
        server, "SELECT executor, lease_expires_at FROM orchestrator_run WHERE id = ?", run_id
    )[0]
    assert row == ("", None)

    fence, interruptions = assert_resumed_without_calling_finished_steps_again(
        server, run_id, before
    )
    assert (fence, interruptions) == (2, 0)
