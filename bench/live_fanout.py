"""Live fan-out across processes: every client of every server sees every event, in order.

Method: the production path on this machine, on 127.0.0.1 only. A scratch PostgreSQL database
(created from ``BENCH_DATABASE_URL``, dropped at the end) and Redis (``BENCH_REDIS_URL``: the
Celery broker and channels_redis); two Daphne processes and two Celery workers (prefork, one
process each, on a queue of their own), started here and stopped at the end. The seeded
simulated pool's workers take about a second per step.

For each of RUNS runs (created, not yet started), CLIENTS websocket clients (aiohttp, one event
loop in this process, an API token each call) connect, spread evenly over the two servers, with
``?after=0``: the stored events after seq 0, then every live one, as the run page asks after its
snapshot. Once all are connected the run is handed to Celery. Each client reads until
``run.finished`` (or the run's time limit). A client is *complete and in order* when the seqs it
received are exactly 1..N, N the run's last seq, their types those stored, and the last one is
``run.finished``. Latency, for each ``step.finished`` a client receives: the client's clock when
it reads the message minus the step's ``finished_at`` (one machine, one clock).

Bounded: RUN_TIMEOUT per run, START_TIMEOUT per process; it stops what it started either way.
Run from the repository root: ``python -m bench.live_fanout``. Ends with one JSON line.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._support import ADMIN_DATABASE_URL, REDIS_URL, services_problem
from harness.celery_worker import spawn_celery_worker, wait_until_ready

CLIENTS = 1000
SERVERS = 2
WORKERS = 2
RUNS = 2
QUESTIONS = ("What is 17 * 23 + 4?", "What is 101 * 3 - 7?")
START_TIMEOUT = 60.0
CONNECT_TIMEOUT = 120.0
RUN_TIMEOUT = 180.0
CONNECTING_AT_ONCE = 50
"""Handshakes in flight at once (a real crowd arrives over time, not in one instant)."""
TARGET_P95_MS = 50.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_daphne(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "webui.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited at start:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2):
                return process, port
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    stop(process)
    raise TimeoutError(f"daphne did not answer within {START_TIMEOUT:g} s")


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


async def client(session, url: str, origin: str, connected: asyncio.Event, gate, tally) -> dict:
    """One watcher: connect, then read until run.finished. Returns what it received."""
    received: list[tuple[int, str]] = []
    latencies: list[float] = []
    async with gate:
        socket_ = await session.ws_connect(url, headers={"Origin": origin}, max_msg_size=0)
    tally["connected"] += 1
    if tally["connected"] == CLIENTS:
        connected.set()
    try:
        async for message in socket_:
            now = time.time()
            event = json.loads(message.data)
            received.append((event["seq"], event["type"]))
            if event["type"] == "step.finished":
                finished = dt.datetime.fromisoformat(event["step"]["finished_at"]).timestamp()
                latencies.append((event["seq"], (now - finished) * 1000))
            if event["type"] == "run.finished":
                break
    finally:
        await socket_.close()
    return {
        "url": url,
        "received": received,
        "latencies": latencies,
        "close_code": socket_.close_code,
    }


async def watch(run_id: int, ports: list[int], token: str, start_run) -> list[dict]:
    import aiohttp

    connected = asyncio.Event()
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
    tally = {"connected": 0}
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        tasks = []
        for number in range(CLIENTS):
            port = ports[number % len(ports)]
            url = f"ws://127.0.0.1:{port}/ws/runs/{run_id}/?after=0&token={token}"
            origin = f"http://127.0.0.1:{port}"
            tasks.append(asyncio.create_task(client(session, url, origin, connected, gate, tally)))
        connecting = time.perf_counter()
        await asyncio.wait_for(connected.wait(), CONNECT_TIMEOUT)
        connect_seconds = time.perf_counter() - connecting
        await asyncio.get_running_loop().run_in_executor(None, start_run)
        done, pending = await asyncio.wait(tasks, timeout=RUN_TIMEOUT)
        for task in pending:
            task.cancel()
    results = []
    for task in tasks:
        if task in done and task.exception() is None:
            results.append(task.result())
        else:
            error = task.exception() if task in done else TimeoutError("still reading")
            results.append({"url": "", "received": [], "latencies": [], "error": repr(error)})
    results[0]["connect_seconds"] = connect_seconds
    return results


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(ports: list[int], token: str, pool) -> dict:
    from orchestrator.selectors import run_events_after
    from orchestrator.services.execution import run_enqueue
    from orchestrator.services.runs import run_create

    complete = 0
    clients = 0
    events = 0
    latencies: list[float] = []
    connect_seconds = []
    statuses = []
    problems: list[str] = []
    by_event: dict[tuple[int, int], list[float]] = {}
    for number in range(RUNS):
        run = run_create(pool=pool, input=QUESTIONS[number % len(QUESTIONS)], enqueue=False)
        results = asyncio.run(
            watch(run.pk, ports, token, lambda run_id=run.pk: run_enqueue(run_id=run_id))
        )
        run.refresh_from_db()
        statuses.append(run.status)
        stored = [(event["seq"], event["type"]) for event in run_events_after(run_id=run.pk, seq=0)]
        events += len(stored)
        connect_seconds.append(results[0]["connect_seconds"])
        for result in results:
            clients += 1
            received = result["received"]
            in_order = (
                received == stored
                and [seq for seq, _ in received] == list(range(1, run.last_seq + 1))
                and bool(received)
                and received[-1][1] == "run.finished"
            )
            complete += in_order
            latencies += [ms for _, ms in result["latencies"]]
            for seq, ms in result["latencies"]:
                by_event.setdefault((run.pk, seq), []).append(ms)
            if not in_order:
                problems.append(
                    result.get("error")
                    or f"{len(result['received'])} of {len(stored)} events, then closed with "
                    f"{result['close_code']}"
                )
        print(
            f"run {run.pk} ({run.status}): {len(stored)} events; "
            f"{sum(r['received'] == stored for r in results)} of {CLIENTS} clients saw them all "
            f"in order",
            file=sys.stderr,
            flush=True,
        )
    if problems:
        print("clients that missed something:", file=sys.stderr)
        for problem, count in collections.Counter(problems).most_common(10):
            print(f"{count} × {problem}", file=sys.stderr)
    first_client = [min(values) for values in by_event.values()]
    spread = [max(values) - min(values) for values in by_event.values()]
    return {
        "clients_complete_in_order": complete,
        "clients": clients,
        "events_per_run": events / RUNS,
        "run_statuses": statuses,
        "connect_all_seconds": [round(s, 1) for s in connect_seconds],
        "step_finished_latency": summary(latencies),
        # How much is the servers reaching their first client, how much the fan-out to the rest.
        "first_client_per_event": summary(first_client),
        "fan_out_spread_per_event": summary(spread),
    }


def summary(values: list[float]) -> dict[str, float | None]:
    return {
        "samples": len(values),
        "median_ms": round(statistics.median(values), 1) if values else None,
        "p95_ms": round(percentile(values, 0.95), 1) if values else None,
        "max_ms": round(max(values), 1) if values else None,
    }


def main() -> int:
    problem = services_problem()
    if problem:
        print(json.dumps({"bench": "live_fanout", "skipped": problem}))
        return 0
    import psycopg

    name = f"conductor_fanout_{uuid.uuid4().hex[:10]}"
    queue = f"conductor-fanout-{uuid.uuid4().hex[:10]}"
    database_url = urlunsplit(urlsplit(ADMIN_DATABASE_URL)._replace(path="/" + name))
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": REDIS_URL,
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "benchmark-only"),
        "DJANGO_SETTINGS_MODULE": "webui.settings",
        "CONDUCTOR_EXECUTION": "celery",
        "CONDUCTOR_CELERY_QUEUE": queue,
        "CONDUCTOR_SIM_LATENCY_SCALE": "1",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(env)
    admin = psycopg.connect(ADMIN_DATABASE_URL, autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    processes: list[subprocess.Popen] = []
    try:
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from rest_framework.authtoken.models import Token

        from orchestrator.providers.simulator import demo_pool
        from orchestrator.services.pools import pool_sync_from_data, project_get_or_create

        call_command("migrate", verbosity=0)
        project = project_get_or_create(name="Benchmark")
        pool, _ = pool_sync_from_data(project=project, data=demo_pool())
        user = get_user_model().objects.create_superuser(username="bench", password=None)
        token = Token.objects.create(user=user).key
        with tempfile.TemporaryDirectory() as logs:
            ports = []
            for number in range(SERVERS):
                process, port = start_daphne(env, Path(logs) / f"daphne-{number}.log")
                processes.append(process)
                ports.append(port)
            for number in range(WORKERS):
                log_path = Path(logs) / f"worker-{number}.log"
                worker = spawn_celery_worker(
                    concurrency=1,
                    queue=queue,
                    name=f"fanout-{number}-{uuid.uuid4().hex[:6]}@%h",
                    env=env,
                    log_path=log_path,
                )
                processes.append(worker)
                wait_until_ready(worker, log_path, START_TIMEOUT)
            figures = measure(ports, token, pool)
            # What went wrong on the servers, if anything did (their logs go with the directory).
            for number in range(SERVERS):
                log = (Path(logs) / f"daphne-{number}.log").read_text(errors="replace")
                errors = [line for line in log.splitlines() if "Error" in line or "rror:" in line]
                if errors:
                    print(f"daphne {number}: {len(errors)} error lines, last:", file=sys.stderr)
                    print(*errors[-5:], sep="\n", file=sys.stderr)
    finally:
        for process in processes:
            stop(process)
        from django.db import connections

        connections.close_all()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        client.close()
    p95 = figures["step_finished_latency"]["p95_ms"]
    print(
        json.dumps(
            {
                "bench": "live_fanout",
                "servers": SERVERS,
                "celery_workers": WORKERS,
                "clients_per_run": CLIENTS,
                "runs": RUNS,
                **figures,
                "every_client_saw_every_event_in_order": figures["clients_complete_in_order"]
                == figures["clients"],
                "target_p95_ms": TARGET_P95_MS,
                "meets_latency_target": p95 is not None and p95 <= TARGET_P95_MS,
                # Other work on this two-core machine shows in every figure: say how busy it was.
                "load_average_1min": round(os.getloadavg()[0], 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
