"""A cancel that lands while a step's result is being stored, on PostgreSQL's row locks.

The recorder locks a step row and then the run row; whatever finishes a run must take them in
the same order, or a cancel and a step result wait on each other until PostgreSQL kills one of
them as a deadlock (a 500 for the user, or a crashed execution).
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from orchestrator.engine.types import PlanRecord, StepRecord, StepSpec, Workflow
from orchestrator.models import Run, RunEvent, Step
from orchestrator.services import recorder as recorder_module
from orchestrator.services import runs as runs_module
from orchestrator.services.recorder import RunCancelled, RunRecorder
from orchestrator.services.runs import run_cancel, run_create

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


def _started_run(sim_pool):
    """A run with two stored steps, the first started and its result ready to store."""
    run = run_create(pool=sim_pool, input="What is 6 times 7?", strategy="single", enqueue=False)
    worker = sim_pool.workers.order_by("position", "id").first()
    specs = (StepSpec(0, "Work it out."), StepSpec(0, "Check it.", (0,)))
    records = [
        StepRecord(round=0, index=i, spec=spec, worker_name=worker.name, model=worker.model,
                   reads=tuple(spec.access))
        for i, spec in enumerate(specs)
    ]  # fmt: skip
    recorder = RunRecorder(run_id=run.pk, worker_ids=[worker.pk], status=run.status)
    recorder.plan_created(PlanRecord(round=0, strategy="single", workflow=Workflow(specs)), records)
    recorder.step_started(records[0])
    records[0].status, records[0].response, records[0].attempts = "succeeded", "42", 1
    return run, recorder, records


def _in_thread(work, errors):
    def target():
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - reported by the assertions
            errors.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_a_cancel_racing_a_step_result_waits_for_it_and_comes_last(sim_pool, monkeypatch):
    # The general way (a transaction of several statements), where a pause can sit between the
    # step's row and the run's; the one-statement way takes both in one statement.
    monkeypatch.setattr(recorder_module, "can_store_in_one_statement", lambda: False)
    run, recorder, records = _started_run(sim_pool)

    step_written = threading.Event()
    go_on = threading.Event()
    advance = recorder._advance_run

    def advance_after_a_pause(**kwargs):
        step_written.set()  # the step row is updated (and locked) in this transaction
        go_on.wait(10)
        return advance(**kwargs)

    recorder._advance_run = advance_after_a_pause
    errors: list[BaseException] = []

    recording = _in_thread(lambda: recorder.step_result(records[0]), errors)
    assert step_written.wait(10)
    cancelling = _in_thread(lambda: run_cancel(run_id=run.pk), errors)
    cancelling.join(1.5)  # the cancel now waits on the step row the result holds
    go_on.set()
    recording.join(15)
    cancelling.join(15)

    assert errors == []
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    steps = dict(Step.objects.filter(run=run).values_list("index", "status"))
    assert steps == {0: "succeeded", 1: "skipped"}  # the result that came first was kept
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types[-2:] == ["step.finished", "run.finished"]


def test_a_step_result_racing_a_cancel_in_one_statement_waits_and_is_undone(sim_pool, monkeypatch):
    """The cancel has locked the open steps when the result comes: the result's one statement
    waits for them, finds the run cancelled when the cancel commits, and writes nothing; the
    step stays cancelled and run.finished stays the run's last event."""
    run, recorder, records = _started_run(sim_pool)
    steps_locked = threading.Event()
    go_on = threading.Event()
    lock = runs_module.lock_open_steps

    def lock_then_pause(**kwargs):
        open_steps = lock(**kwargs)
        steps_locked.set()
        go_on.wait(10)
        return open_steps

    monkeypatch.setattr(runs_module, "lock_open_steps", lock_then_pause)
    errors: list[BaseException] = []
    cancelling = _in_thread(lambda: run_cancel(run_id=run.pk), errors)
    assert steps_locked.wait(10)
    recording = _in_thread(lambda: recorder.step_result(records[0]), errors)
    recording.join(1.5)  # the result now waits on the step row the cancel holds
    go_on.set()
    cancelling.join(15)
    recording.join(15)

    assert [type(error) for error in errors] == [RunCancelled]
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert run.tokens_in == 0 and run.model_calls == 0  # the result's usage was not added
    steps = dict(Step.objects.filter(run=run).values_list("index", "status"))
    assert steps == {0: "cancelled", 1: "skipped"}
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types[-1] == "run.finished" and "step.finished" not in types
