"""Runs list with 100,000 runs stored: server time for the first page and for a filtered page.

``python -m bench.runs_list`` fills a scratch database (a temporary SQLite file, and a scratch
PostgreSQL database at 127.0.0.1:5432 when one answers), then times ``GET /`` and
``GET /?status=failed&q=...`` through Django's test client, logged in as a project member: the
whole request (middleware, session, selectors, template), median of repeats. Prints one JSON line.
Each backend runs in its own interpreter because settings are read from the environment once.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench._support import run_bench_child

RUNS = int(os.environ.get("BENCH_RUNS", "100000"))
REPEATS = 15
BATCH = 5000
TEXT_QUERY = "countdown"
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

TOPICS = (
    "arithmetic",
    "countdown",
    "capital cities",
    "sorting",
    "primes",
    "unit conversion",
    "dates",
    "string reversal",
    "fibonacci",
    "geometry",
)


def _fill(user) -> None:
    """Bulk-create RUNS runs over three pools, spread over time, about 10% failed."""
    import datetime as dt

    from django.utils import timezone

    from orchestrator.models import Membership, Pool, Project, Run, Worker

    project = Project.objects.create(name="Bench", slug="bench")
    Membership.objects.create(project=project, user=user, role=Membership.Role.REVIEWER)
    other = Project.objects.create(name="Other", slug="other")
    pools = [Pool.objects.create(project=project, name=f"Pool {i}") for i in range(3)]
    pools.append(Pool.objects.create(project=other, name="Other pool"))
    for pool in pools:
        Worker.objects.create(pool=pool, name="sim-math", model="sim/math", description="math")

    rng = random.Random(7)
    statuses = ["succeeded"] * 80 + ["failed"] * 10 + ["cancelled"] * 4 + ["running"] * 6
    strategies = ("conductor", "single", "reflection", "moa")
    now = timezone.now()
    created_at = Run._meta.get_field("created_at")
    created_at.auto_now_add = False  # the bench sets realistic creation times itself
    try:
        for start in range(0, RUNS, BATCH):
            batch = []
            for i in range(start, min(start + BATCH, RUNS)):
                status = rng.choice(statuses)
                topic = rng.choice(TOPICS)
                pool = pools[rng.randrange(len(pools))]
                batch.append(
                    Run(
                        project_id=pool.project_id,
                        pool=pool,
                        strategy=rng.choice(strategies),
                        input=f"Question {i} about {topic}: " + "words " * rng.randrange(5, 60),
                        answer="" if status != "succeeded" else f"Answer {i}\nwith reasoning " * 3,
                        status=status,
                        score=rng.choice((None, 0.0, 0.5, 1.0)),
                        step_count=rng.randrange(1, 12),
                        tokens_in=rng.randrange(100, 5000),
                        tokens_out=rng.randrange(50, 3000),
                        cost=rng.random() / 100,
                        model_calls=rng.randrange(1, 12),
                        wall_time=rng.random() * 30,
                        created_by=user,
                        created_at=now - dt.timedelta(seconds=RUNS - i),
                    )
                )
            Run.objects.bulk_create(batch)
    finally:
        created_at.auto_now_add = True


def _time(client, url: str) -> float:
    timings = []
    for _ in range(REPEATS + 2):
        started = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
        assert b"data-run-id=" in response.content, f"{url} shows no run"
    return round(statistics.median(timings[2:]), 1)  # the first two warm caches


def measure() -> dict:
    """Runs inside the child interpreter, against the database its environment names."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    call_command("migrate", verbosity=0, interactive=False)
    user = get_user_model().objects.create_user("bench", password="bench-only")
    started = time.perf_counter()
    _fill(user)
    fill_seconds = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # fresh statistics, as a database in use would have

    client = Client()
    client.force_login(user)
    figures = {
        "first_page_ms": _time(client, "/"),
        "filtered_page_ms": _time(client, f"/?status=failed&q={TEXT_QUERY}"),
        "page_20_ms": _time(client, "/?page=20"),
    }
    # A member of two projects: no single (project, created_at) index range to walk.
    from orchestrator.models import Membership, Project

    Membership.objects.create(project=Project.objects.get(slug="other"), user=user)
    figures["two_projects_first_page_ms"] = _time(client, "/")
    figures["fill_s"] = round(fill_seconds, 1)
    return figures


def _child(env: dict[str, str]) -> dict:
    return run_bench_child("bench.runs_list", env=env)


def _postgres_available() -> bool:
    import psycopg

    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def main() -> None:
    base_env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    base_env.update(
        DJANGO_SETTINGS_MODULE="webui.settings", LOG_LEVEL="WARNING", CONDUCTOR_EXECUTION="inline"
    )
    figures: dict = {"runs": RUNS, "repeats": REPEATS, "target_ms": 150}

    with tempfile.TemporaryDirectory(prefix="bench-runs-list-") as directory:
        env = dict(base_env, SQLITE_PATH=str(Path(directory) / "bench.sqlite3"))
        figures["sqlite"] = _child(env)

    if _postgres_available():
        import psycopg

        name = f"conductor_bench_{os.getpid()}"
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            env = dict(
                base_env,
                DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{name}",
                DJANGO_SECRET_KEY="bench-only",
            )
            figures["postgresql"] = _child(env)
        finally:
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    else:
        figures["postgresql"] = None

    figures["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    if "--child" in sys.argv:
        print(json.dumps(measure()))
    else:
        main()
