"""Stored execution overhead: what storing a run and publishing its live events costs per step.

The same simulated runs (zero latency, so no model time) are executed twice: by the bare engine
(``execute_run`` with the null observer, then the grading of its answer as the service grades
it) and by the service (``run_execute_async``, which stores plans, steps and events and
publishes each event to the channel layer after its commit). The overhead per step is the
difference of the two wall times divided by the number of steps, so it includes each run's share
of the plan rows and status changes. Grading is not storing: both sides grade, and code grading
is off (``CONDUCTOR_CODE_GRADING=off``: a code task's run then has no reference), as a code
answer runs in the sandbox, a process of its own whose tens of milliseconds, varying from one
answer to the next, would drown the difference; ``grading_ms_per_step`` is what grading took on
the bare side. The CPU figure is this process's alone.

Each database gets a fresh process (settings read DATABASE_URL at import):
- SQLite: a temporary file, the in-memory channel layer (the embedded default);
- PostgreSQL: a scratch database created and dropped here, with channels_redis on Redis when
  Redis answers (the production stack), else the in-memory layer.
PostgreSQL is skipped with a message when it does not answer. Admin URLs come from
BENCH_DATABASE_URL / BENCH_REDIS_URL, defaulting to the local services ``make test-production``
uses. Run creation is timed apart (per run), as it happens once per run, not per step.
Each database is measured twice: as configured, and committing without waiting for the disk
(``_relax_durability``), to show how much of the overhead is the disk's.

Run from the repository root: ``python -m bench.stored_overhead``. Ends with one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench._support import run_bench_child

RUNS = 40
WARMUP_RUNS = 4
# Per database: SQLite (the embedded site) and PostgreSQL + channels_redis (production).
TARGET_MS_PER_STEP = {"sqlite": 1.5, "postgresql": 3.0}
ADMIN_DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")


# The measuring process ---------------------------------------------------------------------------


async def _measure(runs: int, warmup: int) -> dict[str, float | int | str]:
    from asgiref.sync import sync_to_async
    from django.conf import settings

    from orchestrator.engine.grading import GradingUnavailable
    from orchestrator.engine.scheduler import execute_run
    from orchestrator.engine.strategies import build_strategy
    from orchestrator.models import Step
    from orchestrator.providers import make_client, worker_info
    from orchestrator.providers.simulator import demo_pool, load_suite
    from orchestrator.services.grading import grade_answer
    from orchestrator.services.pools import pool_sync_from_data, project_get_or_create
    from orchestrator.services.runs import run_create, run_execute_async, run_settings_for

    def make_pool():
        project = project_get_or_create(name="Benchmark")
        pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=0))
        return pool, list(pool.workers.filter(enabled=True).order_by("position", "id"))

    pool, worker_rows = await sync_to_async(make_pool)()
    workers = [worker_info(row) for row in worker_rows]
    conductor = make_client(pool.conductor_model, params=pool.conductor_params)
    run_settings = run_settings_for(pool)
    suite = load_suite()
    # Every domain in turn, so the workflows have their usual mix of shapes and sizes.
    by_domain: dict[str, list[str]] = {}
    for task in suite:
        by_domain.setdefault(task.domain, []).append(task.question)
    questions = [
        by_domain[domain][i // len(by_domain) % len(by_domain[domain])]
        for i, domain in zip(
            range(warmup + runs), (list(by_domain) * (warmup + runs)), strict=False
        )
    ]

    grading_seconds = 0.0

    async def bare(question: str, reference: str, grader: str) -> int:
        """The engine alone, then the grading the service does at a run's end (a code answer
        runs in the sandbox, tens of milliseconds): storing is what the two paths differ by."""
        nonlocal grading_seconds
        result = await execute_run(
            question=question,
            strategy=build_strategy("conductor", conductor=conductor),
            workers=workers,
            settings=run_settings,
        )
        assert result.status == "succeeded", result.error
        if reference:
            started = time.perf_counter()
            with contextlib.suppress(GradingUnavailable):
                await sync_to_async(grade_answer, thread_sensitive=False)(
                    answer=result.answer, reference=reference, grader=grader
                )
            grading_seconds += time.perf_counter() - started
        return len(result.steps)

    def create_run(question: str) -> tuple[int, str, str]:
        run = run_create(pool=pool, input=question, enqueue=False)
        return run.pk, run.reference, run.grader

    create = sync_to_async(create_run)
    count_steps = sync_to_async(lambda run_id: Step.objects.filter(run_id=run_id).count())

    for question in questions[:warmup]:
        run_id, reference, grader = await create(question)
        await bare(question, reference, grader)
        await run_execute_async(run_id=run_id)

    measured = questions[warmup:]
    created = []
    started = time.perf_counter()
    for question in measured:
        created.append(await create(question))
    create_seconds = time.perf_counter() - started
    run_ids = [run_id for run_id, _, _ in created]

    grading_seconds = 0.0
    started, started_cpu = time.perf_counter(), time.process_time()
    bare_steps = 0
    for question, (_, reference, grader) in zip(measured, created, strict=True):
        bare_steps += await bare(question, reference, grader)
    bare_seconds = time.perf_counter() - started
    bare_cpu = time.process_time() - started_cpu

    started, started_cpu = time.perf_counter(), time.process_time()
    for run_id in run_ids:
        await run_execute_async(run_id=run_id)
    stored_seconds = time.perf_counter() - started
    stored_cpu = time.process_time() - started_cpu
    stored_steps = sum([await count_steps(run_id) for run_id in run_ids])

    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    bare_ms = bare_seconds / bare_steps * 1e3
    stored_ms = stored_seconds / stored_steps * 1e3
    return {
        "runs": len(measured),
        "steps": stored_steps,
        "bare_steps": bare_steps,
        "bare_ms_per_step": round(bare_ms, 3),
        "stored_ms_per_step": round(stored_ms, 3),
        "overhead_ms_per_step": round(stored_ms - bare_ms, 3),
        "overhead_cpu_ms_per_step": round(
            (stored_cpu / stored_steps - bare_cpu / bare_steps) * 1e3, 3
        ),
        "stored_to_bare_ratio": round(stored_ms / bare_ms, 2),
        "create_ms_per_run": round(create_seconds / len(measured) * 1e3, 3),
        "grading_ms_per_step": round(grading_seconds / bare_steps * 1e3, 3),
        "channel_layer": layer,
    }


def _relax_durability() -> None:
    """Commit without waiting for the disk, on every connection opened from here on: SQLite
    ``synchronous=NORMAL`` (WAL: safe against a crash of the process, not of the machine) and
    PostgreSQL ``synchronous_commit=off`` (a machine crash loses at most the last few hundred
    milliseconds of commits). Measures what that setting would save; the site does not use it."""
    from django.db import connections
    from django.db.backends.signals import connection_created

    def relax(sender, connection, **kwargs) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute("PRAGMA synchronous=NORMAL")
            elif connection.vendor == "postgresql":
                cursor.execute("SET synchronous_commit TO OFF")

    connection_created.connect(relax, weak=False)
    connections.close_all()


def child(runs: int, warmup: int) -> None:
    """Migrate the database this process's settings name, then measure; print one JSON line."""
    import asyncio

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if os.environ.get("BENCH_RELAXED_DURABILITY") == "1":
        _relax_durability()
    figures = asyncio.run(_measure(runs, warmup))
    from django.db import connections

    connections.close_all()
    print(json.dumps(figures))


# The driving process -----------------------------------------------------------------------------


def _run_child(env: dict[str, str]) -> dict:
    figures = _run_child_once(env)
    relaxed = _run_child_once({**env, "BENCH_RELAXED_DURABILITY": "1"})
    figures["relaxed_overhead_ms_per_step"] = relaxed["overhead_ms_per_step"]
    figures["relaxed_overhead_cpu_ms_per_step"] = relaxed["overhead_cpu_ms_per_step"]
    return figures


def _run_child_once(env: dict[str, str]) -> dict:
    return run_bench_child("bench.stored_overhead", str(RUNS), str(WARMUP_RUNS), env=env)


def _base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "SQLITE_PATH", "CONDUCTOR_EXECUTION"}
    }
    env.update(
        DJANGO_SETTINGS_MODULE="webui.settings",
        CONDUCTOR_SIM_LATENCY_SCALE="0",
        LOG_LEVEL="WARNING",
        # Code answers are not graded (no sandbox process, whose time varies by tens of
        # milliseconds from one answer to the next and is not storing); see the docstring.
        CONDUCTOR_CODE_GRADING="off",
    )
    return env


def _redis_answers() -> bool:
    try:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        client.ping()
        client.close()
        return True
    except Exception:  # noqa: BLE001 - absent or unreachable: measure without it
        return False


def measure_sqlite() -> dict:
    with tempfile.TemporaryDirectory() as directory:
        env = _base_env()
        env["SQLITE_PATH"] = str(Path(directory) / "bench.sqlite3")
        return _run_child(env)


def measure_postgres() -> dict:
    import psycopg

    name = f"conductor_bench_{uuid.uuid4().hex[:10]}"
    admin = urlsplit(ADMIN_DATABASE_URL)
    try:
        connection = psycopg.connect(ADMIN_DATABASE_URL, autocommit=True, connect_timeout=3)
    except Exception as error:  # noqa: BLE001
        return {"skipped": f"PostgreSQL is unreachable at {admin.hostname}:{admin.port}: {error}"}
    with connection:
        connection.execute(f'CREATE DATABASE "{name}"')
        try:
            env = _base_env()
            env["DATABASE_URL"] = urlunsplit(admin._replace(path="/" + name))
            env["DJANGO_SECRET_KEY"] = "benchmark-only"
            if _redis_answers():
                env["REDIS_URL"] = REDIS_URL
            return _run_child(env)
        finally:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]), int(sys.argv[3]))
        return
    load_before = os.getloadavg()[0]
    results = {"sqlite": measure_sqlite(), "postgresql": measure_postgres()}
    print(
        f"load average (1 min) before: {load_before:.2f}, after: {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} CPUs; wall times inflate with other load"
    )
    for database, figures in results.items():
        if "skipped" in figures:
            print(f"{database}: skipped: {figures['skipped']}")
            continue
        print(
            f"{database} ({figures['channel_layer']}): {figures['runs']} runs, "
            f"{figures['steps']} steps; bare engine {figures['bare_ms_per_step']:.3f} ms/step, "
            f"stored {figures['stored_ms_per_step']:.3f} ms/step, overhead "
            f"{figures['overhead_ms_per_step']:.3f} ms/step (target <= {TARGET_MS_PER_STEP[database]:g}; "
            f"this process's CPU: {figures['overhead_cpu_ms_per_step']:.3f} ms/step); "
            f"grading (both sides) {figures['grading_ms_per_step']:.3f} ms/step; "
            f"run_create {figures['create_ms_per_run']:.2f} ms/run; committing without "
            f"waiting for the disk: overhead {figures['relaxed_overhead_ms_per_step']:.3f} ms/step"
        )
    measured = {d: f for d, f in results.items() if "skipped" not in f}
    print(
        json.dumps(
            {
                "benchmark": "stored_overhead",
                **{
                    f"{database}_{key}": value
                    for database, figures in results.items()
                    for key, value in figures.items()
                },
                **{
                    f"{database}_target_ms_per_step": target
                    for database, target in TARGET_MS_PER_STEP.items()
                },
                "load_average": round(load_before, 2),
                "ok": all(
                    figures["overhead_ms_per_step"] <= TARGET_MS_PER_STEP[database]
                    for database, figures in measured.items()
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
