"""run_cancel: a queued run never starts, a running one stops, a finished one stays as it was."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from orchestrator.engine.types import NullObserver
from orchestrator.models import Run, RunEvent, Step
from orchestrator.services.runs import run_cancel, run_create, run_execute, run_execute_async

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
    def __init__(self, run_id: int) -> None:
        self.run_id = run_id

    async def step_started(self, step) -> None:
        if step.index == 0:
            await sync_to_async(run_cancel)(run_id=self.run_id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_a_running_run_stops_at_its_next_step(sim_pool, call_log):
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
    assert len(call_log.calls) == 1  # step 0 ran to its end; steps 1 to 3 never started
    statuses = [
        s
        async for s in Step.objects.filter(run=run)
        .order_by("index")
        .values_list("status", flat=True)
    ]
    assert statuses == ["succeeded", "pending", "pending", "pending"]
    event = await sync_to_async(last_event)(run)
    assert event["type"] == "step.finished"  # written after the cancellation, nothing after it
    assert not await RunEvent.objects.filter(
        run=run, type="run.finished", data__status="succeeded"
    ).aexists()
