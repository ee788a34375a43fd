"""run_execute on the simulator: what is stored, the events published, failures and resume."""

from __future__ import annotations

import time

import pytest

from orchestrator.engine.grading import extract_answer
from orchestrator.engine.types import ModelError
from orchestrator.models import Plan, Run, RunEvent, Step
from orchestrator.records import MAX_ATTEMPT_ERROR_CHARS
from orchestrator.services.runs import run_create, run_execute
from tests.orchestrator.services.conftest import SimulatedKill

QUESTION = (
    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?"
)


def new_run(pool, **kwargs) -> Run:
    return run_create(pool=pool, input=QUESTION, enqueue=False, **kwargs)


def stored_events(run: Run) -> list[dict]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("data", flat=True))


def test_conductor_run_stores_every_step_with_messages_and_response(sim_pool, execute):
    run = execute(new_run(sim_pool, reference="50"))

    assert run.status == Run.Status.SUCCEEDED, run.error
    steps = list(Step.objects.filter(run=run).order_by("round", "index"))
    assert steps, "the conductor wrote no step"
    for step in steps:
        assert step.status == Step.Status.SUCCEEDED
        assert step.messages and step.messages[-1]["role"] == "user"
        assert step.response
        assert step.tokens_in > 0 and step.tokens_out > 0
        assert step.attempts == 1
        assert step.started_at and step.finished_at and step.started_at <= step.finished_at
        assert step.worker is not None and step.worker.name == step.worker_name
    assert QUESTION in steps[0].messages[-1]["content"] or any(
        QUESTION in message["content"] for message in steps[0].messages
    )
    # The final answer is the last step's response, graded against the reference.
    assert run.answer == steps[-1].response
    assert run.score == (1.0 if extract_answer(run.answer, kind="numeric").strip() == "50" else 0.0)
    assert run.finished_at and run.started_at and run.wall_time is not None


def test_totals_count_the_conductor_and_every_step(sim_pool, execute):
    run = execute(new_run(sim_pool))

    plans = list(Plan.objects.filter(run=run))
    steps = list(Step.objects.filter(run=run))
    attempts = [attempt for plan in plans for attempt in plan.attempts]
    assert attempts, "the simulated conductor's calls are recorded"
    assert run.tokens_in == sum(s.tokens_in for s in steps) + sum(a["tokens_in"] for a in attempts)
    assert run.tokens_out == sum(s.tokens_out for s in steps) + sum(
        a["tokens_out"] for a in attempts
    )
    assert run.model_calls == len(steps) + len(attempts)
    assert run.cost == pytest.approx(sum(s.cost for s in steps) + sum(a["cost"] for a in attempts))
    assert run.step_count == len(steps)


def test_reads_are_resolved_to_step_ids(sim_pool, execute):
    run = execute(new_run(sim_pool, strategy="moa"))

    steps = list(Step.objects.filter(run=run).order_by("index"))
    *proposers, aggregator = steps
    assert aggregator.access == "all"
    assert aggregator.reads == [step.pk for step in proposers]
    assert all(step.reads == [] and step.access == [] for step in proposers)
    # The aggregator was sent every proposal.
    sent = "\n".join(message["content"] for message in aggregator.messages)
    assert all(step.response in sent for step in proposers)


@pytest.mark.django_db(transaction=True)
def test_events_tell_the_whole_run_in_order_without_gaps(sim_pool, sent_events):
    # Real commits: events are sent as each callback's transaction commits.
    run = new_run(sim_pool, strategy="reflection", strategy_options={"rounds": 2})
    run_execute(run_id=run.pk)
    run.refresh_from_db()

    events = stored_events(run)
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert run.last_seq == len(events)
    assert sent_events == events  # every stored event was sent, once, after its commit
    types = [event["type"] for event in events]
    assert types == [
        "run.status",  # queued
        "run.status",  # planning
        "plan.created",
        "step.created",
        "step.created",
        "step.created",
        "run.status",  # running
        "step.started",
        "step.finished",
        "step.started",
        "step.finished",
        "step.started",
        "step.finished",
        "run.finished",  # a fixed strategy plans one round: no second "planning"
    ]
    statuses = [e["status"] for e in events if e["type"] == "run.status"]
    assert statuses == ["queued", "planning", "running"]
    step_ids = {step.pk for step in Step.objects.filter(run=run)}
    for step_id in step_ids:
        lifecycle = [e["type"] for e in events if e.get("step", {}).get("id") == step_id]
        assert lifecycle == ["step.created", "step.started", "step.finished"]
    finished = events[-1]
    assert finished["status"] == "succeeded"
    assert finished["answer"] == run.answer
    assert finished["totals"]["tokens_in"] == run.tokens_in
    last_step_event = [e for e in events if e["type"] == "step.finished"][-1]
    assert last_step_event["totals"]["model_calls"] == 3


def test_a_step_whose_model_fails_fails_the_run_cleanly(sim_pool, execute, call_log, monkeypatch):
    async def refuse(messages, *, timeout):
        raise ModelError("provider said 400", retryable=False)

    from tests.orchestrator.services.conftest import CountingClient

    monkeypatch.setattr(
        CountingClient,
        "complete",
        lambda self, messages, *, timeout: refuse(messages, timeout=timeout),
    )
    run = execute(new_run(sim_pool, strategy="single"))

    assert run.status == Run.Status.FAILED
    assert "provider said 400" in run.error
    step = Step.objects.get(run=run)
    assert step.status == Step.Status.FAILED
    assert step.error == "provider said 400" and step.attempts == 1
    types = [event["type"] for event in stored_events(run)]
    assert types[-2:] == ["step.failed", "run.finished"]


def test_a_step_that_failed_twice_then_succeeded_stores_its_three_attempts(
    sim_pool, execute, call_log, monkeypatch
):
    from tests.orchestrator.services.conftest import CountingClient

    real_complete = CountingClient.complete
    errors = ["provider said 429: slow down", "provider said 503: " + "overloaded " * 100]

    async def flaky(self, messages, *, timeout):
        if errors:
            self.log.calls.append((self.model, "refused"))
            raise ModelError(errors.pop(0), retryable=True)
        return await real_complete(self, messages, timeout=timeout)

    monkeypatch.setattr(CountingClient, "complete", flaky)
    run = execute(new_run(sim_pool, strategy="single"))

    assert run.status == Run.Status.SUCCEEDED, run.error
    step = Step.objects.get(run=run)
    assert step.attempts == 3 and run.model_calls == 3
    log = step.attempt_log
    assert [a["attempt"] for a in log] == [1, 2, 3]
    assert log[0]["error"] == "provider said 429: slow down"
    assert log[1]["error"].startswith("provider said 503: overloaded")
    assert len(log[1]["error"]) == MAX_ATTEMPT_ERROR_CHARS  # cut, like other errors
    assert log[2]["error"] == ""
    assert [a["backoff"] for a in log] == [0.5, 1.0, 0.0]  # the pool's default backoff, doubled
    assert log[1]["offset"] >= log[0]["offset"] + log[0]["backoff"]
    assert log[2]["offset"] >= log[1]["offset"] + log[1]["backoff"]
    # Pages hear of it with the step's result.
    finished = [e for e in stored_events(run) if e["type"] == "step.finished"][-1]
    assert finished["step"]["attempt_log"] == log


def test_a_step_that_succeeds_at_once_stores_no_attempt_log(sim_pool, execute):
    run = execute(new_run(sim_pool, strategy="single"))

    assert Step.objects.get(run=run).attempt_log == []


def test_a_bug_marks_the_run_failed_and_propagates(sim_pool, execute, monkeypatch):
    from orchestrator import providers

    def broken_make_client(model, **kwargs):
        raise KeyError("no such setting")

    monkeypatch.setattr(providers, "make_client", broken_make_client)
    run = new_run(sim_pool, strategy="single")
    with pytest.raises(KeyError):
        execute(run)

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error == "KeyError: 'no such setting'"
    assert stored_events(run)[-1]["type"] == "run.finished"


def test_a_finished_run_is_not_executed_again(sim_pool, execute, call_log):
    run = execute(new_run(sim_pool, strategy="single"))
    calls, events = len(call_log.calls), run.last_seq

    run = execute(run)

    assert len(call_log.calls) == calls == 1
    assert run.last_seq == events


def test_a_killed_execution_resumes_without_calling_finished_steps_again(
    sim_pool, execute, call_log, settings
):
    settings.CONDUCTOR_RUN_LEASE_SECONDS = 0.3
    run = new_run(sim_pool, strategy="reflection", strategy_options={"rounds": 3})
    call_log.kill_at_call = 3  # dies while sending the third step
    with pytest.raises(SimulatedKill):
        execute(run)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    done = {s.index: s for s in Step.objects.filter(run=run, status=Step.Status.SUCCEEDED)}
    assert sorted(done) == [0, 1]
    first_calls = list(call_log.calls)

    call_log.kill_at_call = None
    # The dead execution's claim holds until its lease lapses: nothing executes it before.
    assert execute(run).last_seq == run.last_seq and call_log.calls == first_calls
    time.sleep(0.35)
    run = execute(run)
    assert (run.fence, run.interruptions) == (2, 1)

    assert run.status == Run.Status.SUCCEEDED, run.error
    resumed_calls = call_log.calls[len(first_calls) :]
    assert len(resumed_calls) == 2  # steps 2 and 3 only: 0 and 1 were not sent again
    steps = {s.index: s for s in Step.objects.filter(run=run)}
    for index, before in done.items():
        assert steps[index].response == before.response
        assert steps[index].finished_at == before.finished_at
    # Step 2 read the stored response of step 1.
    assert any(done[1].response in m["content"] for m in steps[2].messages)
    assert all(step.status == Step.Status.SUCCEEDED for step in steps.values())
    assert run.model_calls == 4
    events = stored_events(run)
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert sum(event["type"] == "step.finished" for event in events) == 4


@pytest.mark.django_db(transaction=True)
def test_events_reach_the_layer_in_seq_order_even_when_sending_is_slow(sim_pool, monkeypatch):
    import asyncio
    import random

    from orchestrator import events as events_module

    received: list[int] = []
    jitter = random.Random(3)

    async def slow_send(batch: list[dict], **options) -> None:
        await asyncio.sleep(jitter.random() / 200)  # a remote layer, answering unevenly
        received.extend(event["seq"] for event in batch)

    monkeypatch.setattr(events_module, "send_many_async", slow_send)
    run = new_run(sim_pool, strategy="moa")  # four proposers run concurrently
    run_execute(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == Run.Status.SUCCEEDED
    assert received == list(range(2, run.last_seq + 1))  # seq 1 (queued) went before execution


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_skips_the_steps_it_never_started_and_has_no_answer(
    sim_pool, call_log, sent_events, monkeypatch
):
    from tests.orchestrator.services.conftest import CountingClient

    real_complete = CountingClient.complete

    async def second_call_refused(self, messages, *, timeout):
        if len(self.log.calls) == 1:  # the second call: step 1
            self.log.calls.append((self.model, "refused"))
            raise ModelError("provider said 400", retryable=False)
        return await real_complete(self, messages, timeout=timeout)

    monkeypatch.setattr(CountingClient, "complete", second_call_refused)
    run = new_run(sim_pool, strategy="reflection", strategy_options={"rounds": 2})
    run_execute(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == Run.Status.FAILED and run.answer == ""
    assert run.error == "step 0.1 (" + Step.objects.get(run=run, index=1).worker_name + (
        ") failed: provider said 400"
    )
    steps = list(Step.objects.filter(run=run).order_by("index"))
    assert [step.status for step in steps] == ["succeeded", "failed", "skipped"]
    assert steps[2].error == f"Not run: the run failed: {run.error}"
    assert steps[2].finished_at == run.finished_at
    events = stored_events(run)
    assert sent_events == events
    assert [event["type"] for event in events][-2:] == ["step.failed", "run.finished"]
    finished = events[-1]
    assert finished["answer"] == "" and finished["error"] == run.error
    assert finished["closed_steps"] == {"skipped": {"ids": [steps[2].pk], "error": steps[2].error}}


def test_a_run_stopped_by_a_bug_closes_its_running_and_pending_steps(sim_pool):
    from orchestrator.services.ending import run_fail
    from tests.factories import make_step

    run = new_run(sim_pool, strategy="moa")
    running = make_step(run=run, index=0, status=Step.Status.RUNNING)
    pending = make_step(run=run, index=1)
    done = make_step(run=run, index=2, status=Step.Status.SUCCEEDED, response="4")

    run_fail(run_id=run.pk, error="KeyError: 'x'")

    running.refresh_from_db(), pending.refresh_from_db(), done.refresh_from_db()
    assert running.status == "cancelled"
    assert running.error == "Stopped while running: the run failed: KeyError: 'x'"
    assert pending.status == "skipped" and pending.error == "Not run: the run failed: KeyError: 'x'"
    assert done.status == "succeeded" and done.error == ""
    finished = stored_events(run)[-1]
    assert finished["type"] == "run.finished"
    assert finished["closed_steps"]["cancelled"]["ids"] == [running.pk]
    assert finished["closed_steps"]["skipped"]["ids"] == [pending.pk]


class _Stoppable:
    """What ``_execute_recorded`` needs of a recorder: ``stop`` and what stopped it."""

    stop = None
    stopped_by: BaseException | None = None


def _engine_stopped_by(error: BaseException, *, then=None):
    """An ``execute_run`` that, while it waits, has storing fail with ``error`` (the recorder
    keeps it and calls ``stop``); ``then`` turns the cancel that follows into something else."""
    import asyncio

    async def execute_run(*, recorder: _Stoppable) -> None:
        loop = asyncio.get_running_loop()

        def storing_failed() -> None:
            recorder.stopped_by = error
            recorder.stop()

        loop.call_soon(storing_failed)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if then is not None:
                raise then from None
            raise

    return execute_run


async def _execute_stoppable(monkeypatch, engine) -> tuple[BaseException | None, int]:
    """Run ``_execute_recorded`` over ``engine`` in a task; what it raised, and the cancel
    requests its task still had afterwards."""
    import asyncio

    from orchestrator.services import runs

    recorder = _Stoppable()
    monkeypatch.setattr(runs, "execute_run", lambda **_: engine(recorder=recorder))

    async def owner() -> tuple[BaseException | None, int]:
        task = asyncio.current_task()
        try:
            await runs._execute_recorded(recorder)
        except BaseException as error:  # noqa: BLE001 (what it raised is the result)
            return error, task.cancelling()
        return None, task.cancelling()

    return await asyncio.create_task(owner())


async def test_storing_that_fails_stops_the_engine_with_its_own_error(monkeypatch):
    from orchestrator.services.recorder import RunTakenOver

    taken_over = RunTakenOver("run 1 was taken over by another execution")
    raised, cancelling = await _execute_stoppable(monkeypatch, _engine_stopped_by(taken_over))

    assert raised is taken_over and cancelling == 0


async def test_a_stop_that_something_else_overtook_leaves_no_cancel_behind(monkeypatch):
    from orchestrator.services.recorder import RunCancelled

    overtaking = ConnectionError("the channel layer is away")
    engine = _engine_stopped_by(RunCancelled("run 1 was cancelled"), then=overtaking)
    raised, cancelling = await _execute_stoppable(monkeypatch, engine)

    assert raised is overtaking
    assert cancelling == 0  # what the task awaits next is not cancelled by a stale request


async def test_a_cancel_from_elsewhere_stays_a_cancel_when_storing_fails_too(monkeypatch):
    import asyncio

    from orchestrator.services.recorder import RunCancelled

    stopped = _engine_stopped_by(RunCancelled("run 1 was cancelled"))

    async def cancelled_from_elsewhere_too(*, recorder: _Stoppable) -> None:
        asyncio.current_task().cancel()  # as run_stop_inline does
        await stopped(recorder=recorder)

    raised, _ = await _execute_stoppable(monkeypatch, cancelled_from_elsewhere_too)

    assert isinstance(raised, asyncio.CancelledError)
