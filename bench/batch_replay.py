"""Batch replay: 200 runs replayed with one worker override, runs per second through real Celery
workers, one worker process then two.

Method: a scratch PostgreSQL database (created and dropped here) and Redis as broker and
channel layer, the production stack. For each number of workers, a pool of its own gets 200
finished source runs (executed here beforehand, not timed): Mixture-of-Agents over simulated
workers with zero latency, two proposers (one on "Weak", one on "Other") and an aggregator on
"Strong". The workers (`celery worker -P prefork -c 1` each, on a queue of their own) are
started and warmed up with a batch of 3 runs per process; then the clock runs from
``batch_create`` (filter: that pool, worker "Weak"; override Weak → Strong) until the batch is
finished as its page reads it (``selectors.batch_summary``, polled every 50 ms): the batch task
making the replays 20 at a time and sending itself again, and every replay executing
incrementally (the Weak proposer and the aggregator that reads it run again, the Other proposer
is reused). Printed per worker count: seconds, runs per second, seconds until every replay was
made, model calls per replay against its source's.

Skips with a message (and a JSON line saying so) when PostgreSQL or Redis does not answer.
Admin URLs: BENCH_DATABASE_URL / BENCH_REDIS_URL. ``--runs N`` changes the number of runs.

Run from the repository root: ``python -m bench.batch_replay``. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path

from bench._support import scratch_stack, services_problem, skip
from harness.celery_worker import spawn_celery_worker, wait_until_ready

WORKER_COUNTS = (1, 2)
WORKER_START_TIMEOUT = 60.0
BATCH_TIMEOUT = 900.0
WARMUP_RUNS_PER_PROCESS = 3


def start_workers(count: int, env: dict[str, str], queue: str, logs: Path) -> list:
    processes = []
    for number in range(count):
        log_path = logs / f"worker-{count}-{number}.log"
        process = spawn_celery_worker(
            concurrency=1,
            queue=queue,
            name=f"bench-{uuid.uuid4().hex[:6]}@%h",
            env=env,
            log_path=log_path,
        )
        processes.append(process)
        try:
            wait_until_ready(process, log_path, WORKER_START_TIMEOUT)
        except (RuntimeError, TimeoutError):
            stop_workers(processes)
            raise
    return processes


def stop_workers(processes: list) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def source_pool(project, name: str, runs: int):
    """A pool with ``runs`` finished Mixture-of-Agents runs, one proposer on Weak each."""
    from orchestrator.models import Pool, Worker
    from orchestrator.providers.simulator import load_suite
    from orchestrator.services.runs import run_create, run_execute

    pool = Pool.objects.create(project=project, name=name, conductor_params={"latency": 0})
    for position, (worker, skill) in enumerate((("Weak", 0.0), ("Strong", 1.0), ("Other", 0.5))):
        Worker.objects.create(
            pool=pool,
            position=position,
            name=worker,
            model="sim/swift",
            description="A simulated worker.",
            params={"latency": 0, "skills": {"arithmetic": skill}},
        )
    tasks = [task for task in load_suite() if task.domain == "arithmetic"]
    for number in range(runs):
        task = tasks[number % len(tasks)]
        run = run_create(
            pool=pool,
            input=task.question,
            reference=task.reference,
            strategy="moa",
            strategy_options={"proposers": [0, 2], "aggregator": 1},
            enqueue=False,
        )
        run_execute(run_id=run.pk)
    return pool


def replay_batch(project, admin, pool, processes: list, logs: Path) -> tuple[float, dict]:
    """Create the batch over ``pool``'s runs, wait until it is finished; seconds and summary."""
    from orchestrator import selectors
    from orchestrator.services.batches import batch_create

    started = time.perf_counter()
    batch = batch_create(
        project=project,
        actor=admin,
        filters={"pool": pool.pk, "worker": "Weak"},
        override={"kind": "worker", "from": "Weak", "to": "Strong"},
    )
    deadline = time.monotonic() + BATCH_TIMEOUT
    while True:
        summary = selectors.batch_summary(batch=selectors.batch_get(user=admin, batch_id=batch.pk))
        if summary["status"] == "finished":
            return time.perf_counter() - started, summary
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            raise RuntimeError(f"batch did not finish: {summary['progress']}; logs in {logs}")
        time.sleep(0.05)


def measure(runs: int, worker_env: dict[str, str], queue: str, logs: Path) -> list[dict]:
    from django.contrib.auth import get_user_model

    from orchestrator.models import Batch, BatchItem, Membership, Run
    from orchestrator.services.pools import project_get_or_create

    project = project_get_or_create(name="Benchmark")
    admin = get_user_model().objects.create_user(username="bench-admin")
    Membership.objects.create(project=project, user=admin, role=Membership.Role.ADMIN)
    results = []
    for count in WORKER_COUNTS:
        warmup = source_pool(project, f"Warm-up {count}", WARMUP_RUNS_PER_PROCESS * count)
        pool = source_pool(project, f"Sources {count}", runs)
        processes = start_workers(count, worker_env, queue, logs)
        try:
            replay_batch(project, admin, warmup, processes, logs)
            seconds, summary = replay_batch(project, admin, pool, processes, logs)
        finally:
            stop_workers(processes)
        batch = Batch.objects.get(pk=summary["id"])
        made = (batch.created_all_at - batch.created_at).total_seconds()
        items = BatchItem.objects.filter(batch=batch)
        calls_source = sum(
            Run.objects.filter(pk__in=items.values("source_id")).values_list(
                "model_calls", flat=True
            )
        )
        calls_replay = sum(
            Run.objects.filter(pk__in=items.values("replay_id")).values_list(
                "model_calls", flat=True
            )
        )
        aggregate = summary["aggregate"]
        results.append(
            {
                "workers": count,
                "runs": summary["progress"]["total"],
                "seconds": round(seconds, 3),
                "runs_per_second": round(summary["progress"]["total"] / seconds, 2),
                "replays_made_seconds": round(made, 3),
                "fixed": aggregate["fixed"],
                "calls_per_replay": round(calls_replay / max(1, aggregate["compared"]), 2),
                "calls_per_source": round(calls_source / max(1, aggregate["compared"]), 2),
            }
        )
        print(
            f"{count} worker(s): {runs} replays in {seconds:.2f} s = {runs / seconds:.1f} runs/s "
            f"(all made after {made:.2f} s; {aggregate['fixed']} fixed; "
            f"{calls_replay / max(1, runs):.2f} model calls per replay against "
            f"{calls_source / max(1, runs):.2f} per source)",
            flush=True,
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    problem = services_problem()
    if problem:
        skip("batch_replay", problem)
        return

    with scratch_stack(latency_scale="0") as stack:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        with tempfile.TemporaryDirectory() as logs:
            results = measure(args.runs, stack.env, stack.queue, Path(logs))

    by_workers = {r["workers"]: r for r in results}
    print(
        json.dumps(
            {
                "benchmark": "batch_replay",
                "runs": args.runs,
                **{
                    f"runs_per_second_{n}_worker{'s' if n > 1 else ''}": r["runs_per_second"]
                    for n, r in by_workers.items()
                },
                "scaling_2_over_1": round(
                    by_workers[2]["runs_per_second"] / by_workers[1]["runs_per_second"], 2
                ),
                "replays_made_seconds": {
                    str(n): r["replays_made_seconds"] for n, r in by_workers.items()
                },
                "fixed": {str(n): r["fixed"] for n, r in by_workers.items()},
                "calls_per_replay": by_workers[1]["calls_per_replay"],
                "calls_per_source": by_workers[1]["calls_per_source"],
                "load_average": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
