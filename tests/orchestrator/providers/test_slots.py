"""Concurrency bounds in one process (the inline backend without Redis): calls to a bounded
worker or conductor wait their turn, their wait kept apart from their latency, the step timeout
counting from each call's start; the bound holds across threads and event loops."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from orchestrator.engine.conductor import PromptedConductor
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.types import RunSettings, StepSpec, WorkerInfo, Workflow
from orchestrator.providers.slots import LocalSlots, slots_for
from tests.orchestrator.engine.fakes import FakeClient, ScriptedStrategy


class Counting:
    """Counts calls in flight (and the most at once) around a FakeClient's delay."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    def client(self, delay: float, replies=("Answer: 42",)) -> FakeClient:
        counting = self

        class Counted(FakeClient):
            async def complete(self, messages, *, timeout, schema=None):
                with counting.lock:
                    counting.active += 1
                    counting.peak = max(counting.peak, counting.active)
                try:
                    return await super().complete(messages, timeout=timeout)
                finally:
                    with counting.lock:
                        counting.active -= 1

        return Counted(list(replies), delay=delay)


def independent(count: int) -> Workflow:
    return Workflow(tuple(StepSpec(0, f"Attempt {i}", ()) for i in range(count)))


async def test_a_bounded_worker_s_steps_wait_their_turn_and_the_wait_is_not_latency():
    counting = Counting()
    worker = WorkerInfo(
        name="w0",
        model="fake/w",
        description="bounded",
        client=counting.client(0.25),
        slots=LocalSlots("test:bounded-worker", 2),
    )
    # Six steps at once, each taking 0.25 s, under a step timeout of 0.4 s: in pairs, the last
    # pair waits 0.5 s for its turn and still ends in time, as the timeout counts from its call.
    settings = RunSettings(max_steps=6, max_rounds=1, step_timeout=0.4)
    result = await execute_run(
        question="Q",
        strategy=ScriptedStrategy([independent(6)]),
        workers=[worker],
        settings=settings,
    )
    assert result.status == "succeeded", result.error
    assert counting.peak == 2
    queued = sorted(step.queued for step in result.steps)
    assert queued[:2] == pytest.approx([0, 0], abs=0.1)
    assert queued[-1] >= 0.4  # longer than the timeout: it did not count the wait
    assert all(step.latency < 0.4 for step in result.steps)


async def test_without_a_bound_every_step_calls_at_once():
    counting = Counting()
    worker = WorkerInfo(name="w0", model="fake/w", description="", client=counting.client(0.05))
    result = await execute_run(
        question="Q",
        strategy=ScriptedStrategy([independent(5)]),
        workers=[worker],
        settings=RunSettings(max_steps=5, max_rounds=1),
    )
    assert result.status == "succeeded" and counting.peak == 5
    assert all(step.queued < 0.02 for step in result.steps)
    assert slots_for("test:none", None) is None


async def test_a_bounded_conductor_queues_its_calls_across_runs():
    counting = Counting()
    plan = 'model_id = [0]\nsubtasks = ["Solve it"]\naccess_list = [[]]'
    slots = LocalSlots("test:conductor", 1)

    async def one_run():
        conductor = PromptedConductor(counting.client(0.05, [plan]), slots=slots)
        worker = WorkerInfo(name="w0", model="fake/w", description="", client=FakeClient())
        return await execute_run(
            question="Q",
            strategy=conductor,
            workers=[worker],
            settings=RunSettings(max_rounds=1, step_timeout=0.08),
        )

    results = await asyncio.gather(*(one_run() for _ in range(4)))
    assert all(result.status == "succeeded" for result in results)
    assert counting.peak == 1
    waits = sorted(result.plans[0].attempts[0].queued for result in results)
    assert waits[0] < 0.02 and waits[-1] >= 0.12


def test_the_bound_holds_across_threads_and_their_event_loops():
    active = 0
    peak = 0
    lock = threading.Lock()

    async def calls():
        nonlocal active, peak
        slots = LocalSlots("test:threads", 1)  # the same bound, found by name
        for _ in range(5):
            async with slots.hold():
                with lock:
                    active += 1
                    peak = max(peak, active)
                await asyncio.sleep(0.005)
                with lock:
                    active -= 1

    threads = [threading.Thread(target=asyncio.run, args=(calls(),)) for _ in range(4)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert peak == 1 and time.perf_counter() - started >= 20 * 0.005


async def test_a_waiter_that_is_cancelled_gives_its_turn_on():
    slots = LocalSlots("test:cancel", 1)
    order = []

    async def hold(name, seconds):
        async with slots.hold():
            order.append(name)
            await asyncio.sleep(seconds)

    first = asyncio.create_task(hold("first", 0.05))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(hold("cancelled", 0))
    last = asyncio.create_task(hold("last", 0))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    await asyncio.gather(first, last, cancelled, return_exceptions=True)
    assert order == ["first", "last"]
    async with asyncio.timeout(1):  # the bound is free again
        async with slots.hold():
            pass
