"""Recording a run: what RunRecorder stores and publishes for each engine callback, and how the
RecordingObserver sends those events from the event loop, in order, only after each commit."""

from __future__ import annotations

import pytest

from orchestrator.engine.types import (
    PlanAttempt,
    PlanRecord,
    RunResult,
    StepRecord,
    StepSpec,
    Totals,
    Workflow,
)
from orchestrator.models import Run, RunEvent, Step
from orchestrator.services.recorder import RunCancelled, RunRecorder, RunTakenOver
from orchestrator.services.recording import RecordingObserver
from tests.factories import make_run

WORKFLOW = Workflow((StepSpec(0, "solve it", ()), StepSpec(1, "check step 0", (0,))))


@pytest.fixture
def run(sim_pool) -> Run:
    return make_run(pool=sim_pool)


@pytest.fixture
def worker_ids(sim_pool) -> list[int]:
    return list(sim_pool.workers.order_by("position").values_list("pk", flat=True))


def step_records(workflow: Workflow = WORKFLOW) -> list[StepRecord]:
    return [
        StepRecord(
            round=0,
            index=index,
            spec=spec,
            worker_name=f"w{spec.worker}",
            model=f"sim/w{spec.worker}",
            reads=workflow.reads(index),
        )
        for index, spec in enumerate(workflow.steps)
    ]


def plan_record() -> PlanRecord:
    attempt = PlanAttempt(raw="three lists", tokens_in=100, tokens_out=20, cost=0.01)
    return PlanRecord(round=0, strategy="conductor", attempts=[attempt], workflow=WORKFLOW)


def finished(record: StepRecord, response: str, **usage) -> StepRecord:
    record.status = "succeeded"
    record.response = response
    record.messages = [{"role": "user", "content": record.spec.instruction}]
    record.tokens_in, record.tokens_out = usage.get("tokens_in", 10), usage.get("tokens_out", 5)
    record.cost, record.attempts = usage.get("cost", 0.001), 1
    return record


def succeeded(
    records: list[StepRecord], *, tokens_in: int, tokens_out: int, cost: float
) -> RunResult:
    """The result of a run whose steps are ``records``, answered "50" in three model calls."""
    totals = Totals(
        tokens_in=tokens_in, tokens_out=tokens_out, cost=cost, model_calls=3, wall_time=0.5
    )
    return RunResult(
        status="succeeded",
        answer="50",
        error="",
        plans=[plan_record()],
        steps=records,
        totals=totals,
    )


def stored_events(run: Run) -> list[tuple[int, str]]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type"))


@pytest.fixture
def delivered() -> list[dict]:
    """The events every recorder of a test delivered, in the order of their commits."""
    return []


@pytest.fixture
def recorder_for(run, worker_ids, delivered):
    def make(**kwargs) -> RunRecorder:
        return RunRecorder(run_id=run.pk, worker_ids=worker_ids, deliver=delivered.append, **kwargs)

    return make


@pytest.fixture
def planned(recorder_for, django_capture_on_commit_callbacks):
    """A recorder whose run has its plan and two pending steps stored, and their records."""
    recorder, records = recorder_for(), step_records()
    with django_capture_on_commit_callbacks(execute=True):
        recorder.plan_created(plan_record(), records)
    return recorder, records


def test_a_whole_run_is_stored_and_announced_in_seq_order(
    run, worker_ids, delivered, recorder_for, django_capture_on_commit_callbacks
):
    recorder, records = recorder_for(), step_records()
    with django_capture_on_commit_callbacks(execute=True):
        recorder.planning(0)
        recorder.plan_created(plan_record(), records)
        recorder.step_started(records[0])
        recorder.step_result(finished(records[0], "80 - 30 = 50"))
        recorder.step_started(records[1])
        recorder.step_result(finished(records[1], "ANSWER: 50"))
        recorder.run_finished(succeeded(records, tokens_in=120, tokens_out=30, cost=0.012), 1.0)

    created, ran = ["step.created"] * 2, ["step.started", "step.finished"] * 2
    types = ["run.status", "plan.created", *created, "run.status", *ran, "run.finished"]
    assert stored_events(run) == list(enumerate(types, start=1))
    assert [(event["seq"], event["type"]) for event in delivered] == stored_events(run)
    assert [e["status"] for e in delivered if e["type"] == "run.status"] == ["planning", "running"]

    run.refresh_from_db()
    assert (run.status, run.answer, run.score, run.last_seq) == ("succeeded", "50", 1.0, 10)
    assert (run.tokens_in, run.tokens_out, run.model_calls, run.step_count) == (120, 30, 3, 2)
    steps = list(Step.objects.filter(run=run).order_by("index"))
    assert [(s.status, s.response) for s in steps] == [
        ("succeeded", "80 - 30 = 50"),
        ("succeeded", "ANSWER: 50"),
    ]
    assert [s.worker_id for s in steps] == worker_ids[:2]
    assert steps[1].reads == [steps[0].pk]  # the access list, resolved to step ids
    assert delivered[-1]["totals"]["step_count"] == 2


def test_a_stored_result_is_never_overwritten_nor_counted_twice(
    run, delivered, recorder_for, planned, django_capture_on_commit_callbacks
):
    recorder, records = planned
    with django_capture_on_commit_callbacks(execute=True):
        recorder.step_result(finished(records[0], "first", tokens_in=10))
        # A second execution (a redelivered task) reports the same step again.
        again = recorder_for(status="running")
        again.step_started(records[0])
        again.step_result(finished(step_records()[0], "second", tokens_in=999))

    step = Step.objects.get(run=run, index=0)
    assert (step.status, step.response, step.tokens_in) == ("succeeded", "first", 10)
    run.refresh_from_db()
    assert run.tokens_in == 100 + 10  # the plan's calls and the first result only
    assert [e["type"] for e in delivered].count("step.finished") == 1
    assert "step.started" not in [e["type"] for e in delivered]


def test_a_plan_stored_once_is_not_stored_again_on_resume(
    run, delivered, recorder_for, planned, django_capture_on_commit_callbacks
):
    resumed = recorder_for(steps=Step.objects.filter(run=run), plan_rounds=[0])
    with django_capture_on_commit_callbacks(execute=True):
        resumed.plan_created(plan_record(), step_records())

    assert run.plans.count() == 1 and run.steps.count() == 2
    assert [e["type"] for e in delivered] == ["plan.created", "step.created", "step.created"]


def test_callbacks_of_a_cancelled_run_are_refused_and_rolled_back(
    run, delivered, planned, django_capture_on_commit_callbacks
):
    recorder, records = planned
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    seqs_before = stored_events(run)

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RunCancelled):
        recorder.step_result(finished(records[0], "too late"))

    assert Step.objects.get(run=run, index=0).status == "pending"
    assert stored_events(run) == seqs_before
    assert len(delivered) == len(seqs_before)


def test_an_execution_that_was_taken_over_records_nothing(
    run, delivered, recorder_for, django_capture_on_commit_callbacks
):
    Run.objects.filter(pk=run.pk).update(fence=2)
    stale = recorder_for(fence=1)

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RunTakenOver):
        stale.plan_created(plan_record(), step_records())

    assert not run.steps.exists() and not run.plans.exists()
    assert delivered == [] and stored_events(run) == []


def test_run_finished_closes_the_steps_still_open(
    run, delivered, planned, django_capture_on_commit_callbacks
):
    recorder, records = planned
    with django_capture_on_commit_callbacks(execute=True):
        recorder.step_started(records[0])
        result = RunResult(
            status="failed",
            answer="",
            error="budget exceeded",
            plans=[],
            steps=records,
            totals=Totals(),
        )
        recorder.run_finished(result, None)

    steps = dict(Step.objects.filter(run=run).values_list("index", "pk"))
    statuses = dict(Step.objects.filter(run=run).values_list("index", "status"))
    assert statuses == {0: "cancelled", 1: "skipped"}
    last = delivered[-1]
    assert last["type"] == "run.finished" and last["status"] == "failed"
    assert last["error"] == "budget exceeded"
    closed = {status: value["ids"] for status, value in last["closed_steps"].items()}
    assert closed == {"cancelled": [steps[0]], "skipped": [steps[1]]}


async def observer_for(sim_pool, **kwargs) -> tuple[Run, RecordingObserver]:
    """A new run of the pool and its observer (``kwargs`` its options), made from the loop."""
    from asgiref.sync import sync_to_async

    run = await sync_to_async(make_run)(pool=sim_pool)
    worker_ids = await sync_to_async(
        lambda: list(sim_pool.workers.order_by("position").values_list("pk", flat=True))
    )()
    return run, RecordingObserver(run_id=run.pk, worker_ids=worker_ids, **kwargs)


async def until_sent(sent_events: list, count: int) -> None:
    """Wait (2 s at most) until ``count`` events have reached the channel layer."""
    import asyncio

    for _ in range(200):
        if len(sent_events) >= count:
            return
        await asyncio.sleep(0.01)


@pytest.mark.django_db(transaction=True)
async def test_the_observer_sends_events_while_the_run_goes_on_without_waiting_for_its_end(
    sim_pool, sent_events, async_db_connections_closed
):
    _, observer = await observer_for(sim_pool)
    records = step_records()

    await observer.planning(0)
    await observer.plan_created(plan_record(), records)
    await observer.step_started(records[0])
    # The run is waiting for its first step's model: nobody flushes.
    await until_sent(sent_events, 6)

    assert [e["type"] for e in sent_events] == [
        "run.status", "plan.created", "step.created", "step.created", "run.status", "step.started",
    ]  # fmt: skip
    await observer.step_finished(finished(records[0], "50"))
    await until_sent(sent_events, 7)
    assert [e["seq"] for e in sent_events] == list(range(1, 8))
    await observer.flush()


@pytest.mark.django_db(transaction=True)
async def test_the_observer_sends_each_callbacks_events_after_its_commit_in_order(
    sim_pool, sent_events, async_db_connections_closed
):
    run, observer = await observer_for(sim_pool)
    records = step_records()

    await observer.planning(0)
    await observer.flush()  # the sender beside the execution sends what committed, in order
    assert [e["type"] for e in sent_events] == ["run.status"]
    await observer.plan_created(plan_record(), records)
    await observer.step_started(records[0])
    await observer.step_finished(finished(records[0], "50"))
    await observer.step_started(records[1])
    failed = records[1]
    failed.status, failed.error, failed.attempts = "failed", "timed out", 2
    await observer.step_failed(failed)
    await observer.flush()

    assert [e["seq"] for e in sent_events] == list(range(1, 10))
    assert [e["type"] for e in sent_events][-2:] == ["step.started", "step.failed"]
    assert sent_events[-1]["step"]["error"] == "timed out"
    from asgiref.sync import sync_to_async

    stored = await sync_to_async(stored_events)(run)
    assert [(e["seq"], e["type"]) for e in sent_events] == stored


def test_callbacks_stored_together_keep_those_before_the_one_that_raises(
    run, delivered, recorder_for, django_capture_on_commit_callbacks, monkeypatch
):
    """Stored together they are refused as a whole (a cancel lands before step 1's start),
    then stored one by one: those before the refused one are kept, as when each came alone,
    and what the recorder keeps is what the database holds.
    SQLite: the cancel lands inside the transaction of the callbacks stored together.
    (PostgreSQL's round trip, where it lands before them all:
    tests/production/test_stored_path_postgres.py.)"""
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's way of storing callbacks together")
    recorder, records = recorder_for(status=run.status), step_records()
    store_start = RunRecorder.step_started

    def cancelled_first(recorder, record):
        # A person cancels right before step 1's start is stored (each time: with the others,
        # undone with them; then alone, committed before the start is refused).
        if record.index == 1:
            Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
        return store_start(recorder, record)

    monkeypatch.setattr(RunRecorder, "step_started", cancelled_first)

    with django_capture_on_commit_callbacks(execute=True):
        recorder.record([("planning", (0,)), ("plan_created", (plan_record(), records))])
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RunCancelled):
        recorder.record(
            [
                ("step_started", (records[0],)),
                ("step_result", (finished(records[0], "50", tokens_in=10),)),
                ("step_started", (records[1],)),
                ("step_result", (finished(records[1], "ANSWER: 50"),)),  # after: not stored
            ]
        )

    types = ["run.status", "plan.created", "step.created", "step.created", "run.status"]
    types += ["step.started", "step.finished"]
    assert stored_events(run) == list(enumerate(types, start=1))
    assert [(event["seq"], event["type"]) for event in delivered] == stored_events(run)
    run.refresh_from_db()
    assert (run.status, run.last_seq, run.tokens_in) == ("cancelled", 7, 100 + 10)
    steps = Step.objects.filter(run=run).order_by("index").values_list("status", "response")
    assert list(steps) == [("succeeded", "50"), ("pending", "")]
    assert recorder.totals["tokens_in"] == run.tokens_in
    assert [recorder.steps[(0, i)].status for i in (0, 1)] == ["succeeded", "pending"]


def test_callbacks_stored_together_by_a_recorder_that_never_read_the_status_keep_it(
    run, worker_ids, delivered, recorder_for, django_capture_on_commit_callbacks
):
    """An execution resumed mid-run whose first callbacks move no status (two results) stores
    them together without knowing the run's status: the status stays what it was."""
    records = step_records()
    first = recorder_for(status=run.status)
    with django_capture_on_commit_callbacks(execute=True):
        first.record([("planning", (0,)), ("plan_created", (plan_record(), records))])
        first.record([("step_started", (records[0],)), ("step_started", (records[1],))])
    resumed = recorder_for(steps=Step.objects.filter(run=run))
    with django_capture_on_commit_callbacks(execute=True):
        resumed.record(
            [
                ("step_result", (finished(records[0], "50", tokens_in=7),)),
                ("step_result", (finished(records[1], "ANSWER: 50", tokens_in=9),)),
            ]
        )

    run.refresh_from_db()
    assert (run.status, run.last_seq, run.tokens_in) == ("running", 9, 100 + 7 + 9)
    assert resumed.totals["tokens_in"] == run.tokens_in
    assert stored_events(run)[-2:] == [(8, "step.finished"), (9, "step.finished")]


def test_a_comment_between_callbacks_stored_together_keeps_its_seq(
    run, sim_pool, delivered, recorder_for, django_capture_on_commit_callbacks
):
    """A teammate comments on the run while it executes: the recorder's next callbacks, stored
    together, find the run's row not as they left it, are refused and go one by one, after the
    comment's event."""
    from orchestrator.models import Membership
    from orchestrator.services import review
    from tests.factories import make_member

    reviewer = make_member(project=sim_pool.project, role=Membership.Role.REVIEWER)
    recorder, records = recorder_for(status=run.status), step_records()
    with django_capture_on_commit_callbacks(execute=True):
        recorder.record([("planning", (0,)), ("plan_created", (plan_record(), records))])
        recorder.record([("step_started", (records[0],))])
        review.comment_create(actor=reviewer, run=run, body="Looks slow.")
        recorder.record(
            [
                ("step_result", (finished(records[0], "50", tokens_in=7),)),
                ("step_started", (records[1],)),
            ]
        )

    types = ["run.status", "plan.created", "step.created", "step.created", "run.status"]
    types += ["step.started", "comment.created", "step.finished", "step.started"]
    assert stored_events(run) == list(enumerate(types, start=1))
    run.refresh_from_db()
    assert (run.last_seq, run.tokens_in, recorder.last_seq) == (9, 100 + 7, 9)
    assert recorder.totals["tokens_in"] == run.tokens_in


def _as_read(run: Run) -> dict:
    """What a person reading a run sees of it, without what differs between two runs (ids,
    times): its row, its steps and its events."""
    run.refresh_from_db()
    row = {field: getattr(run, field) for field in ("status", "answer", "score", "last_seq")}
    row |= {"error": run.error, "wall_time": run.wall_time, "ended": run.finished_at is not None}
    row |= {field: getattr(run, field) for field in ("tokens_in", "tokens_out", "cost")}
    row |= {"model_calls": run.model_calls, "step_count": run.step_count}
    row["started"] = run.started_at is not None
    steps = list(Step.objects.filter(run=run).order_by("index").values_list("status", "response"))
    shown = []
    for event in RunEvent.objects.filter(run=run).order_by("seq"):
        data = event.data
        shown.append(
            (
                event.seq,
                event.type,
                data.get("status"),
                data.get("totals"),
                (data.get("step") or {}).get("status"),
                (data.get("plan") or {}).get("round"),
            )
        )
    return {"row": row, "steps": steps, "events": shown}


def test_callbacks_stored_together_store_what_one_by_one_stores(
    sim_pool, worker_ids, django_capture_on_commit_callbacks
):
    """A whole run's callbacks, as write-behind takes them (a step's start ends each batch),
    stored together on one run and one by one on another: both read the same. (SQLite holds
    the run's row from a batch's first write to it and writes it once; PostgreSQL sends the
    batch in one round trip.)"""
    together_run, alone_run = make_run(pool=sim_pool), make_run(pool=sim_pool)
    sent: dict[int, list[dict]] = {together_run.pk: [], alone_run.pk: []}

    def callbacks() -> list[list[tuple[str, tuple]]]:
        records = step_records()
        result = succeeded(records, tokens_in=150, tokens_out=40, cost=0.0123)
        return [
            [("planning", (0,)), ("plan_created", (plan_record(), records))],
            [("step_started", (records[0],))],
            [("step_result", (finished(records[0], "50", tokens_in=7, cost=0.0031),))],
            [("step_started", (records[1],))],
            [("step_result", (finished(records[1], "ANSWER: 50", cost=0.0007),))],
            [("planning", (1,)), ("run_finished", (result, 1.0))],
        ]

    recorders = {
        run.pk: RunRecorder(
            run_id=run.pk, worker_ids=worker_ids, status=run.status, deliver=sent[run.pk].append
        )
        for run in (together_run, alone_run)
    }
    together = callbacks()
    batches = [together[0] + together[1], together[2] + together[3], together[4] + together[5]]
    with django_capture_on_commit_callbacks(execute=True):
        for batch in batches:
            recorders[together_run.pk].record(batch)
        for batch in callbacks():
            for call in batch:
                recorders[alone_run.pk].record([call])

    read = _as_read(together_run)
    assert read == _as_read(alone_run)
    assert read["row"]["status"] == "succeeded" and read["row"]["last_seq"] == 11
    assert read["steps"] == [("succeeded", "50"), ("succeeded", "ANSWER: 50")]
    assert [event[1] for event in read["events"]][-3:] == [
        "step.finished",
        "run.status",
        "run.finished",
    ]
    assert [(e["seq"], e["type"]) for e in sent[together_run.pk]] == [
        (seq, type) for seq, type, *_ in read["events"]
    ]
    # What the recorder keeps is what the database holds.
    recorder = recorders[together_run.pk]
    assert (recorder.status, recorder.totals["cost"]) == ("succeeded", read["row"]["cost"])


@pytest.mark.django_db(transaction=True)
async def test_with_write_behind_callbacks_taken_together_are_stored_together_in_order(
    sim_pool, sent_events, async_db_connections_closed, monkeypatch
):
    from asgiref.sync import sync_to_async

    run, observer = await observer_for(sim_pool, write_behind=True)
    hops: list[list[str]] = []
    record = observer.recorder.record

    def counting(calls):
        hops.append([name for name, _ in calls])
        return record(calls)

    monkeypatch.setattr(observer, "_record", sync_to_async(counting))
    records = step_records()

    # Neither waits for the database; the engine changes its records after each callback, and
    # what is stored is what they were when it was taken.
    await observer.planning(0)
    await observer.plan_created(plan_record(), records)
    records[1].status = "running"
    assert observer.taken == 2 and hops == [] and sent_events == []
    # A step's start is stored (with what came before it) before its model is called.
    await observer.step_started(records[0])
    assert hops == [["planning", "plan_created", "step_started"]]
    await observer.step_finished(finished(records[0], "50"))
    records[0].response = "changed afterwards"
    await observer.written()
    await observer.flush()

    assert hops[1:] == [["step_result"]]
    types = ["run.status", "plan.created", "step.created", "step.created", "run.status"]
    types += ["step.started", "step.finished"]
    stored = await sync_to_async(stored_events)(run)
    assert stored == list(enumerate(types, start=1))
    assert [(e["seq"], e["type"]) for e in sent_events] == stored
    steps = Step.objects.filter(run=run).order_by("index").values_list("status", "response")
    assert [step async for step in steps] == [("succeeded", "50"), ("pending", "")]


@pytest.mark.django_db(transaction=True)
async def test_with_write_behind_a_refused_callback_is_raised_by_the_next_and_stops_the_owner(
    sim_pool, sent_events, async_db_connections_closed
):
    import asyncio

    from asgiref.sync import sync_to_async

    run, observer = await observer_for(sim_pool, write_behind=True)
    stopped: list[bool] = []
    observer.stop = lambda: stopped.append(True)
    await observer.planning(0)
    await observer.written()
    await sync_to_async(Run.objects.filter(pk=run.pk).update)(status=Run.Status.CANCELLED)

    await observer.plan_created(plan_record(), step_records())  # taken; refused when stored
    await asyncio.wait_for(observer.flush(), 5)

    assert stopped == [True]
    with pytest.raises(RunCancelled):
        await observer.step_started(step_records()[0])
    with pytest.raises(RunCancelled):
        await observer.written()
    assert await sync_to_async(stored_events)(run) == [(1, "run.status")]
    assert not await Step.objects.filter(run=run).aexists()


def executing_recorder(
    run: Run, worker_ids: list[int], delivered: list[dict], **known
) -> RunRecorder:
    """A recorder as an execution builds it: it knows the run's totals (``wall_time`` is NULL
    until the run ends), status and last seq (unless ``known`` says otherwise), so callbacks
    stored together hold the run's row."""
    from orchestrator import wire

    known = {
        "status": run.status,
        "totals": {field: getattr(run, field) for field in wire.TOTAL_FIELDS},
        "last_seq": run.last_seq,
    } | known
    return RunRecorder(run_id=run.pk, worker_ids=worker_ids, deliver=delivered.append, **known)


def planned_and_started(records: list[StepRecord]) -> list[tuple[str, tuple]]:
    """The callbacks of a run's start: planning, its plan with ``records``, step 0 started."""
    return [
        ("planning", (0,)),
        ("plan_created", (plan_record(), records)),
        ("step_started", (records[0],)),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_result_stored_twice_in_one_batch_is_kept_once(run, worker_ids, delivered):
    """A step created, started and given two results in one batch: the second result is refused,
    as when they come one by one (the first is kept and counted once), whether the database
    holds the run's row for the batch or not."""
    recorder, records = executing_recorder(run, worker_ids, delivered), step_records()
    first = finished(records[0], "first", tokens_in=10)
    recorder.record(
        [
            *planned_and_started(records),
            ("step_result", (first,)),
            ("step_result", (finished(step_records()[0], "second", tokens_in=999),)),
        ]
    )

    step = Step.objects.get(run=run, index=0)
    assert (step.status, step.response, step.tokens_in) == ("succeeded", "first", 10)
    run.refresh_from_db()
    assert run.tokens_in == 100 + 10
    assert [e["type"] for e in delivered].count("step.finished") == 1
    assert [(e["seq"], e["type"]) for e in delivered] == stored_events(run)
    assert (recorder.last_seq, recorder.totals["tokens_in"]) == (run.last_seq, run.tokens_in)


@pytest.mark.django_db(transaction=True)
def test_a_runs_end_in_a_batch_closes_a_step_open_unknown_to_the_recorder(
    run, worker_ids, delivered
):
    """Step 1 is open again in the database (as when another execution holds it), which the
    recorder does not know: the run's end, stored with the batch's other callbacks, finds it,
    and the general way ends the run and closes the step."""
    recorder, records = executing_recorder(run, worker_ids, delivered), step_records()
    recorder.record([("planning", (0,)), ("plan_created", (plan_record(), records))])
    recorder.record([("step_started", (records[0],))])
    recorder.record([("step_result", (finished(records[0], "50"),))])
    recorder.record([("step_started", (records[1],))])
    Step.objects.filter(run=run, index=0).update(status=Step.Status.RUNNING)
    result = succeeded(records, tokens_in=130, tokens_out=30, cost=0.012)
    recorder.record(
        [("step_result", (finished(records[1], "ANSWER: 50"),)), ("run_finished", (result, 1.0))]
    )

    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "50")
    steps = list(Step.objects.filter(run=run).order_by("index").values_list("status", flat=True))
    assert steps == ["cancelled", "succeeded"]
    last = delivered[-1]
    assert last["type"] == "run.finished"
    assert {s: value["ids"] for s, value in last["closed_steps"].items()} == {
        "cancelled": [Step.objects.get(run=run, index=0).pk]
    }
    assert [(e["seq"], e["type"]) for e in delivered] == stored_events(run)
