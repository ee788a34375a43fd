"""Code grading on a real Celery worker: the run is scored through the sandbox, and a reference
that tries to reach the worker's secrets, the database server and the project finds nothing."""

from __future__ import annotations

import secrets
import time

import pytest

from orchestrator.models import Run
from orchestrator.providers.simulator import demo_pool, load_suite
from orchestrator.services.pools import pool_sync_from_data, project_get_or_create
from orchestrator.services.runs import run_create

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

CODE_TASK = next(task for task in load_suite() if task.grader == "code")

# Appended to the task's own tests: each attempt that succeeds fails the grading (score 0).
PROBES = """
import os, socket
_reached = []
for _pid in [p for p in os.listdir("/proc") if p.isdigit()] + [str(os.getppid())]:
    try:
        if SECRET.encode() in open(f"/proc/{_pid}/environ", "rb").read():
            _reached.append(f"environment of {_pid}")
    except OSError:
        pass
for _address in [("127.0.0.1", 5432), ("127.0.0.1", 6379)]:
    try:
        socket.create_connection(_address, timeout=2).close()
        _reached.append(f"server at {_address}")
    except OSError:
        pass
for _path in [PROJECT_FILE, "/work", "/root"]:
    if os.path.exists(_path):
        _reached.append(_path)
assert not _reached, _reached
"""


def wait_until_finished(run: Run, timeout: float = 60.0) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_finished:
            return run
        time.sleep(0.1)
    raise AssertionError("the run did not finish")


def test_a_code_run_on_a_celery_worker_is_scored_in_the_sandbox(code_sandbox, start_celery_worker):
    secret = "sk-" + secrets.token_hex(16)
    start_celery_worker(CONDUCTOR_FAKE_PROVIDER_KEY=secret)
    project = project_get_or_create(name="Code grading")
    data = demo_pool(latency=0)
    pool, _ = pool_sync_from_data(project=project, data=data)
    for worker in pool.workers.all():
        worker.params = {**worker.params, "skills": {"code": 1.0}}
        worker.save(update_fields=["params"])
    reference = f"SECRET = {secret!r}\nPROJECT_FILE = {__file__!r}\n{CODE_TASK.reference}\n{PROBES}"

    run = wait_until_finished(
        run_create(
            pool=pool,
            input=CODE_TASK.question,
            strategy="single",
            reference=reference,
            grader="code",
        )
    )

    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.error == ""
    assert run.score == 1.0
