"""On PostgreSQL a run's callbacks are stored in one statement each (``sql.advance_seq_storing``,
ids taken ahead by ``sql.allocate_ids``, rows read by ``sql.fetch_bound``), several taken
together in one round trip (``sql.advance_seq_storing_together``), in one statement when the
recorder holds the run's row (``sql.storing_held_statement``); the run's end falls back to the
general way when a step is still open; an execution claims and loads its run in one statement.
SQLite stores them the general way (tests/orchestrator/services/test_run_recording.py): these
tests read what each path stored."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator import sql
from orchestrator.engine.types import PlanAttempt, PlanRecord, RunResult, Totals
from orchestrator.models import Plan, Run, RunEvent, Step
from orchestrator.services import recorder as recorder_module
from orchestrator.services.recorder import RunRecorder
from tests.factories import make_run
from tests.orchestrator.services.test_run_recording import (
    WORKFLOW,
    executing_recorder,
    finished,
    plan_record,
    planned_and_started,
    step_records,
    stored_events,
)
from tests.orchestrator.services.test_run_recording import (
    test_a_result_stored_twice_in_one_batch_is_kept_once as result_stored_twice,
)
from tests.orchestrator.services.test_run_recording import (
    test_a_runs_end_in_a_batch_closes_a_step_open_unknown_to_the_recorder as step_open_unknown,
)
from tests.orchestrator.test_sql import (
    test_new_rows_parameters_are_what_the_orm_sends as new_rows_parameters,
)

pytestmark = pytest.mark.production


@pytest.fixture
def run(sim_pool) -> Run:
    return make_run(pool=sim_pool)


@pytest.fixture
def statements(monkeypatch) -> list[str]:
    """The PostgreSQL-only functions the recorder called, in order."""
    called: list[str] = []
    for name in ("allocate_ids", "advance_seq_storing"):
        original = getattr(recorder_module, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            called.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(recorder_module, name, spy)
    fetch_bound = sql.fetch_bound

    def fetch_spy(*args, **kwargs):
        called.append("fetch_bound")
        return fetch_bound(*args, **kwargs)

    monkeypatch.setattr(sql, "fetch_bound", fetch_spy)
    return called


@pytest.fixture
def recorder(run, sim_pool, delivered) -> RunRecorder:
    assert sql.can_store_in_one_statement()  # PostgreSQL: else these tests test nothing
    worker_ids = list(sim_pool.workers.order_by("position").values_list("pk", flat=True))
    return RunRecorder(
        run_id=run.pk, worker_ids=worker_ids, status="queued", deliver=delivered.append
    )


@pytest.fixture
def delivered() -> list[dict]:
    return []


def a_later_plan() -> PlanRecord:
    """A plan the engine made and never announced (round 1): stored with the run's end."""
    attempt = PlanAttempt(raw="accept", tokens_in=7, tokens_out=3, cost=0.002)
    return PlanRecord(round=1, strategy="conductor", attempts=[attempt], workflow=WORKFLOW)


def succeeded(records) -> RunResult:
    """The run's result: both steps done, a second round's plan accepting the answer."""
    return RunResult(
        status="succeeded",
        answer="50",
        error="",
        plans=[plan_record(), a_later_plan()],
        steps=records,
        totals=Totals(tokens_in=120, tokens_out=30, cost=0.012, model_calls=3, wall_time=0.5),
    )


def test_a_whole_run_stored_in_one_statement_per_callback_reads_as_the_general_way(
    run, recorder, delivered, statements, django_capture_on_commit_callbacks
):
    records = step_records()
    with django_capture_on_commit_callbacks(execute=True):
        recorder.planning(0)
        recorder.plan_created(plan_record(), records)
        recorder.step_started(records[0])
        recorder.step_result(finished(records[0], "80 - 30 = 50"))
        recorder.step_started(records[1])
        recorder.step_result(finished(records[1], "ANSWER: 50"))
        result = succeeded(records)
        recorder.run_finished(result, 1.0)

    assert "allocate_ids" in statements and "fetch_bound" in statements
    assert statements.count("advance_seq_storing") == 7  # every callback, the end included
    created, ran = ["step.created"] * 2, ["step.started", "step.finished"] * 2
    types = ["run.status", "plan.created", *created, "run.status", *ran]
    types += ["plan.created", "run.finished"]
    assert stored_events(run) == list(enumerate(types, start=1))
    assert [(event["seq"], event["type"]) for event in delivered] == stored_events(run)
    stored = RunEvent.objects.get(run=run, seq=11).data
    assert stored == delivered[-1] and stored["totals"]["step_count"] == 2

    run.refresh_from_db()
    assert (run.status, run.answer, run.score, run.last_seq) == ("succeeded", "50", 1.0, 11)
    assert (run.tokens_in, run.tokens_out, run.model_calls, run.step_count) == (120, 30, 3, 2)
    assert run.started_at is not None and run.finished_at is not None
    plans = list(Plan.objects.filter(run=run).order_by("round"))
    assert [plan.round for plan in plans] == [0, 1]
    assert delivered[-2]["plan"]["id"] == plans[1].pk
    steps = list(Step.objects.filter(run=run).order_by("index"))
    assert [(s.status, s.response) for s in steps] == [
        ("succeeded", "80 - 30 = 50"),
        ("succeeded", "ANSWER: 50"),
    ]
    assert steps[1].reads == [steps[0].pk]


def test_the_runs_end_falls_back_to_the_general_way_when_a_step_is_still_open(
    run, recorder, delivered, statements, monkeypatch, django_capture_on_commit_callbacks
):
    records = step_records()
    with django_capture_on_commit_callbacks(execute=True):
        recorder.plan_created(plan_record(), records)
        recorder.step_started(records[0])
        recorder.step_result(finished(records[0], "80 - 30 = 50"))
        recorder.step_started(records[1])
        recorder.step_result(finished(records[1], "ANSWER: 50"))
    # Step 1 open again in the database, unknown to this recorder (as when another execution
    # holds it): the one statement checks the steps, writes nothing, and the general way ends
    # the run and closes the step.
    Step.objects.filter(run=run, index=1).update(status=Step.Status.RUNNING)
    seq_before = Run.objects.get(pk=run.pk).last_seq
    refused: list[Exception] = []
    one_statement = RunRecorder._store_finish_in_one_statement

    def watched(self, *args, **kwargs):
        try:
            return one_statement(self, *args, **kwargs)
        except sql.NotStoredInOneStatement as error:
            refused.append(error)
            raise

    monkeypatch.setattr(RunRecorder, "_store_finish_in_one_statement", watched)
    with django_capture_on_commit_callbacks(execute=True):
        result = succeeded(records)
        recorder.run_finished(result, 1.0)

    assert len(refused) == 1
    assert stored_events(run)[-2:] == [
        (seq_before + 1, "plan.created"),
        (seq_before + 2, "run.finished"),
    ]
    seqs = [event["seq"] for event in delivered]
    assert seqs == list(range(1, seq_before + 3))
    assert [(event["seq"], event["type"]) for event in delivered] == stored_events(run)
    step = Step.objects.get(run=run, index=1)
    assert step.status == Step.Status.CANCELLED
    last = delivered[-1]
    assert last["status"] == "succeeded" and last["totals"]["tokens_in"] == 120
    assert {status: value["ids"] for status, value in last["closed_steps"].items()} == {
        "cancelled": [step.pk]
    }
    run.refresh_from_db()
    assert (run.status, run.last_seq, run.tokens_in) == ("succeeded", seq_before + 2, 120)
    assert list(Plan.objects.filter(run=run).order_by("round").values_list("round", flat=True)) == [
        0,
        1,
    ]


@pytest.fixture
def durable(monkeypatch) -> list[bool]:
    """Whether each round trip of ``advance_seq_storing_together`` waited for the disk."""
    return []


@pytest.fixture
def together(monkeypatch, durable) -> list[int]:
    """How many statements each round trip of ``advance_seq_storing_together`` carried."""
    sizes: list[int] = []
    original = recorder_module.advance_seq_storing_together

    def spy(statements, *, durable=True, _durable=durable):
        sizes.append(len(statements))
        _durable.append(durable)
        return original(statements, durable=durable)

    monkeypatch.setattr(recorder_module, "advance_seq_storing_together", spy)
    return sizes


@pytest.fixture
def executing(run, sim_pool, delivered) -> RunRecorder:
    """A recorder as an execution builds it, but that does not know the run's last seq: its
    first batch goes one statement a callback."""
    return executing_recorder(run, _worker_ids(sim_pool), delivered, last_seq=None)


@pytest.mark.django_db(transaction=True)
def test_callbacks_taken_together_are_stored_in_one_round_trip(
    run, executing, delivered, statements, together
):
    recorder, records = executing, step_records()
    recorder.record(planned_and_started(records))
    recorder.record(
        [
            ("step_result", (finished(records[0], "80 - 30 = 50"),)),
            ("step_started", (records[1],)),
            ("step_result", (finished(records[1], "ANSWER: 50"),)),
            ("run_finished", (succeeded(records), 1.0)),
        ]
    )

    # The first three go in three statements (this recorder did not know the run's last seq);
    # then it does, and holds the run's row: the next two are one statement, step 1's result
    # goes alone (a statement writes a row once: step 1 was started in it), then the run's end.
    assert together == [3, 1, 1] and statements.count("advance_seq_storing") == 1
    _read_as_the_whole_run(run, delivered)


def _read_as_the_whole_run(run: Run, delivered: list[dict]) -> None:
    """The run of ``step_records`` (step 0's answer read by step 1) stored whole: its events in
    order, each delivered once, its row and its steps."""
    created, ran = ["step.created"] * 2, ["step.started", "step.finished"] * 2
    types = ["run.status", "plan.created", *created, "run.status", *ran]
    types += ["plan.created", "run.finished"]
    assert stored_events(run) == list(enumerate(types, start=1))
    assert [(event["seq"], event["type"]) for event in delivered] == stored_events(run)
    run.refresh_from_db()
    assert (run.status, run.last_seq, run.tokens_in, run.step_count) == ("succeeded", 11, 120, 2)
    assert (run.answer, run.score, run.finished_at is not None) == ("50", 1.0, True)
    steps = list(Step.objects.filter(run=run).order_by("index"))
    assert [(s.status, s.response) for s in steps] == [
        ("succeeded", "80 - 30 = 50"),
        ("succeeded", "ANSWER: 50"),
    ]
    assert all(s.started_at is not None for s in steps)
    assert steps[1].reads == [steps[0].pk]


def _kept_by(recorder: RunRecorder, run: Run) -> None:
    """What the recorder keeps is what the database holds."""
    run.refresh_from_db()
    assert recorder.status == run.status
    assert recorder.totals == {field: getattr(run, field) for field in recorder.totals}
    for step in Step.objects.filter(run=run):
        kept = recorder.steps[(step.round, step.index)]
        assert (kept.pk, kept.status, kept.response) == (step.pk, step.status, step.response)


@pytest.mark.django_db(transaction=True)
def test_a_step_that_has_its_result_refuses_all_taken_together_then_they_go_one_by_one(
    run, executing, delivered, statements, together
):
    recorder, records = executing, step_records()
    recorder.record([("planning", (0,)), ("plan_created", (plan_record(), records))])
    # Another execution stored step 0's result (this recorder does not know it; its totals
    # are the row's, so only the result itself is refused).
    other = RunRecorder(
        run_id=run.pk, worker_ids=recorder.worker_ids, steps=Step.objects.filter(run=run),
        status="planning",
    )  # fmt: skip
    other.step_result(finished(step_records()[0], "first", tokens_in=10))
    run.refresh_from_db()
    # The run's row as the other execution left it, known here: only the step's row refuses.
    recorder.totals = {field: getattr(run, field) for field in recorder.totals}
    recorder.last_seq = run.last_seq
    recorder.record(
        [
            ("step_started", (records[1],)),
            ("step_result", (finished(records[0], "second", tokens_in=999),)),  # refused
        ]
    )
    recorder.record([("step_result", (finished(records[1], "ANSWER: 50"),))])

    assert together == [2, 1]
    # The second round trip (one statement: the recorder held the run's row) refused: its two
    # callbacks then went one by one (after the one statement of the other execution's result),
    # then step 1's result alone.
    assert statements.count("advance_seq_storing") == 1 + 2 + 1
    step_0, step_1 = Step.objects.filter(run=run).order_by("index")
    assert (step_0.response, step_0.tokens_in) == ("first", 10)  # kept, counted once
    assert (step_1.status, step_1.response) == ("succeeded", "ANSWER: 50")
    run.refresh_from_db()
    assert run.tokens_in == 100 + 10 + 10  # the plan's, step 0's first result, step 1's
    assert [seq for seq, _ in stored_events(run)] == list(range(1, run.last_seq + 1))
    # This recorder announced step 1's result only (the other execution, step 0's).
    assert [e["step"]["index"] for e in delivered if e["type"] == "step.finished"] == [1]
    recorder.steps[(0, 0)].refresh_from_db()  # the other execution's result, unknown here
    _kept_by(recorder, run)


@pytest.mark.django_db(transaction=True)
def test_a_callback_that_fails_while_taken_stores_those_before_it_and_raises(
    run, executing, delivered, together
):
    recorder, records = executing, step_records()
    recorder.record([("planning", (0,)), ("plan_created", (plan_record(), records))])
    Step.objects.filter(run=run, index=1).delete()  # gone, unknown to the recorder
    recorder.steps.pop((0, 1))

    with pytest.raises(Step.DoesNotExist):
        recorder.record(
            [
                ("step_started", (records[0],)),
                ("step_result", (finished(records[0], "50", tokens_in=10),)),
                ("step_started", (records[1],)),  # its row is read, and is not there
                ("step_result", (finished(records[1], "never"),)),
            ]
        )

    # The first in one statement; the second alone (a statement writes a row once); the third
    # failed while taken, the fourth never came.
    assert together == [2, 1]
    step_0 = Step.objects.get(run=run, index=0)
    assert (step_0.status, step_0.response) == ("succeeded", "50")
    types = [t for _, t in stored_events(run)]
    assert types[-2:] == ["step.started", "step.finished"]
    assert [(e["seq"], e["type"]) for e in delivered] == stored_events(run)
    _kept_by(recorder, run)


@pytest.mark.django_db(transaction=True)
def test_statements_sent_together_keep_nothing_when_one_fails_before_it_is_sent(run):
    from django.db import connection
    from django.utils import timezone

    def adding(tokens, *extra):
        return sql.storing_statement(
            run.pk,
            assignments=["tokens_in = tokens_in + %s", *extra],
            assignment_params=[tokens],
            created_at=sql.db_datetime(timezone.now()),
        )

    first = adding(5)
    unsendable = (adding(7)[0], [*adding(7)[1][:-1], object()])  # cannot be sent
    with pytest.raises(Exception, match="adapt|object"):
        sql.advance_seq_storing_together([first, unsendable])

    run.refresh_from_db()
    assert run.tokens_in == 0 and run.last_seq == 0  # the first, queued before, not kept
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert sql.advance_seq_storing_together([first])[0][0] == 0  # the connection goes on
    run.refresh_from_db()
    assert run.tokens_in == 5


@pytest.mark.parametrize("prepared", [True, False])
def test_the_hot_paths_statements_are_prepared_unless_behind_a_transaction_pooler(
    prepared, settings, db
):
    """Prepared once per connection (the server then neither parses nor plans them again), and
    never with CONDUCTOR_DB_TRANSACTION_POOLER (PgBouncer's transaction mode may hand the next
    statement to another server connection, where it was never prepared)."""
    import uuid

    settings.CONDUCTOR_DB_PREPARED_STATEMENTS = prepared
    marker = f"checked_{uuid.uuid4().hex}"
    text = f"SELECT %s::int AS {marker}"  # a statement never sent before

    def preparations() -> int:
        rows = sql.fetch_bound(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", [f"%{marker}%"]
        )
        return rows[0][0]

    assert sql.fetch_bound(text, [4]) == [(4,)]
    assert sql.fetch_bound(text, [5]) == [(5,)]
    assert preparations() == (1 if prepared else 0)


@pytest.mark.django_db(transaction=True)
def test_an_execution_stores_each_batch_in_one_statement_its_progress_without_waiting(
    run, sim_pool, delivered, statements, together, durable, settings
):
    """A recorder as an execution builds it knows the run's last seq: each batch of callbacks
    is one statement (the run's row written once, steps created and started in it inserted
    started), committed, with CONDUCTOR_DB_ASYNC_PROGRESS, without waiting for the disk until
    the one that ends the run."""
    settings.CONDUCTOR_DB_ASYNC_PROGRESS = True
    worker_ids = _worker_ids(sim_pool)
    recorder, records = executing_recorder(run, worker_ids, delivered), step_records()
    recorder.record(planned_and_started(records))
    recorder.record(
        [
            ("step_result", (finished(records[0], "80 - 30 = 50"),)),
            ("step_started", (records[1],)),
        ]
    )
    recorder.record(
        [
            ("step_result", (finished(records[1], "ANSWER: 50"),)),
            ("run_finished", (succeeded(records), 1.0)),
        ]
    )

    # One round trip a batch; ids for the plan's rows taken first (none were taken ahead); the
    # run's end, which waits for the disk, is its own transaction (no BEGIN, no COMMIT).
    assert together == [1, 1, 1]
    assert statements == ["allocate_ids", "fetch_bound", "fetch_bound"]
    assert durable == [False, False, True]
    _read_as_the_whole_run(run, delivered)  # step 0 inserted started: its start time is kept
    _kept_by(recorder, run)

    settings.CONDUCTOR_DB_ASYNC_PROGRESS = False  # the default: every commit waits
    durable.clear()
    again = make_run(pool=sim_pool)
    RunRecorder(
        run_id=again.pk, worker_ids=worker_ids, status=again.status, last_seq=again.last_seq
    ).record([("planning", (0,)), ("plan_created", (plan_record(), step_records()))])
    assert durable == [True]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("durable", [True, False])
def test_a_transaction_sent_together_waits_for_the_disk_only_if_durable(run, durable):
    from django.db import connection

    setting = "SELECT CASE current_setting('synchronous_commit') WHEN 'off' THEN 0 ELSE 1 END"
    for count in (1, 2):
        assert (
            sql.fetch_together([(setting, [])] * count, durable=durable)
            == [[(int(durable),)]] * count
        )
    # For that transaction only: the connection's next one waits again.
    assert sql.fetch_together([(setting, [])]) == [[(1,)]]
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"


@pytest.mark.django_db(transaction=True)
def test_a_statement_alone_that_reads_not_durable_select_turns_off_synchronous_commit(run):
    """For its own transaction only (whose commit then does not wait for the disk): the
    connection's next one has it on again, and inside a caller's atomic block the caller's
    transaction is left as it is."""
    from django.db import connection, transaction

    def setting_in_statement() -> str:
        return sql.fetch_bound(
            f"WITH not_durable AS MATERIALIZED ({sql.not_durable_select()}) "
            "SELECT current_setting('synchronous_commit') FROM not_durable",
            [],
        )[0][0]

    assert setting_in_statement() == "off"
    assert sql.fetch_bound("SELECT current_setting('synchronous_commit')", []) == [("on",)]
    with transaction.atomic():
        assert setting_in_statement() == "on"
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"
    connection.set_autocommit(False)
    try:
        assert setting_in_statement() == "on"
    finally:
        connection.rollback()
        connection.set_autocommit(True)


@pytest.mark.django_db(transaction=True)
def test_an_execution_claims_and_loads_its_run_in_one_round_trip(
    run, sim_pool, monkeypatch, settings
):
    """On PostgreSQL the claim, the run with its pool and enabled workers, and ids for the
    rows it will store come in one statement; what it loads is what the two statements of
    the general way load, and the claim holds as ``run_claim``'s does."""
    from orchestrator.models import Worker
    from orchestrator.services import runs

    sim_pool.workers.filter(position=1).update(enabled=False)
    sent: list[str] = []
    fetch_bound = runs.fetch_bound

    def spy(sql_text, params):
        sent.append(sql_text)
        return fetch_bound(sql_text, params)

    monkeypatch.setattr(runs, "fetch_bound", spy)
    monkeypatch.setattr(runs, "hot_cursor", None)  # the general way's: never used here

    execution = runs._load_execution(run_id=run.pk, executor="one", exclusive=False)

    # One statement, a transaction by itself, whose commit need not wait for the disk (a claim
    # lost with the database server's crash ends with it: the execution's next write finds the
    # fence moved).
    assert len(sent) == 1 and f"({sql.not_durable_select()})" in sent[0]
    assert "CROSS JOIN not_durable" in sent[0]  # read, so evaluated
    run.refresh_from_db()
    assert (execution.claim.fence, run.fence, run.executor) == (1, 1, "one")
    # What the general way loads once claimed, field by field (converted as the ORM converts).
    monkeypatch.undo()
    loaded = runs._run_pool_and_workers(run.pk)

    def fields(row) -> dict:
        return {field.attname: getattr(row, field.attname) for field in row._meta.concrete_fields}

    assert fields(execution.run) == fields(loaded[0]) == fields(run)
    assert fields(execution.pool) == fields(loaded[1])
    assert [fields(w) for w in execution.workers] == [fields(w) for w in loaded[2]]
    enabled = Worker.objects.filter(pool=sim_pool, enabled=True).order_by("position", "id")
    assert [w.pk for w in execution.workers] == [w.pk for w in enabled] and len(enabled) > 1
    plan_ids, step_ids = execution.ids_ahead
    assert (len(plan_ids), len(step_ids)) == (2, runs.STEP_IDS_AHEAD)
    assert not Plan.objects.filter(pk__in=plan_ids) and not Step.objects.filter(pk__in=step_ids)
    # Leased: nobody else takes it meanwhile.
    assert runs._load_execution(run_id=run.pk, executor="two", exclusive=False) is None
    runs.run_claim_release(claim=execution.claim)

    # Claimed over and over by executions that died holding it: failed at the limit.
    settings.CONDUCTOR_RUN_MAX_INTERRUPTIONS = 2
    assert runs._load_execution(run_id=run.pk, executor="w1", exclusive=True) is not None
    assert runs._load_execution(run_id=run.pk, executor="w2", exclusive=True) is not None
    assert runs._load_execution(run_id=run.pk, executor="w3", exclusive=True) is None
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("This run killed its worker 2 times")


@pytest.mark.django_db(transaction=True)
def test_events_stored_while_nobody_watches_the_run_are_not_for_the_channel_layer(
    run, sim_pool, delivered
):
    """Callbacks stored before anything subscribed to the run (``run_watch``), together or
    alone, hand their events to ``deliver_unwatched``; from the mark on, to ``deliver``: none
    lost, none twice, in seq order."""
    from orchestrator.services.runs import run_watch

    local_only: list[dict] = []
    recorder = executing_recorder(
        run, _worker_ids(sim_pool), delivered, deliver_unwatched=local_only.append
    )
    records = step_records()
    recorder.record(planned_and_started(records))  # together
    recorder.record([("step_result", (finished(records[0], "80 - 30 = 50"),))])  # alone
    unwatched = len(local_only)
    assert unwatched >= 4 and delivered == []

    run_watch(run_id=run.pk)
    recorder.record([("step_started", (records[1],))])  # alone
    alone = len(delivered)
    recorder.record([("step_result", (finished(records[1], "ANSWER: 50"),)), ("planning", (1,))])

    assert len(local_only) == unwatched and 0 < alone < len(delivered)
    assert [(e["seq"], e["type"]) for e in local_only + delivered] == stored_events(run)
    run.refresh_from_db()
    assert run.watched


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_an_execution_sends_a_runs_events_to_the_channel_layer_only_once_watched(sim_pool):
    """On the production stack: a subscriber of the run's group that has not marked it watched
    hears nothing of its execution; one that has (as sockets and streamed completions do)
    hears every event after what it read, in order."""
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    from orchestrator import events
    from orchestrator.services.runs import run_execute_async, run_watch

    layer = get_channel_layer()

    async def heard(channel: str) -> list[dict]:
        received: list[dict] = []
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=0.3)
            except TimeoutError:
                return received
            received += message["events"] if "events" in message else [message["event"]]

    try:
        for watch in (False, True):
            run = await sync_to_async(make_run)(pool=sim_pool, input="What is 80 - 30?")
            channel = await layer.new_channel()
            await layer.group_add(events.group_name(run.pk), channel)
            if watch:
                await sync_to_async(run_watch)(run_id=run.pk)
            await run_execute_async(run_id=run.pk)
            await run.arefresh_from_db()
            assert run.status == Run.Status.SUCCEEDED, run.error
            received = await heard(channel)
            if watch:
                assert [event["seq"] for event in received] == list(range(1, run.last_seq + 1))
                assert received[-1]["type"] == "run.finished"
            else:
                assert received == [] and run.last_seq > 1
    finally:
        await layer.close_pools()


def _worker_ids(pool) -> list[int]:
    return list(pool.workers.order_by("position").values_list("pk", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_result_stored_twice_in_one_batch_is_kept_once_on_postgresql(run, sim_pool, delivered):
    """A step created, started and given two results in one batch: on PostgreSQL its row is
    inserted by the batch's statement, where no condition can refuse the second result."""
    result_stored_twice(run, _worker_ids(sim_pool), delivered)


@pytest.mark.django_db(transaction=True)
def test_a_runs_end_in_a_batch_checks_the_steps_open_on_postgresql(run, sim_pool, delivered):
    """The run's end in a batch's one statement: the steps the batch writes are not seen open."""
    step_open_unknown(run, _worker_ids(sim_pool), delivered)


def test_new_rows_parameters_are_what_the_orm_sends_on_postgresql(sim_pool, monkeypatch):
    """On PostgreSQL the ORM wraps integers in psycopg's types and JSON in Jsonb."""
    new_rows_parameters(sim_pool, monkeypatch)
