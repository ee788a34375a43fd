"""Who executes a run: claims and leases, the fencing token that turns a taken-over execution
away, the interruption limit, and which runs a starting server resumes."""

from __future__ import annotations

import time
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.utils import timezone

from orchestrator import providers, selectors, wire
from orchestrator.models import Run, RunEvent, Step
from orchestrator.selectors import run_ids_unheld
from orchestrator.services.ownership import run_claim, run_claim_release
from orchestrator.services.runs import run_create, run_execute

QUESTION = "What is 17 * 23?"


def new_run(pool, **kwargs) -> Run:
    return run_create(pool=pool, input=QUESTION, enqueue=False, **kwargs)


def test_a_leased_claim_keeps_others_out_until_released_or_lapsed(sim_pool):
    run = new_run(sim_pool)
    first = run_claim(run_id=run.pk, executor="a", lease_seconds=60)
    assert first is not None and first.fence == 1
    assert run_claim(run_id=run.pk, executor="b", lease_seconds=60) is None

    run_claim_release(claim=first)
    second = run_claim(run_id=run.pk, executor="b", lease_seconds=0.05)
    assert second is not None and second.fence == 2
    run.refresh_from_db()
    assert (run.executor, run.interruptions) == ("b", 0)  # a let go: not an interruption

    time.sleep(0.1)  # b dies without letting go; its lease lapses
    third = run_claim(run_id=run.pk, executor="c", lease_seconds=60)
    assert third is not None and third.fence == 3
    run.refresh_from_db()
    assert (run.executor, run.interruptions) == ("c", 1)
    run_claim_release(claim=second)  # b's late release leaves c's claim alone
    run.refresh_from_db()
    assert run.executor == "c"
    run_claim_release(claim=third)


def test_a_finished_run_cannot_be_claimed(sim_pool):
    run = new_run(sim_pool)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    assert run_claim(run_id=run.pk, executor="a", lease_seconds=None) is None


def test_a_run_that_killed_its_worker_too_often_is_failed_with_that_reason(
    sim_pool, settings, django_capture_on_commit_callbacks
):
    settings.CONDUCTOR_RUN_MAX_INTERRUPTIONS = 2
    run = new_run(sim_pool)
    # Three deliveries by workers that hold the broker's lease; the first two die holding it.
    assert run_claim(run_id=run.pk, executor="w1", lease_seconds=None) is not None
    assert run_claim(run_id=run.pk, executor="w2", lease_seconds=None) is not None
    with django_capture_on_commit_callbacks(execute=True):
        assert run_claim(run_id=run.pk, executor="w3", lease_seconds=None) is None

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("This run killed its worker 2 times")
    assert "CONDUCTOR_RUN_MAX_INTERRUPTIONS" in run.error
    assert (run.executor, run.interruptions) == ("", 2)
    finished = RunEvent.objects.get(run=run, type=wire.RUN_FINISHED).data
    assert (finished["status"], finished["error"]) == ("failed", run.error)


class TakeOverAtCall:
    """A model client that, at the ``at``-th call of the run, lets another worker take the run
    over (as a redelivery would after this worker stalled past its lease), then answers."""

    def __init__(self, inner, state: dict) -> None:
        self.inner, self.model, self.state = inner, inner.model, state

    async def complete(self, messages, *, timeout):
        self.state["calls"] += 1
        if self.state["calls"] == self.state["at"]:
            claim = await sync_to_async(run_claim)(
                run_id=self.state["run_id"], executor="other worker", lease_seconds=None
            )
            self.state["taken_at_seq"] = await sync_to_async(
                lambda: Run.objects.get(pk=self.state["run_id"]).last_seq
            )()
            assert claim is not None and claim.fence == 2
        return await self.inner.complete(messages, timeout=timeout)


def test_an_execution_taken_over_mid_call_records_nothing_more(
    sim_pool, monkeypatch, django_capture_on_commit_callbacks
):
    run = new_run(sim_pool, strategy="reflection", strategy_options={"rounds": 3})
    state = {"calls": 0, "at": 3, "run_id": run.pk}
    real_make_client = providers.make_client
    monkeypatch.setattr(
        providers,
        "make_client",
        lambda model, **kwargs: TakeOverAtCall(real_make_client(model, **kwargs), state),
    )
    with django_capture_on_commit_callbacks(execute=True):
        run_execute(run_id=run.pk)  # taken over while step 2 is with its model; stops quietly

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.last_seq == state["taken_at_seq"]
    steps = {s.index: s for s in Step.objects.filter(run=run)}
    assert steps[2].status == Step.Status.RUNNING  # its answer was not stored
    assert [steps[i].status for i in (0, 1)] == [Step.Status.SUCCEEDED] * 2
    assert run.model_calls == 2

    # The worker that took it over resumes it: steps 0 and 1 are not sent again.
    with django_capture_on_commit_callbacks(execute=True):
        run_execute(run_id=run.pk, executor="other worker", exclusive=True)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert state["calls"] == 3 + 2
    assert run.model_calls == 4 and run.fence == 3
    stored = selectors.run_events_after(run_id=run.pk, seq=0)
    assert [e["seq"] for e in stored] == list(range(1, run.last_seq + 1))
    assert sum(e["type"] == wire.STEP_FINISHED for e in stored) == 4


def test_a_starting_server_resumes_runs_no_live_execution_holds(sim_pool):
    now = timezone.now()
    lease = timedelta(seconds=60)

    def run_with(**fields) -> int:
        run = new_run(sim_pool)
        Run.objects.filter(pk=run.pk).update(**fields)
        return run.pk

    lapsed = run_with(status=Run.Status.RUNNING, executor="dead", lease_expires_at=now)
    let_go = run_with(status=Run.Status.PLANNING)
    never_started = run_with(created_at=now - 2 * lease)
    run_with(status=Run.Status.RUNNING, executor="alive", lease_expires_at=now + lease)
    run_with(status=Run.Status.RUNNING, executor="celery worker")  # its broker lease guards it
    run_with()  # queued a moment ago: its server is about to start it
    run_with(status=Run.Status.SUCCEEDED, lease_expires_at=now - lease)

    found = run_ids_unheld(now=now + timedelta(milliseconds=1), queued_for=lease)
    assert found == [never_started, lapsed, let_go]  # oldest first
