"""Experiments: the full bundled suite × 4 arms on the simulator at zero latency, inline and on 1
and 2 Celery worker processes; and the scoreboard's server time for an experiment of 10,000 runs.

Method.
- Inline: a child interpreter on a temporary SQLite file (the embedded default) creates the
  experiment (the suite's 235 tasks × conductor, single:0, reflection, moa = 940 runs) and
  executes it with ``experiment_execute`` at the default concurrency
  (CONDUCTOR_EXPERIMENT_CONCURRENCY): wall time from the first claim to the last trial.
- Celery: a scratch PostgreSQL database and a Redis queue (``bench._support.scratch_stack``), one
  ``celery worker -c N`` (N = 1, then 2) started and ready before the clock starts; the clock
  runs from ``experiment_enqueue`` (CONDUCTOR_EXPERIMENT_SLICES tasks sharing the trials) to the
  experiment being finished in the database (polled every 100 ms).
- Scoreboard: a child interpreter fills an experiment of 2,500 items × 4 arms = 10,000 finished
  runs with 3 steps each (bulk inserts, SQLite, then PostgreSQL when it answers), then times
  ``GET /api/experiments/<id>/`` (the scoreboard is computed there) through Django's test client,
  logged in as a member: median of 15 after 2 warm-ups. Target: at most 200 ms.

Celery figures are skipped (with a note) when PostgreSQL or Redis does not answer. Run from the
repository root: ``python -m bench.experiment``. Ends with one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench._support import (
    ADMIN_DATABASE_URL,
    django_setup,
    run_bench_child,
    scratch_stack,
    services_problem,
)

ARMS = "conductor,single:0,reflection,moa"
SCOREBOARD_ITEMS = 2500
SCOREBOARD_ARMS = 4
REPEATS = 15
EXPERIMENT_TIMEOUT = 1800.0


def _suite_experiment(*, enqueue: bool = False):
    from orchestrator.providers.simulator import demo_pool
    from orchestrator.services.datasets import dataset_ensure_suite
    from orchestrator.services.experiments import experiment_create, parse_arms
    from orchestrator.services.pools import pool_sync_from_data, project_get_or_create

    project = project_get_or_create(name="Benchmark")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=0))
    dataset = dataset_ensure_suite(project=project)
    return experiment_create(dataset=dataset, arms=parse_arms(ARMS, pool=pool), enqueue=enqueue)


def _figures(experiment) -> dict:
    from orchestrator.scoreboard import experiment_scoreboard

    board = experiment_scoreboard(experiment=experiment)
    return {
        row["label"]: {
            "accuracy": row["accuracy"],
            "tokens_per_item": row["tokens_per_item"],
            "cost_per_item": row["cost_per_item"],
        }
        for row in board["arms"]
    }


def child_inline() -> dict:
    """In a child on a temporary SQLite file: the suite × 4 arms, executed in this process."""
    django_setup()
    from django.conf import settings
    from django.core.management import call_command

    from orchestrator.services.experiments import experiment_execute

    call_command("migrate", verbosity=0)
    experiment = _suite_experiment()
    started = time.perf_counter()
    experiment_execute(
        experiment_id=experiment.pk, concurrency=settings.CONDUCTOR_EXPERIMENT_CONCURRENCY
    )
    seconds = time.perf_counter() - started
    experiment.refresh_from_db()
    return {
        "runs": experiment.total,
        "status": experiment.status,
        "seconds": round(seconds, 2),
        "runs_per_second": round(experiment.total / seconds, 1),
        "concurrency": settings.CONDUCTOR_EXPERIMENT_CONCURRENCY,
        "arms": _figures(experiment),
    }


def celery(concurrencies=(1, 2)) -> dict:
    """The suite × 4 arms through real Celery workers, 1 then 2 processes."""
    from harness.celery_worker import spawn_celery_worker, wait_until_ready

    results: dict = {}
    with scratch_stack(latency_scale="0") as stack, tempfile.TemporaryDirectory() as logs:
        django_setup()
        from django.conf import settings
        from django.core.management import call_command

        from orchestrator.models import Experiment
        from orchestrator.services.execution import experiment_enqueue

        call_command("migrate", verbosity=0)
        for concurrency in concurrencies:
            experiment = _suite_experiment()
            log_path = Path(logs) / f"worker-{concurrency}.log"
            worker = spawn_celery_worker(
                concurrency=concurrency,
                queue=stack.queue,
                name=f"bench-{uuid.uuid4().hex[:6]}@%h",
                env=stack.env,
                log_path=log_path,
            )
            try:
                wait_until_ready(worker, log_path, 60)
                started = time.perf_counter()
                experiment_enqueue(experiment_id=experiment.pk)
                deadline = time.monotonic() + EXPERIMENT_TIMEOUT
                while Experiment.objects.filter(
                    pk=experiment.pk, status__in=("queued", "running")
                ).exists():
                    if time.monotonic() > deadline or worker.poll() is not None:
                        raise RuntimeError(
                            f"the experiment did not finish: {log_path.read_text()[-2000:]}"
                        )
                    time.sleep(0.1)
                seconds = time.perf_counter() - started
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=30)
            experiment.refresh_from_db()
            results[f"{concurrency}_process{'es' if concurrency > 1 else ''}"] = {
                "runs": experiment.total,
                "status": experiment.status,
                "seconds": round(seconds, 2),
                "runs_per_second": round(experiment.total / seconds, 1),
                "slices": settings.CONDUCTOR_EXPERIMENT_SLICES,
            }
            print(
                f"celery -c {concurrency}: {experiment.total} runs in {seconds:.1f} s", flush=True
            )
    return results


def _fill_scoreboard(user):
    """An experiment of SCOREBOARD_ITEMS × SCOREBOARD_ARMS finished runs, 3 steps each."""
    from orchestrator.models import (
        Dataset,
        DatasetItem,
        Experiment,
        ExperimentArm,
        Membership,
        Pool,
        Project,
        Run,
        Step,
        Trial,
        Worker,
    )

    rng = random.Random(11)
    project = Project.objects.create(name="Bench", slug="bench")
    Membership.objects.create(project=project, user=user, role=Membership.Role.REVIEWER)
    pool = Pool.objects.create(project=project, name="Bench pool")
    Worker.objects.create(pool=pool, name="w", model="sim/math", description="math")
    dataset = Dataset.objects.create(project=project, name="Big", item_count=SCOREBOARD_ITEMS)
    tags = ("arithmetic", "countdown", "code", "lookup")
    items = DatasetItem.objects.bulk_create(
        [
            DatasetItem(
                dataset=dataset,
                position=i,
                input=f"Question {i}?",
                reference="42",
                grader="numeric",
                tags=[tags[i % 4]],
            )
            for i in range(SCOREBOARD_ITEMS)
        ],
        batch_size=2000,
    )
    total = SCOREBOARD_ITEMS * SCOREBOARD_ARMS
    experiment = Experiment.objects.create(
        project=project, dataset=dataset, status="finished", total=total, done=total
    )
    strategies = ("conductor", "single", "reflection", "moa")
    arms = ExperimentArm.objects.bulk_create(
        [
            ExperimentArm(experiment=experiment, position=i, label=s, strategy=s, pool=pool)
            for i, s in enumerate(strategies[:SCOREBOARD_ARMS])
        ]
    )
    for arm in arms:
        runs = Run.objects.bulk_create(
            [
                Run(
                    project=project,
                    pool=pool,
                    strategy=arm.strategy,
                    input=item.input,
                    reference="42",
                    grader="numeric",
                    status="succeeded",
                    score=float(rng.random() < 0.7),
                    tokens_in=rng.randrange(200, 3000),
                    tokens_out=rng.randrange(50, 500),
                    cost=rng.random() / 1000,
                    model_calls=rng.randrange(1, 6),
                    wall_time=rng.random() * 5,
                )
                for item in items
            ],
            batch_size=2000,
        )
        Step.objects.bulk_create(
            [
                Step(
                    run=run,
                    round=0,
                    index=index,
                    instruction="Solve.",
                    worker_index=0,
                    worker_name="w",
                    model="sim/math",
                    status="succeeded",
                    tokens_in=rng.randrange(50, 500),
                    tokens_out=rng.randrange(10, 100),
                )
                for run in runs
                for index in range(3)
            ],
            batch_size=3000,
        )
        Trial.objects.bulk_create(
            [
                Trial(experiment=experiment, arm=arm, item=item, run=run, finished=True)
                for item, run in zip(items, runs, strict=True)
            ],
            batch_size=2000,
        )
    return experiment


def child_scoreboard() -> dict:
    django_setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-only")
    experiment = _fill_scoreboard(user)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    client = Client()
    client.force_login(user)
    url = f"/api/experiments/{experiment.pk}/"
    timings = []
    for _ in range(REPEATS + 2):
        started = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
        runs = sum(row["runs"] for row in response.json()["scoreboard"]["arms"])
        assert runs == SCOREBOARD_ITEMS * SCOREBOARD_ARMS, runs
    return {
        "runs": SCOREBOARD_ITEMS * SCOREBOARD_ARMS,
        "median_ms": round(statistics.median(timings[2:]), 1),
    }


def _postgres_available() -> bool:
    import psycopg

    try:
        with psycopg.connect(ADMIN_DATABASE_URL, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def scoreboard(base_env: dict[str, str]) -> dict:
    figures: dict = {"target_ms": 200}
    with tempfile.TemporaryDirectory(prefix="bench-experiment-") as directory:
        env = dict(base_env, SQLITE_PATH=str(Path(directory) / "bench.sqlite3"))
        figures["sqlite"] = run_bench_child("bench.experiment", "scoreboard", env=env, timeout=900)
    if _postgres_available():
        import psycopg

        name = f"conductor_bench_{os.getpid()}"
        with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            env = dict(
                base_env,
                DATABASE_URL=urlunsplit(urlsplit(ADMIN_DATABASE_URL)._replace(path="/" + name)),
                DJANGO_SECRET_KEY="bench-only",
            )
            figures["postgresql"] = run_bench_child(
                "bench.experiment", "scoreboard", env=env, timeout=900
            )
        finally:
            with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return figures


def main() -> None:
    base_env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    base_env.update(
        DJANGO_SETTINGS_MODULE="webui.settings",
        LOG_LEVEL="WARNING",
        CONDUCTOR_EXECUTION="inline",
        CONDUCTOR_SIM_LATENCY_SCALE="0",
    )
    figures: dict = {"benchmark": "experiment", "arms": ARMS}
    load_before = os.getloadavg()[0]
    figures["scoreboard"] = scoreboard(base_env)
    print(f"scoreboard of 10,000 runs: {figures['scoreboard']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-experiment-") as directory:
        env = dict(base_env, SQLITE_PATH=str(Path(directory) / "bench.sqlite3"))
        figures["inline_sqlite"] = run_bench_child(
            "bench.experiment", "inline", env=env, timeout=3600
        )
    print(f"inline: {figures['inline_sqlite']['seconds']} s", flush=True)
    problem = services_problem()
    if problem:
        figures["celery"] = {"skipped": problem}
    else:
        done = subprocess.run(
            [sys.executable, "-m", "bench.experiment", "--child", "celery"],
            check=False,
            capture_output=True,
            text=True,
            timeout=7200,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        figures["celery"] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(figures))


if __name__ == "__main__":
    if "--child" in sys.argv:
        kind = sys.argv[sys.argv.index("--child") + 1]
        result = {"inline": child_inline, "scoreboard": child_scoreboard, "celery": celery}[kind]()
        print(json.dumps(result))
    else:
        main()
