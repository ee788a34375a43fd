"""Celery throughput: simulated runs per second through real Celery workers, 1 then 2 processes.

Method: a scratch PostgreSQL database (created and dropped here) and Redis as broker and channel
layer, the production stack. The demo pool with zero latency, so what is measured is the path
around the model calls: the broker, the task (status check, per-run lease), the engine, storing
every plan, step and event, and publishing each event through channels_redis. For each
concurrency (one `celery worker -P prefork -c N`, on a queue of its own), 500 runs are created
beforehand (not timed), the worker is started and warmed up with 3 runs per process, then the
clock runs from enqueuing the first run to the last run being finished in the database (polled
every 50 ms).

Skips with a message (and a JSON line saying so) when PostgreSQL or Redis does not answer.
Admin URLs: BENCH_DATABASE_URL / BENCH_REDIS_URL, defaulting to the local services
``make test-production`` uses. ``--runs N`` changes the number of runs.

Run from the repository root: ``python -m bench.celery_throughput``. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from bench._support import scratch_stack, services_problem, skip
from harness.celery_worker import spawn_celery_worker, wait_until_ready

CONCURRENCIES = (1, 2)
WORKER_START_TIMEOUT = 60.0
RUN_TIMEOUT = 600.0
WARMUP_RUNS_PER_PROCESS = 3
TASK_TIME = re.compile(r"run_execute_task\[[^\]]+\] succeeded in ([0-9.]+)s")


def start_worker(concurrency: int, env: dict[str, str], queue: str, log_path: Path):
    process = spawn_celery_worker(
        concurrency=concurrency,
        queue=queue,
        name=f"bench-{uuid.uuid4().hex[:6]}@%h",
        env=env,
        log_path=log_path,
    )
    try:
        wait_until_ready(process, log_path, WORKER_START_TIMEOUT)
    except (RuntimeError, TimeoutError):
        stop_worker(process)
        raise
    return process


def stop_worker(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def enqueue_and_wait(run_ids: list[int], worker: subprocess.Popen, logs: Path) -> float:
    """Hand the runs to Celery, wait until all are finished; return the enqueuing time."""
    from orchestrator.models import Run
    from orchestrator.services.execution import run_enqueue

    started = time.perf_counter()
    for run_id in run_ids:
        run_enqueue(run_id=run_id)
    enqueued = time.perf_counter() - started
    pending = Run.objects.filter(pk__in=run_ids).exclude(status__in=Run.FINISHED)
    deadline = time.monotonic() + RUN_TIMEOUT
    while pending.exists():
        if time.monotonic() > deadline or worker.poll() is not None:
            raise RuntimeError(f"runs did not finish; worker log in {logs}")
        time.sleep(0.05)
    return enqueued


def measure(runs: int, worker_env: dict[str, str], queue: str, logs: Path) -> list[dict]:
    from orchestrator.models import Run
    from orchestrator.providers.simulator import demo_pool, load_suite
    from orchestrator.services.pools import pool_sync_from_data, project_get_or_create
    from orchestrator.services.runs import run_create

    project = project_get_or_create(name="Benchmark")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=0))
    questions = [task.question for task in load_suite()]
    results = []
    for concurrency in CONCURRENCIES:
        run_ids = [
            run_create(pool=pool, input=questions[i % len(questions)], enqueue=False).pk
            for i in range(runs)
        ]
        warmup_ids = [
            run_create(pool=pool, input=questions[i], enqueue=False).pk
            for i in range(WARMUP_RUNS_PER_PROCESS * concurrency)
        ]
        worker = start_worker(concurrency, worker_env, queue, logs / f"worker-c{concurrency}.log")
        try:
            # Every pool process loads the engine and the simulator's suite on its first run.
            enqueue_and_wait(warmup_ids, worker, logs)
            started = time.perf_counter()
            enqueued = enqueue_and_wait(run_ids, worker, logs)
            seconds = time.perf_counter() - started
        finally:
            stop_worker(worker)
        finished = Run.objects.filter(pk__in=run_ids)
        succeeded = finished.filter(status=Run.Status.SUCCEEDED).count()
        # What each task took inside the worker, from its "succeeded in Xs" log lines.
        task_seconds = [
            float(match)
            for match in TASK_TIME.findall(
                (logs / f"worker-c{concurrency}.log").read_text(errors="replace")
            )
        ][len(warmup_ids) :]
        mean_task_ms = sum(task_seconds) / max(1, len(task_seconds)) * 1e3
        results.append(
            {
                "processes": concurrency,
                "runs": runs,
                "succeeded": succeeded,
                "seconds": round(seconds, 3),
                "enqueue_seconds": round(enqueued, 3),
                "runs_per_second": round(runs / seconds, 2),
                "mean_task_ms": round(mean_task_ms, 1),
            }
        )
        print(
            f"{concurrency} worker process(es): {runs} runs in {seconds:.2f} s = "
            f"{runs / seconds:.1f} runs/s ({succeeded} succeeded; enqueuing took "
            f"{enqueued:.2f} s; a task took {mean_task_ms:.0f} ms on average in the worker)",
            flush=True,
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()

    problem = services_problem()
    if problem:
        skip("celery_throughput", problem)
        return

    with scratch_stack(latency_scale="0") as stack:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        with tempfile.TemporaryDirectory() as logs:
            results = measure(args.runs, stack.env, stack.queue, Path(logs))

    by_processes = {r["processes"]: r["runs_per_second"] for r in results}
    print(
        json.dumps(
            {
                "benchmark": "celery_throughput",
                "runs": args.runs,
                **{
                    f"runs_per_second_{n}_process{'es' if n > 1 else ''}": v
                    for n, v in by_processes.items()
                },
                "scaling_2_over_1": round(by_processes[2] / by_processes[1], 2),
                "succeeded": {str(r["processes"]): r["succeeded"] for r in results},
                "mean_task_ms": {str(r["processes"]): r["mean_task_ms"] for r in results},
                "load_average": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
