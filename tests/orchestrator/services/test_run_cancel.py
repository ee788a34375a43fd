"""run_cancel: a queued run never starts, a running one stops, a finished one stays as it was."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async

from orchestrator.engine.types import NullObserver
from orchestrator.models import Run, RunEvent, Step
from orchestrator.services import recording
from orchestrator.services.runs import run_cancel, run_create, run_execute, run_execute_async
from tests.factories import make_step

QUESTION = "What is 6 times 7?"


def last_event(run: Run) -> dict:
    return RunEvent.objects.filter(run=run).order_by("-seq").values_list("data", flat=True).first()


def test_a_cancelled_queued_run_is_never_executed(sim_pool, call_log):
    run = run_create(pool=sim_pool, input=QUESTION, enqueue=False)

    cancelled = run_cancel(run_id=run.pk)
    run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert cancelled.status == run.status == Run.Status.CANCELLED
    assert run.finished_at is not None
    assert run.wall_time is None  # it never started
    assert call_log.calls == []
    assert not Step.objects.filter(run=run).exists()
    event = last_event(run)
    assert event["type"] == "run.finished" and event["status"] == "cancelled"


def test_a_finished_run_is_left_as_it_is(sim_pool):
    run = run_create(pool=sim_pool, input=QUESTION, strategy="single", enqueue=False)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    seq = run.last_seq

    assert run_cancel(run_id=run.pk).status == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.last_seq == seq


class CancelWhenFirstStepStarts(NullObserver):
    """Cancels the run once its first step is stored as running: the cancel lands while that
    step's model call is in flight."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id

    async def step_started(self, step) -> None:
        if step.index == 0:
            await sync_to_async(run_cancel)(run_id=self.run_id)


# With a send window the execution holds committed events back a moment: the cancel's
# run.finished, committed by another thread meanwhile, must still leave after them.
@pytest.mark.parametrize("send_window", [0.0, 0.3], ids=["sent-at-once", "held-back"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_a_run_cancelled_mid_step_closes_every_step_and_says_nothing_after(
    sim_pool, call_log, sent_events, monkeypatch, send_window
):
    monkeypatch.setattr(recording, "SEND_WINDOW_SECONDS", send_window)
    run = await sync_to_async(run_create)(
        pool=sim_pool,
        input=QUESTION,
        strategy="reflection",
        strategy_options={"rounds": 3},
        enqueue=False,
    )

    await run_execute_async(run_id=run.pk, observer=CancelWhenFirstStepStarts(run.pk))

    await run.arefresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert len(call_log.calls) == 1  # step 0's call was in flight; steps 1 to 3 never started
    steps = [
        step
        async for step in Step.objects.filter(run=run)
        .order_by("index")
        .values("id", "status", "error", "finished_at")
    ]
    assert [step["status"] for step in steps] == ["cancelled", "skipped", "skipped", "skipped"]
    assert steps[0]["error"] == "Stopped while running: the run was cancelled"
    assert {step["error"] for step in steps[1:]} == {"Not run: the run was cancelled"}
    assert all(step["finished_at"] == run.finished_at for step in steps)

    stored = await sync_to_async(stored_events)(run)
    assert [event["seq"] for event in stored] == list(range(1, len(stored) + 1))
    assert sent_events == stored  # each sent once, after its commit, in order
    finished = stored[-1]
    assert finished["type"] == "run.finished" and finished["status"] == "cancelled"
    assert [e["type"] for e in stored].count("run.finished") == 1
    # Step 0's response came back after the cancel: it was dropped, not announced.
    assert not any(e["type"] in ("step.finished", "step.failed") for e in stored)
    assert finished["closed_steps"] == {
        "cancelled": {"ids": [steps[0]["id"]], "error": steps[0]["error"]},
        "skipped": {"ids": [s["id"] for s in steps[1:]], "error": steps[1]["error"]},
    }
    assert finished["finished_at"] == run.finished_at.isoformat()
    # It ran until the cancel: its wall time is that, on the run and in the event.
    assert run.wall_time == (run.finished_at - run.started_at).total_seconds() > 0
    assert finished["totals"]["wall_time"] == run.wall_time
    # The recorder stored nothing after run.finished: no usage of the dropped response either.
    assert run.last_seq == finished["seq"] and run.tokens_in == 0


async def _slow_models(pool, *, conductor: float = 0, workers: float = 0) -> None:
    """Give the pool's conductor and workers these latencies (seconds per call)."""
    from orchestrator.models import Worker

    pool.conductor_params = {**pool.conductor_params, "latency": conductor}
    await pool.asave(update_fields=["conductor_params"])
    for worker in await sync_to_async(list)(Worker.objects.filter(pool=pool)):
        worker.params = {**worker.params, "latency": workers}
        await worker.asave(update_fields=["params"])


def _cancelled_just_before(monkeypatch, callback: str) -> None:
    """Cancel the run, as a person would, right before the recorder stores ``callback``."""
    from orchestrator.services.recorder import RunRecorder
    from orchestrator.services.runs import _cancel

    store = getattr(RunRecorder, callback)

    def cancelled_first(recorder, *args):
        _cancel(recorder.run_id)
        return store(recorder, *args)

    monkeypatch.setattr(RunRecorder, callback, cancelled_first)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_a_cancel_found_while_storing_stops_the_conductor_call_in_flight(
    sim_pool, call_log, sent_events, monkeypatch
):
    """Executed with nothing else listening, the planning callback is stored while the
    conductor's call is already under way; finding the run cancelled stops that call at once."""
    import asyncio

    await _slow_models(sim_pool, conductor=60)
    run = await sync_to_async(run_create)(pool=sim_pool, input=QUESTION, enqueue=False)
    _cancelled_just_before(monkeypatch, "planning")

    await asyncio.wait_for(run_execute_async(run_id=run.pk), timeout=30)  # not the 60 s call

    await run.arefresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert len(call_log.calls) == 1  # the conductor's, stopped in flight
    assert not await Step.objects.filter(run=run).aexists()
    stored = await sync_to_async(stored_events)(run)
    assert [e["type"] for e in stored][-1:] == ["run.finished"]  # no plan, no step before it
    assert not {"plan.created", "step.created"} & {e["type"] for e in stored}
    assert stored[-1]["status"] == "cancelled"
    assert sent_events == stored


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_a_step_whose_start_finds_the_run_cancelled_never_calls_its_model(
    sim_pool, call_log, sent_events, monkeypatch
):
    from orchestrator.services.recorder import RunRecorder
    from orchestrator.services.runs import _cancel

    await _slow_models(sim_pool, workers=60)
    run = await sync_to_async(run_create)(
        pool=sim_pool, input=QUESTION, strategy="single", enqueue=False
    )
    record = RunRecorder.record

    def cancelled_before_the_start(recorder, calls):
        """What comes before the step's start is stored; then a person cancels the run (a
        transaction of its own); then the start is stored, or rather refused."""
        names = [name for name, _ in calls]
        if "step_started" in names:
            record(recorder, calls[: names.index("step_started")])
            _cancel(recorder.run_id)
            calls = calls[names.index("step_started") :]
        return record(recorder, calls)

    monkeypatch.setattr(RunRecorder, "record", cancelled_before_the_start)

    await run_execute_async(run_id=run.pk)

    await run.arefresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert call_log.calls == []  # the step's start was refused before its model was called
    steps = Step.objects.filter(run=run).values_list("status", "error")
    assert [step async for step in steps] == [("skipped", "Not run: the run was cancelled")]
    stored = await sync_to_async(stored_events)(run)
    assert stored[-1]["type"] == "run.finished" and stored[-1]["status"] == "cancelled"
    assert not any(e["type"] == "step.started" for e in stored)
    # Each sent once. (The cancel's run.finished is sent from its own commit, and may reach
    # the layer before events committed just before it: a client resyncs from the seqs.)
    assert sorted(sent_events, key=lambda event: event["seq"]) == stored


def test_a_run_cancelled_before_it_starts_skips_its_steps(sim_pool, sent_events):
    run = run_create(pool=sim_pool, input=QUESTION, strategy="moa", enqueue=False)
    make_step(run=run, index=0)
    make_step(run=run, index=1)

    run_cancel(run_id=run.pk)

    assert set(Step.objects.filter(run=run).values_list("status", flat=True)) == {"skipped"}
    event = last_event(run)
    assert event["closed_steps"].keys() == {"skipped"}
    assert len(event["closed_steps"]["skipped"]["ids"]) == 2


def test_cancel_waits_out_a_short_lock_and_queues_past_its_wait(monkeypatch, sim_pool):
    from django.db import OperationalError

    from orchestrator.services import runs

    run = run_create(pool=sim_pool, input=QUESTION, enqueue=False)
    locked_for = {"tries": 2}
    real_cancel = runs._cancel
    pauses: list[float] = []

    def cancel_behind_a_lock(run_id):
        if locked_for["tries"] > 0:
            locked_for["tries"] -= 1
            raise OperationalError("database is locked")
        return real_cancel(run_id)

    monkeypatch.setattr(runs, "_cancel", cancel_behind_a_lock)
    cancelled = run_cancel(run_id=run.pk, sleep=pauses.append)

    assert cancelled.status == Run.Status.CANCELLED
    assert pauses == [0.05, 0.1]  # backoff doubles between tries

    other = run_create(pool=sim_pool, input=QUESTION, enqueue=False)
    queued: list[int] = []
    locked_for["tries"] = 10**6
    monkeypatch.setattr(runs, "_cancel_in_background", queued.append)
    answer = run_cancel(run_id=other.pk, wait=0.2, sleep=lambda seconds: None)

    assert answer.status == Run.Status.QUEUED  # not finished yet: the API answers 202
    for _ in range(100):
        if queued:
            break
        time.sleep(0.01)
    assert queued == [other.pk]


def stored_events(run: Run) -> list[dict]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("data", flat=True))
