"""Helpers shared by several benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from orchestrator.engine.types import Completion, Message, WorkerInfo

ROOT = Path(__file__).resolve().parent.parent


def django_setup() -> None:
    """Django configured from the environment, in a benchmark's child process."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
    django.setup()


def run_bench_child(module: str, *args: str, env: dict[str, str], timeout: float = 300) -> dict:
    """Run ``python -m MODULE --child ARGS`` and return the JSON of its last output line.

    A benchmark measures in a child process when the figures need a Django configured
    differently (another database) from the driving process.
    """
    done = subprocess.run(
        [sys.executable, "-m", module, "--child", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def percentile(values: list[float], fraction: float) -> float:
    """The value ``fraction`` of the way up ``values`` sorted (nearest rank; 0.95: the p95)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class AnsweringClient:
    """A worker that answers "Answer: 42" after ``latency`` seconds (at once for 0), with fixed
    usage and no cost: what is measured is the engine around it, not a model."""

    def __init__(self, model: str, latency: float = 0.0) -> None:
        self.model = model
        self.latency = latency

    async def complete(self, messages: Sequence[Message], *, timeout: float) -> Completion:
        if self.latency:
            await asyncio.sleep(self.latency)
        return Completion("Answer: 42", tokens_in=20, tokens_out=5, latency=self.latency)


def answering_workers(count: int, *, latency: float = 0.0) -> list[WorkerInfo]:
    """``count`` workers ``w0, w1, ...``, each an AnsweringClient."""
    return [
        WorkerInfo(
            name=f"w{i}",
            model=f"bench/m{i}",
            description="",
            client=AnsweringClient(f"bench/m{i}", latency),
        )
        for i in range(count)
    ]


# The PostgreSQL and Redis a benchmark of the production stack makes its scratch database and
# queue in (admin URLs; each benchmark works in a database and a queue of its own).
ADMIN_DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")


def skip(benchmark: str, reason: str) -> None:
    """Say why ``benchmark`` measured nothing, and end with its JSON line saying so."""
    print(f"skipped: {reason}")
    print(json.dumps({"benchmark": benchmark, "skipped": reason}))


def services_problem() -> str:
    """Why PostgreSQL or Redis cannot be used from here, or ""."""
    try:
        import psycopg

        psycopg.connect(ADMIN_DATABASE_URL, connect_timeout=3).close()
    except Exception as error:  # noqa: BLE001 - any failure means "not here"
        return f"PostgreSQL does not answer at {urlsplit(ADMIN_DATABASE_URL).netloc}: {error}"
    try:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        client.ping()
        client.close()
    except Exception as error:  # noqa: BLE001
        return f"Redis does not answer at {urlsplit(REDIS_URL).netloc}: {error}"
    return ""


@dataclass(frozen=True)
class ScratchStack:
    """A benchmark's own database and Celery queue, and the environment that points at them."""

    name: str
    database_url: str
    queue: str
    env: dict[str, str]


@contextlib.contextmanager
def scratch_stack(*, latency_scale: str) -> Iterator[ScratchStack]:
    """Create a scratch database and queue, point this (fresh) process's settings at them before
    Django loads, and drop both at the end. Simulated latencies are scaled by ``latency_scale``."""
    import psycopg

    name = f"conductor_bench_{uuid.uuid4().hex[:10]}"
    queue = f"conductor-bench-{uuid.uuid4().hex[:10]}"
    database_url = urlunsplit(urlsplit(ADMIN_DATABASE_URL)._replace(path="/" + name))
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": REDIS_URL,
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "benchmark-only"),
        "DJANGO_SETTINGS_MODULE": "webui.settings",
        "CONDUCTOR_EXECUTION": "celery",
        "CONDUCTOR_CELERY_QUEUE": queue,
        "CONDUCTOR_SIM_LATENCY_SCALE": latency_scale,
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    admin = psycopg.connect(ADMIN_DATABASE_URL, autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield ScratchStack(name=name, database_url=database_url, queue=queue, env=env)
    finally:
        from django.db import connections

        connections.close_all()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        client.close()
