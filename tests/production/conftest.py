"""The production stack for tests: PostgreSQL, Redis and real Celery worker processes.

Run through ``make test-production`` (DATABASE_URL, REDIS_URL and DJANGO_SECRET_KEY set). When
PostgreSQL or Redis is missing the tests skip, unless CONDUCTOR_REQUIRE_SERVICES=1 (CI), where
a missing service is a failure.

Workers are started as subprocesses on the pytest-django test database and on a queue of their
own (so a stray worker on the same Redis cannot take the tests' runs), each in its own process
group, and are always killed with SIGKILL at teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

from harness.celery_worker import spawn_celery_worker, wait_until_ready
from harness.daphne import DaphneProcess, spawn_daphne
from tests.availability import unavailable

# Short enough that a killed worker's run is delivered again within seconds.
VISIBILITY_TIMEOUT_SECONDS = 3
RUN_LEASE_SECONDS = 2
WORKER_START_TIMEOUT = 30.0


def _services_problem() -> str:
    """Why the production stack is not usable from here, or ""."""
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine or not settings.REDIS_URL:
        return (
            "the production tests need DATABASE_URL (PostgreSQL) and REDIS_URL set: "
            "run them with `make test-production`"
        )
    try:
        import psycopg

        database = settings.DATABASES["default"]
        with psycopg.connect(
            host=database.get("HOST") or None,
            port=database.get("PORT") or None,
            user=database.get("USER") or None,
            password=database.get("PASSWORD") or None,
            dbname="postgres",
            connect_timeout=3,
        ):
            pass
    except Exception as error:  # noqa: BLE001 - any failure to connect means "not here"
        return f"PostgreSQL is unreachable ({type(error).__name__}: {error})"
    try:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3)
        client.ping()
        client.close()
    except Exception as error:  # noqa: BLE001
        return f"Redis is unreachable ({type(error).__name__}: {error})"
    return ""


@pytest.fixture(scope="session", autouse=True)
def production_services() -> None:
    """Skip (or, with CONDUCTOR_REQUIRE_SERVICES=1, fail) before the test database is made."""
    problem = _services_problem()
    if problem:
        unavailable(problem, required_by="CONDUCTOR_REQUIRE_SERVICES")


@pytest.fixture(scope="session")
def celery_queue() -> Iterator[str]:
    """A queue used by this test session alone; removed from Redis afterwards."""
    import redis

    name = f"conductor-test-{uuid.uuid4().hex[:12]}"
    yield name
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(name, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}")
    client.close()


@pytest.fixture
def route_runs_to(celery_queue: str) -> Iterator[str]:
    """Send this test's run tasks (run_enqueue) to the session's own queue."""
    from webui.celery import app

    previous = app.conf.task_default_queue
    app.conf.task_default_queue = celery_queue
    yield celery_queue
    app.conf.task_default_queue = previous


def created_database_url() -> str:
    """DATABASE_URL pointed at the database pytest-django created (test_postgres)."""
    from django.db import connection

    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


def stack_env(queue: str) -> dict[str, str]:
    """The environment of a process of the production stack (a Celery worker, a Daphne server)
    started by a test: the test database, Redis, and the session's Celery ``queue``."""
    return {
        **os.environ,
        "DATABASE_URL": created_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "test-only"),
        "CONDUCTOR_EXECUTION": "celery",
        "CONDUCTOR_CELERY_QUEUE": queue,
    }


@dataclass
class CeleryWorkerProcess:
    """A `celery worker` subprocess in its own process group, logging to ``log_path``."""

    process: subprocess.Popen[bytes]
    log_path: Path
    name: str
    killed: bool = field(default=False)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until_ready(self, timeout: float = WORKER_START_TIMEOUT) -> None:
        wait_until_ready(self.process, self.log_path, timeout)

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool children), as a lost machine would."""
        if self.killed:
            return
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def pool_children(self) -> list[int]:
        """The pids of the worker's pool processes (its direct children)."""
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []


@pytest.fixture
def start_celery_worker(
    route_runs_to: str, transactional_db, tmp_path: Path
) -> Iterator[Callable[..., CeleryWorkerProcess]]:
    """Start real Celery workers on the test database and the session's queue; kill them all
    at teardown. Extra keyword arguments become environment variables of the worker."""
    started: list[CeleryWorkerProcess] = []

    def start(*, concurrency: int = 1, **env_overrides: str) -> CeleryWorkerProcess:
        number = len(started) + 1
        name = f"test{number}-{uuid.uuid4().hex[:6]}@%h"
        log_path = tmp_path / f"worker{number}.log"
        env = {
            **stack_env(route_runs_to),
            "CONDUCTOR_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT_SECONDS),
            "CONDUCTOR_RUN_LEASE_SECONDS": str(RUN_LEASE_SECONDS),
            "CONDUCTOR_SIM_LATENCY_SCALE": "1",
            "PYTHONUNBUFFERED": "1",
            **env_overrides,
        }
        process = spawn_celery_worker(
            concurrency=concurrency, queue=route_runs_to, name=name, env=env, log_path=log_path
        )
        worker = CeleryWorkerProcess(process=process, log_path=log_path, name=name)
        started.append(worker)
        worker.wait_until_ready()
        return worker

    yield start
    for worker in started:
        worker.kill()


@pytest.fixture
def start_daphne(
    route_runs_to: str, transactional_db, tmp_path: Path
) -> Iterator[Callable[..., DaphneProcess]]:
    """Start real Daphne processes on the test database, Redis and the session's Celery queue;
    stop them all at teardown. Keyword arguments become environment variables of the server."""
    started: list[DaphneProcess] = []

    def start(**env_overrides: str) -> DaphneProcess:
        env = {
            **stack_env(route_runs_to),
            "LOG_LEVEL": "WARNING",
            **env_overrides,
        }
        server = spawn_daphne(env=env, log_path=tmp_path / f"daphne{len(started) + 1}.log")
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
