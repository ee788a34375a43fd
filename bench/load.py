"""Load: the production configuration under 10, 50 and 100 concurrent API clients plus 200
websocket viewers, with one and then two Daphne processes.

Method: a scratch PostgreSQL database (created and dropped here), Redis as broker and channel
layer, two ``celery worker -c 4`` processes on a queue of their own, and one, then two, Daphne
processes on free ports of 127.0.0.1, each with the default connection pool
(``CONDUCTOR_DB_POOL_MAX_SIZE``, 4; ``BENCH_LOAD_POOL_SIZE`` changes it). The demo pool answers
after LATENCY (1 s) per model call, so a run takes several seconds and viewers watch it unfold.
Before the steps, WARMUP_RUNS runs are created and finished (targets for detail and graph).

Each step lasts STEP_SECONDS. Every API client is a loop in this process (aiohttp, one connection
each, spread evenly over the Daphne processes): it sends one request, waits for the answer, thinks
THINK_SECONDS (1 s, uniformly 0.5x to 1.5x), and goes on; requests are drawn from MIX (list,
filtered list, detail, graph, create). Every viewer opens the websocket of one of the three newest
runs on one of the processes, reads until ``run.finished``, pauses about VIEWER_PAUSE_SECONDS, and
opens a newest run again. Live-event latency is the viewer's clock when a ``step.finished``
arrives minus the step's ``finished_at`` (written by the worker; one machine, one clock). An error
is any answer that is not 2xx, or a request that fails or takes over REQUEST_TIMEOUT. After a
step, the runs it created get DRAIN_SECONDS to finish; created and finished are counted.
PostgreSQL connections are sampled from ``pg_stat_activity`` every 50 ms during the step and the
drain, per process kind (``PGAPPNAME``).

Everything (clients, viewers, servers, workers, PostgreSQL, Redis) shares this machine's cores,
so the figures include the load generator's own scheduling; the 1-minute load average is printed.

Run from the repository root: ``python -m bench.load``. ``BENCH_LOAD_STEP_SECONDS`` changes the
step length (default 60), ``BENCH_LOAD_CLIENTS``, ``BENCH_LOAD_DAPHNES`` and
``BENCH_LOAD_VIEWERS`` the steps (defaults 10,50,100; 1,2; 200); ``BENCH_DATABASE_URL`` /
``BENCH_REDIS_URL`` the services. Skips (with a JSON line saying so) when PostgreSQL or Redis does
not answer. Ends with one JSON line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench._support import percentile, scratch_stack, services_problem, skip
from harness.celery_worker import spawn_celery_worker, wait_until_ready
from harness.connections import WEB_APP_NAME, WORKER_APP_NAME, ConnectionSampler
from harness.daphne import DaphneProcess, spawn_daphne

STEP_SECONDS = float(os.environ.get("BENCH_LOAD_STEP_SECONDS", "60"))
CLIENT_STEPS = tuple(int(n) for n in os.environ.get("BENCH_LOAD_CLIENTS", "10,50,100").split(","))
DAPHNE_PROCESSES = tuple(int(n) for n in os.environ.get("BENCH_LOAD_DAPHNES", "1,2").split(","))
VIEWERS = int(os.environ.get("BENCH_LOAD_VIEWERS", "200"))
WORKERS = 2
WORKER_CONCURRENCY = 4
POOL_MAX_SIZE = int(os.environ.get("BENCH_LOAD_POOL_SIZE", "4"))
LATENCY = 1.0
THINK_SECONDS = 1.0
VIEWER_PAUSE_SECONDS = 5.0
REQUEST_TIMEOUT = 30.0
DRAIN_SECONDS = 180.0
WARMUP_RUNS = 20
MIX = (("list", 30), ("filtered list", 25), ("detail", 20), ("graph", 20), ("create", 5))
QUESTIONS = (
    "What is 17 * 23 + 4?",
    "What is 12 * 12 - 4?",
    "What is 101 * 3 - 7?",
    "What is 9 + 10?",
    "What is the capital of France?",
)
LIST_TARGET_P95_MS = 200.0
FINISHED_STATUSES = ("succeeded", "failed", "cancelled")


def latency_summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 0.50), 1),
        "p95_ms": round(percentile(values, 0.95), 1),
        "p99_ms": round(percentile(values, 0.99), 1),
    }


@dataclass
class Users:
    """What the clients need to know: credentials, the pool, runs to read."""

    token: str
    session: str
    pool_id: int
    finished_run_ids: list[int]


@dataclass
class StepRecord:
    """Everything measured during one step."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    error_examples: list[str] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    live_ms: list[float] = field(default_factory=list)
    viewer_errors: int = 0
    viewer_error_examples: list[str] = field(default_factory=list)
    runs_watched: int = 0

    def viewer_error(self, text: str) -> None:
        self.viewer_errors += 1
        if len(self.viewer_error_examples) < 5:
            self.viewer_error_examples.append(text[:300])

    def error(self, label: str, text: str) -> None:
        self.errors[label] = self.errors.get(label, 0) + 1
        if len(self.error_examples) < 5:
            self.error_examples.append(f"{label}: {text}"[:300])


async def api_client(
    number: int, base_url: str, users: Users, record: StepRecord, stop: asyncio.Event
) -> None:
    import aiohttp

    rng = random.Random(number)
    labels = [label for label, weight in MIX for _ in range(weight)]
    headers = {"Authorization": f"Token {users.token}"}
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(
        base_url=base_url, headers=headers, connector=connector, timeout=timeout
    ) as http:
        await asyncio.sleep(rng.uniform(0, THINK_SECONDS))  # do not all start at once
        while not stop.is_set():
            label = rng.choice(labels)
            run_id = rng.choice(users.finished_run_ids)
            if label == "list":
                request = http.get("/api/runs/")
            elif label == "filtered list":
                status = rng.choice(("succeeded", "failed", "running"))
                request = http.get(f"/api/runs/?status={status}&strategy=conductor")
            elif label == "detail":
                request = http.get(f"/api/runs/{run_id}/")
            elif label == "graph":
                request = http.get(f"/api/runs/{run_id}/graph/")
            else:
                payload = {"input": rng.choice(QUESTIONS), "pool": users.pool_id}
                request = http.post("/api/runs/", json=payload)
            started = time.perf_counter()
            try:
                async with request as answer:
                    body = await answer.read()
                    elapsed = (time.perf_counter() - started) * 1000
                    if 200 <= answer.status < 300:
                        record.latencies.setdefault(label, []).append(elapsed)
                        if label == "create":
                            record.created.append(json.loads(body)["id"])
                    else:
                        record.error(label, f"{answer.status} {body[:200]!r}")
            except (TimeoutError, aiohttp.ClientError) as error:
                record.error(label, repr(error))
            await asyncio.sleep(THINK_SECONDS * rng.uniform(0.5, 1.5))


async def viewer(number: int, server: DaphneProcess, users: Users, record: StepRecord) -> None:
    """Watches one of the newest runs to its end, pauses, and again; cancelled at the end."""
    import aiohttp

    rng = random.Random(10_000 + number)
    headers = {"Cookie": f"sessionid={users.session}", "Origin": server.url}
    async with aiohttp.ClientSession() as http:
        await asyncio.sleep(rng.uniform(0, VIEWER_PAUSE_SECONDS))
        while True:
            if not record.created:
                await asyncio.sleep(0.2)
                continue
            run_id = rng.choice(record.created[-3:])  # one of the newest runs
            try:
                async with http.ws_connect(
                    f"{server.ws_url}/ws/runs/{run_id}/", headers=headers
                ) as socket:
                    record.runs_watched += 1
                    async for message in socket:
                        received = time.time()
                        event = json.loads(message.data)
                        if event["type"] == "step.finished":
                            finished_at = datetime.fromisoformat(event["step"]["finished_at"])
                            record.live_ms.append((received - finished_at.timestamp()) * 1000)
                        elif event["type"] == "run.finished" or (
                            event["type"] == "snapshot"
                            and event["state"]["run"]["status"] in FINISHED_STATUSES
                        ):
                            break
            except (TimeoutError, aiohttp.ClientError) as error:
                record.viewer_error(repr(error))
            await asyncio.sleep(VIEWER_PAUSE_SECONDS * rng.uniform(0.5, 1.5))


async def drive(
    servers: list[DaphneProcess], clients: int, users: Users, record: StepRecord
) -> float:
    """Clients and viewers for STEP_SECONDS; returns the seconds measured."""
    stop = asyncio.Event()
    clients_tasks = [
        asyncio.create_task(api_client(n, servers[n % len(servers)].url, users, record, stop))
        for n in range(clients)
    ]
    viewer_tasks = [
        asyncio.create_task(viewer(n, servers[n % len(servers)], users, record))
        for n in range(VIEWERS)
    ]
    started = time.perf_counter()
    await asyncio.sleep(STEP_SECONDS)
    stop.set()
    seconds = time.perf_counter() - started
    for task in viewer_tasks:
        task.cancel()
    await asyncio.gather(*viewer_tasks, return_exceptions=True)
    await asyncio.wait_for(asyncio.gather(*clients_tasks), REQUEST_TIMEOUT + 10)
    return seconds


def wait_finished(run_ids: list[int], timeout: float) -> int:
    from orchestrator.models import Run

    deadline = time.monotonic() + timeout
    while True:
        finished = Run.objects.filter(pk__in=run_ids, status__in=Run.FINISHED).count()
        if finished == len(run_ids) or time.monotonic() > deadline:
            return finished
        time.sleep(0.25)


def prepare(database_url: str) -> Users:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from orchestrator.models import Membership
    from orchestrator.providers.simulator import demo_pool
    from orchestrator.services.pools import (
        membership_set,
        pool_sync_from_data,
        project_get_or_create,
    )

    call_command("migrate", verbosity=0)
    project = project_get_or_create(name="Load")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=LATENCY))
    user = get_user_model().objects.create_user(username="load")
    membership_set(project=project, user=user, role=Membership.Role.ADMIN)
    browser = Client()
    browser.force_login(user)
    return Users(
        token=Token.objects.create(user=user).key,
        session=browser.cookies["sessionid"].value,
        pool_id=pool.pk,
        finished_run_ids=[],
    )


async def warm_up(server: DaphneProcess, users: Users) -> list[int]:
    import aiohttp

    headers = {"Authorization": f"Token {users.token}"}
    async with aiohttp.ClientSession(base_url=server.url, headers=headers) as http:
        run_ids = []
        for number in range(WARMUP_RUNS):
            payload = {"input": QUESTIONS[number % len(QUESTIONS)], "pool": users.pool_id}
            async with http.post("/api/runs/", json=payload) as answer:
                if answer.status != 201:
                    raise RuntimeError(f"warm-up create: {answer.status} {await answer.text()}")
                run_ids.append((await answer.json())["id"])
    return run_ids


def measure_step(
    servers: list[DaphneProcess], clients: int, users: Users, database: str, conninfo: str
) -> dict:
    record = StepRecord()
    with ConnectionSampler(conninfo=conninfo, database=database) as sampler:
        seconds = asyncio.run(drive(servers, clients, users, record))
        finished = wait_finished(record.created, DRAIN_SECONDS)
    # Later steps read the runs this one created too.
    users.finished_run_ids.extend(record.created[:200])
    requests = sum(len(values) for values in record.latencies.values())
    errors = sum(record.errors.values())
    result = {
        "daphne_processes": len(servers),
        "clients": clients,
        "viewers": VIEWERS,
        "seconds": round(seconds, 1),
        "requests": requests + errors,
        "requests_per_second": round((requests + errors) / seconds, 1),
        "endpoints": {label: latency_summary(values) for label, values in record.latencies.items()},
        "errors": errors,
        "errors_by_endpoint": record.errors,
        "error_examples": record.error_examples,
        "peak_connections": {
            "web": sampler.peak[WEB_APP_NAME],
            "workers": sampler.peak[WORKER_APP_NAME],
            "web_and_workers": sampler.peak_app,
            "bound": len(servers) * POOL_MAX_SIZE + WORKERS * WORKER_CONCURRENCY,
            "all_including_this_process": sampler.peak_total,
        },
        "runs_created": len(record.created),
        "runs_finished": finished,
        "runs_watched": record.runs_watched,
        "viewer_errors": record.viewer_errors,
        "viewer_error_examples": record.viewer_error_examples,
        "live_event_latency": latency_summary(record.live_ms),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    list_p95 = result["endpoints"].get("list", {}).get("p95_ms", "-")
    print(
        f"{len(servers)} daphne, {clients:3d} clients + {VIEWERS} viewers: "
        f"{result['requests_per_second']} req/s, list p95 {list_p95} ms, {errors} errors, "
        f"connections peak {sampler.peak_app} (web {sampler.peak[WEB_APP_NAME]}, workers "
        f"{sampler.peak[WORKER_APP_NAME]}), runs {finished}/{len(record.created)} finished, "
        f"live p95 {result['live_event_latency'].get('p95_ms', '-')} ms, "
        f"load {result['load_average_1min']}",
        flush=True,
    )
    return result


def run(env: dict[str, str], database: str, database_url: str, logs: Path) -> list[dict]:
    import django

    django.setup()
    users = prepare(database_url)
    worker_env = {**env, "PGAPPNAME": WORKER_APP_NAME}
    web_env = {**env, "PGAPPNAME": WEB_APP_NAME, "CONDUCTOR_DB_POOL_MAX_SIZE": str(POOL_MAX_SIZE)}
    workers, servers = [], []
    results = []
    try:
        for number in range(WORKERS):
            log_path = logs / f"worker{number}.log"
            process = spawn_celery_worker(
                concurrency=WORKER_CONCURRENCY,
                queue=env["CONDUCTOR_CELERY_QUEUE"],
                name=f"load{number}-{uuid.uuid4().hex[:6]}@%h",
                env=worker_env,
                log_path=log_path,
            )
            workers.append(process)
            wait_until_ready(process, log_path, 60)
        for processes in DAPHNE_PROCESSES:
            while len(servers) < processes:
                log_path = logs / f"daphne{len(servers)}.log"
                servers.append(spawn_daphne(env=web_env, log_path=log_path))
            if not users.finished_run_ids:
                warmup = asyncio.run(warm_up(servers[0], users))
                if wait_finished(warmup, DRAIN_SECONDS) != len(warmup):
                    raise RuntimeError(f"warm-up runs did not finish; logs in {logs}")
                users.finished_run_ids.extend(warmup)
            for clients in CLIENT_STEPS:
                results.append(measure_step(servers, clients, users, database, database_url))
    finally:
        for server in servers:
            server.stop()
        for process in workers:
            import signal

            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    return results


def main() -> None:
    problem = services_problem()
    if problem:
        skip("load", problem)
        return

    with scratch_stack(latency_scale="1") as stack, tempfile.TemporaryDirectory() as logs:
        started = time.perf_counter()
        results = run(stack.env, stack.name, stack.database_url, Path(logs))

    one_daphne_50 = [r for r in results if r["daphne_processes"] == 1 and r["clients"] == 50]
    list_p95_50 = (
        one_daphne_50[0]["endpoints"].get("list", {}).get("p95_ms") if one_daphne_50 else None
    )
    summary = {
        "benchmark": "load",
        "step_seconds": STEP_SECONDS,
        "total_seconds": round(time.perf_counter() - started, 1),
        "errors_total": sum(r["errors"] for r in results),
        "errors_at_100_clients": sum(r["errors"] for r in results if r["clients"] == 100),
        "runs_created": sum(r["runs_created"] for r in results),
        "runs_finished": sum(r["runs_finished"] for r in results),
        "list_p95_ms_50_clients_1_daphne": list_p95_50,
        "list_p95_target_ms": LIST_TARGET_P95_MS,
        "meets_list_target": list_p95_50 is not None and list_p95_50 <= LIST_TARGET_P95_MS,
        "peak_connections": max(r["peak_connections"]["web_and_workers"] for r in results),
        "connection_bound_2_daphne": 2 * POOL_MAX_SIZE + WORKERS * WORKER_CONCURRENCY,
        "steps": [
            {
                key: value
                for key, value in r.items()
                if key not in ("error_examples", "viewer_error_examples") or r[key]
            }
            for r in results
        ],
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
