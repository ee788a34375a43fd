"""Usage analytics over 100,000 runs: how long ``GET /api/analytics/``'s read takes.

``python -m bench.analytics`` fills a scratch SQLite database (a temporary file) with RUNS runs
(``BENCH_ANALYTICS_RUNS`` shrinks it) of one project spread over 30 days, five pools, three
strategies, 8% failed, each with two steps of one of six workers; then, in a fresh interpreter,
reads ``orchestrator.analytics.usage_over_time`` (what the API and the page call) for each group
(worker, pool, strategy) at each interval (the whole 30 days per day; the last 3 days per hour),
five times each, and reports the median and the worst in milliseconds. Target: 200 ms.
With ``BENCH_DATABASE_URL`` (a PostgreSQL database it may fill and drop tables in) the same runs
on PostgreSQL. Prints one JSON line.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench._support import django_setup, run_bench_child

RUNS = int(os.environ.get("BENCH_ANALYTICS_RUNS", "100000"))
BATCH = 5000
REPEATS = 5
TARGET_MS = 200.0
END = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def fill() -> dict:
    django_setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from orchestrator.models import Pool, Project, Run, Step, Worker

    call_command("migrate", verbosity=0, interactive=False)
    get_user_model().objects.create_superuser("bench-superuser", password="unused-in-bench")
    project = Project.objects.create(name="Bench", slug="bench")
    pools = [Pool.objects.create(project=project, name=f"Pool {n}") for n in range(5)]
    for pool in pools:
        Worker.objects.create(pool=pool, name="w", model="sim/math", description="math")
    workers = [f"worker-{n}" for n in range(6)]
    rng = random.Random(11)
    started = time.perf_counter()
    span = 30 * 24 * 3600
    for start in range(0, RUNS, BATCH):
        with transaction.atomic():
            runs = Run.objects.bulk_create(
                Run(
                    project=project,
                    pool=rng.choice(pools),
                    strategy=rng.choice(("conductor", "single", "moa")),
                    status="failed" if rng.random() < 0.08 else "succeeded",
                    input=f"Question {i}?",
                    tokens_in=rng.randrange(200, 3000),
                    tokens_out=rng.randrange(20, 600),
                    cost=rng.random() / 100,
                    model_calls=rng.randrange(1, 8),
                    wall_time=rng.random() * 20,
                )
                for i in range(start, min(start + BATCH, RUNS))
            )
            for run in runs:
                run.created_at = END - dt.timedelta(seconds=rng.randrange(span))
            Run.objects.bulk_update(runs, ["created_at"])
            Step.objects.bulk_create(
                Step(
                    run=run,
                    round=0,
                    index=index,
                    instruction="Do it.",
                    worker_index=0,
                    worker_name=rng.choice(workers),
                    model="sim/math",
                    status="succeeded" if rng.random() > 0.05 else "failed",
                    tokens_in=rng.randrange(100, 1500),
                    tokens_out=rng.randrange(10, 300),
                    latency=rng.random() * 8,
                    attempts=1,
                )
                for run in runs
                for index in range(2)
            )
    return {"fill_s": round(time.perf_counter() - started, 1)}


def measure() -> dict:
    django_setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from orchestrator.analytics import usage_over_time
    from orchestrator.models import Project

    connection.ensure_connection()
    user = get_user_model().objects.get(username="bench-superuser")
    project = Project.objects.get(slug="bench")
    figures: dict[str, float] = {}
    for interval, days in (("day", 30), ("hour", 3)):
        for group in ("worker", "pool", "strategy"):
            times = []
            for _ in range(REPEATS):
                started = time.perf_counter()
                usage = usage_over_time(
                    user=user, project=project, group=group, interval=interval,  # type: ignore[arg-type]
                    since=END - dt.timedelta(days=days), until=END,
                )  # fmt: skip
                times.append((time.perf_counter() - started) * 1000)
            assert usage["totals"]["runs"] > 0
            figures[f"{group}_{interval}_ms_median"] = round(statistics.median(times), 1)
            figures[f"{group}_{interval}_ms_max"] = round(max(times), 1)
    return figures


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        DJANGO_SETTINGS_MODULE="webui.settings", LOG_LEVEL="WARNING", CONDUCTOR_EXECUTION="inline"
    )
    figures: dict = {"bench": "analytics", "runs": RUNS, "target_ms": TARGET_MS}
    with tempfile.TemporaryDirectory(prefix="bench-analytics-") as directory:
        env["SQLITE_PATH"] = str(Path(directory) / "bench.sqlite3")
        fill_figures = run_bench_child("bench.analytics", "fill", env=env, timeout=1800)
        figures["sqlite_fill_s"] = fill_figures["fill_s"]
        measured = run_bench_child("bench.analytics", "measure", env=env, timeout=900)
        figures.update({f"sqlite_{k}": v for k, v in measured.items()})
    postgres = os.environ.get("BENCH_DATABASE_URL")
    if postgres:
        env_pg = {**env, "DATABASE_URL": postgres, "DJANGO_SECRET_KEY": "bench-only"}
        run_bench_child("bench.analytics", "reset", env=env_pg, timeout=300)
        run_bench_child("bench.analytics", "fill", env=env_pg, timeout=1800)
        measured = run_bench_child("bench.analytics", "measure", env=env_pg, timeout=900)
        figures.update({f"postgres_{k}": v for k, v in measured.items()})
    figures["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


def reset() -> dict:
    """An empty schema in the PostgreSQL database named by DATABASE_URL."""
    django_setup()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
    return {}


if __name__ == "__main__":
    if "--child" in sys.argv:
        child = {"fill": fill, "measure": measure, "reset": reset}[sys.argv[-1]]
        print(json.dumps(child()))
    else:
        main()
