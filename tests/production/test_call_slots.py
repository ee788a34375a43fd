"""Concurrency bounds held across processes through Redis: two Celery workers (four executing
processes) running conductor runs against a local OpenAI-compatible server that counts the calls
it answers at once; a bounded conductor and a bounded worker never see more than their bound, the
calls queue instead of timing out, and a process that dies holding a slot frees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings

from orchestrator.models import Plan, Run, Step
from orchestrator.providers.slots import RedisSlots
from orchestrator.services.pools import project_get_or_create
from orchestrator.services.runs import run_create
from tests.factories import make_pool, make_worker
from tests.openai_server import FakeOpenAI, running_openai_server

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

RUNS = 6
STEP_TIMEOUT = 1.0  # less than RUNS calls one after another take (RUNS * QUEUE_SECONDS)


@pytest.fixture
def server():
    with running_openai_server() as url:
        yield url


def queued_pool(server: str, *, bounded: bool):
    """A pool whose conductor (json output) and one worker call the server's counted models;
    with ``bounded``, one call at a time each."""
    pool = make_pool(
        project=project_get_or_create(name="Slots"),
        workers=0,
        conductor_model="openai/queue-conductor",
        conductor_api_base=server,
        conductor_params={},
        conductor_output="json",
        conductor_max_concurrency=1 if bounded else None,
        max_rounds=1,
        step_timeout=STEP_TIMEOUT,
    )
    make_worker(
        pool=pool,
        position=0,
        name="counted",
        model="openai/queue-worker",
        api_base=server,
        params={},
        max_concurrency=1 if bounded else None,
    )
    return pool


def run_all(pool, count: int, timeout: float = 60.0, strategy: str = "conductor") -> list[Run]:
    runs = [run_create(pool=pool, input=f"Question {i}?", strategy=strategy) for i in range(count)]
    deadline = time.monotonic() + timeout
    ids = [run.pk for run in runs]
    while Run.objects.filter(pk__in=ids).exclude(status__in=Run.FINISHED).exists():
        assert time.monotonic() < deadline, "the runs did not finish"
        time.sleep(0.1)
    return list(Run.objects.filter(pk__in=ids))


def test_two_celery_workers_hold_one_bound_and_calls_queue_instead_of_timing_out(
    server, start_celery_worker
):
    start_celery_worker(concurrency=2)
    start_celery_worker(concurrency=2)

    # Control: unbounded, the four executing processes call the server at once.
    runs = run_all(queued_pool(server, bounded=False), 4)
    assert all(run.status == "succeeded" for run in runs), [run.error for run in runs]
    assert FakeOpenAI.peak["queue-conductor"] >= 2

    FakeOpenAI.reset()
    pool = queued_pool(server, bounded=True)
    runs = run_all(pool, RUNS)
    assert [run.status for run in runs] == ["succeeded"] * RUNS, [run.error for run in runs]
    assert FakeOpenAI.peak == {"queue-conductor": 1, "queue-worker": 1}
    plans = list(Plan.objects.filter(run__in=runs))
    # Every call took its own time; the waits were in the queue, and some waited longer than
    # the step timeout, which counts from the call's start.
    conductor_waits = [attempt["queued"] for plan in plans for attempt in plan.attempts]
    assert len(conductor_waits) == RUNS and max(conductor_waits) > STEP_TIMEOUT
    assert all(attempt["error"] == "" for plan in plans for attempt in plan.attempts)

    # The worker's own bound, its steps all asked for at once (no conductor to space them).
    FakeOpenAI.reset()
    runs = run_all(pool, RUNS, strategy="single")
    assert [run.status for run in runs] == ["succeeded"] * RUNS, [run.error for run in runs]
    assert FakeOpenAI.peak == {"queue-worker": 1}
    steps = list(Step.objects.filter(run__in=runs))
    assert all(step.latency < STEP_TIMEOUT and step.attempts == 1 for step in steps)
    assert max(step.queued for step in steps) > STEP_TIMEOUT


HOLDER = """
import asyncio, sys
from orchestrator.providers.slots import RedisSlots

async def main():
    async with RedisSlots("test:dead-holder", 1, url=sys.argv[1], ttl=1.0).hold():
        print("held", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_a_process_that_dies_holding_a_slot_frees_it_after_the_ttl():
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, settings.REDIS_URL],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert holder.stdout.readline().strip() == b"held"
        time.sleep(1.5)  # renewed meanwhile: still held past its first ttl
        slots = RedisSlots("test:dead-holder", 1, url=settings.REDIS_URL, ttl=1.0)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        started = time.perf_counter()
        async with slots.hold():
            waited = time.perf_counter() - started
    finally:
        if holder.poll() is None:
            holder.kill()
    # Freed when the dead holder's last renewal lapsed: within a ttl, not at once.
    assert 0.2 < waited < 1.6
