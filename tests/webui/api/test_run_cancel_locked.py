"""Cancel through the API while another writer holds SQLite's write lock, on a real server.

The server is a Daphne process over its own SQLite file (as in ``make demo``); this test holds
the database's write lock from a second connection, the way a long write of a large run does,
and cancels a run that is executing. The API must answer at once (202: the cancel is queued)
instead of a 500 "database is locked", and the run must end cancelled once the lock is freed.
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request

import pytest

from harness.server import LiveServer, start_live_server
from orchestrator.services.runs import CANCEL_WAIT_SECONDS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Simulated workers take about a second per step: the run is still going when cancelled.
    server = start_live_server(
        tmp_path_factory.mktemp("locked-server"), extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": "1"}
    )
    yield server
    server.stop()


def call(server: LiveServer, token: str, method: str, path: str, body=None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{server.url}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, {"body": error.read().decode(errors="replace")[:2000]}


def wait_for(server, token, run_id, statuses, timeout=30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status, run = call(server, token, "GET", f"/api/runs/{run_id}/")
        assert status == 200, run
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['status']}"
        time.sleep(0.1)


def test_cancel_while_the_database_is_locked_answers_202_and_the_run_ends_cancelled(server):
    token = server.manage("drf_create_token", server.admin_username).stdout.split()[2]
    status, pools = call(server, token, "GET", "/api/pools/")
    pool_id = (pools["results"] if isinstance(pools, dict) else pools)[0]["id"]
    status, created = call(
        server,
        token,
        "POST",
        "/api/runs/",
        {
            "input": "What is 41 * 3?",
            "pool": pool_id,
            "strategy": "reflection",
            "strategy_options": {"rounds": 5},
        },
    )
    assert status == 201, created
    run_id = created["id"]
    wait_for(server, token, run_id, {"running"})

    holder = sqlite3.connect(server.db_path, timeout=0, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held like a long write would hold it
    try:
        started = time.monotonic()
        status, answer = call(server, token, "POST", f"/api/runs/{run_id}/cancel/")
        took = time.monotonic() - started
        assert status == 202, answer
        assert answer["status"] == "running"  # not yet: the cancel waits for the lock
        assert took < CANCEL_WAIT_SECONDS + 5
        time.sleep(2)  # the run's own writes wait behind the lock too
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    run = wait_for(server, token, run_id, {"succeeded", "failed", "cancelled"})
    assert run["status"] == "cancelled"
    statuses = [step["status"] for step in run["steps"]]
    assert "running" not in statuses and "pending" not in statuses
    assert statuses[-1] == "skipped"

    with sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True) as reader:
        types = [
            row[0]
            for row in reader.execute(
                "SELECT type FROM orchestrator_runevent WHERE run_id = ? ORDER BY seq", [run_id]
            )
        ]
    assert types[-1] == "run.finished" and types.count("run.finished") == 1
    assert "Traceback" not in server.log_tail(20000)
