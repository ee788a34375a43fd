import asyncio
import time

import pytest

from orchestrator.engine.scheduler import call_with_retries, execute_run
from orchestrator.engine.types import (
    Completion,
    ModelError,
    PlanAttempt,
    PlanRecord,
    ResumeState,
    RunSettings,
    WorkerInfo,
    Workflow,
)
from tests.orchestrator.engine.fakes import (
    FakeClient,
    RecordingObserver,
    RecordingSleep,
    ScriptedStrategy,
    make_workers,
    workflow,
)

QUESTION = "What is six times seven?"


def echo_instruction(messages):
    """Reply with the step's own instruction, so each step's response is recognisable."""
    last = messages[-1]["content"]
    tag = next(word for word in last.split() if word.startswith("task-"))
    return f"done {tag}"


def call_for(client, tag):
    matches = [call for call in client.calls if f"{tag} " in call.prompt + " "]
    assert len(matches) == 1, f"{tag} was called {len(matches)} times"
    return matches[0]


async def run(strategy, workers, **kwargs):
    return await execute_run(question=QUESTION, strategy=strategy, workers=workers, **kwargs)


async def test_a_step_starts_only_after_every_step_it_reads_has_finished():
    client = FakeClient(echo_instruction, delay=0.02)
    plan = workflow(
        (0, "task-a", []),
        (1, "task-b", [0]),
        (2, "task-c", [0]),
        (0, "task-d", [1, 2]),
        (1, "task-e", [3, 0]),
    )
    result = await run(ScriptedStrategy([plan]), make_workers(3, client=client))

    assert result.status == "succeeded"
    reads = {"task-b": ["task-a"], "task-c": ["task-a"], "task-d": ["task-b", "task-c"]}
    reads["task-e"] = ["task-d", "task-a"]
    for step, earlier in reads.items():
        for dependency in earlier:
            assert call_for(client, step).started >= call_for(client, dependency).finished
    assert "done task-b" in str(call_for(client, "task-d").messages)
    assert "done task-c" in str(call_for(client, "task-d").messages)


async def test_independent_steps_run_at_the_same_time():
    client = FakeClient(echo_instruction, delay=0.1)
    plan = workflow((0, "task-a", []), (1, "task-b", []), (2, "task-c", []), (0, "task-d", "all"))
    started = time.perf_counter()
    result = await run(ScriptedStrategy([plan]), make_workers(3, client=client))
    elapsed = time.perf_counter() - started

    independent = [call_for(client, tag) for tag in ("task-a", "task-b", "task-c")]
    assert max(call.started for call in independent) < min(call.finished for call in independent)
    assert 0.2 <= result.totals.wall_time <= elapsed


async def test_a_step_reading_all_waits_for_every_earlier_step():
    fast = FakeClient(echo_instruction, delay=0.0)
    slow = FakeClient(echo_instruction, delay=0.08)
    plan = workflow((1, "task-slow", []), (0, "task-fast", []), (0, "task-last", "all"))
    result = await run(ScriptedStrategy([plan]), make_workers(clients=[fast, slow]))

    assert result.status == "succeeded"
    assert call_for(fast, "task-last").started >= call_for(slow, "task-slow").finished
    assert [step.reads for step in result.steps] == [(), (), (0, 1)]


async def test_the_answer_is_the_last_steps_response():
    plan = workflow((0, "task-a", []), (1, "task-b", []), (2, "task-c", [0]))
    result = await run(
        ScriptedStrategy([plan]), make_workers(3, client=FakeClient(echo_instruction))
    )

    assert result.answer == "done task-c"
    assert [step.status for step in result.steps] == ["succeeded"] * 3
    assert result.totals.model_calls == 3
    assert result.totals.tokens_in == 30 and result.totals.tokens_out == 15
    assert result.totals.cost == pytest.approx(0.003)


async def test_later_rounds_see_the_previous_answer_and_the_last_round_answers():
    client = FakeClient(echo_instruction)
    strategy = ScriptedStrategy([workflow((0, "task-first", [])), workflow((1, "task-second", []))])
    result = await run(strategy, make_workers(2, client=client), settings=RunSettings(max_rounds=5))

    assert strategy.previous_answers == [None, "done task-first", "done task-second"]
    assert result.answer == "done task-second"
    assert [(step.round, step.index) for step in result.steps] == [(0, 0), (1, 0)]
    assert [plan.round for plan in result.plans] == [0, 1]


async def test_an_accepting_workflow_keeps_the_previous_answer():
    strategy = ScriptedStrategy(
        [workflow((0, "task-first", [])), Workflow(()), workflow((0, "task-x", []))]
    )
    result = await run(
        strategy,
        make_workers(1, client=FakeClient(echo_instruction)),
        settings=RunSettings(max_rounds=3),
    )

    assert result.status == "succeeded"
    assert result.answer == "done task-first"
    assert len(strategy.previous_answers) == 2  # never asked for a third round
    assert len(result.steps) == 1


async def test_accepting_in_the_first_round_fails_the_run():
    result = await run(ScriptedStrategy([Workflow(())]), make_workers(1))

    assert result.status == "failed"
    assert "no answer yet" in result.error


async def test_a_strategy_with_nothing_to_run_fails_the_run():
    result = await run(ScriptedStrategy([]), make_workers(1))

    assert result.status == "failed"
    assert result.error == "the strategy wrote no workflow to run"


async def test_rounds_stop_at_max_rounds():
    strategy = ScriptedStrategy([workflow((0, f"task-{n}", [])) for n in range(6)])
    result = await run(
        strategy,
        make_workers(1, client=FakeClient(echo_instruction)),
        settings=RunSettings(max_rounds=3),
    )

    assert len(strategy.previous_answers) == 3
    assert result.answer == "done task-2"


async def test_a_plan_without_workflow_fails_the_run_with_its_error():
    strategy = ScriptedStrategy([None], error="model_id is missing")
    observer = RecordingObserver()
    result = await run(strategy, make_workers(1), observer=observer)

    assert result.status == "failed"
    assert result.error == "model_id is missing"
    assert observer.names() == ["planning", "run_finished"]


async def test_a_workflow_naming_a_worker_outside_the_pool_fails_cleanly():
    result = await run(ScriptedStrategy([workflow((4, "task-a", []))]), make_workers(2))

    assert result.status == "failed"
    assert "worker 4" in result.error and "2 workers" in result.error


async def test_retryable_errors_are_retried_with_exponential_backoff():
    client = FakeClient(["Answer: 42"], fail_first=2)
    sleep = RecordingSleep()
    settings = RunSettings(max_attempts=3, backoff=0.5)
    result = await run(
        ScriptedStrategy([workflow((0, "task-a", []))]),
        make_workers(1, client=client),
        settings=settings,
        sleep=sleep,
    )

    assert result.status == "succeeded"
    assert result.answer == "Answer: 42"
    assert sleep.delays == [0.5, 1.0]
    step = result.steps[0]
    assert step.attempts == 3
    assert step.error == "rate limited"  # the last failure stays visible on the step
    assert result.totals.model_calls == 3


async def test_each_attempt_of_a_retried_step_is_kept_with_its_error_and_the_wait_after_it():
    client = FakeClient(
        [
            ModelError("rate limited", retryable=True, status=429),
            ModelError("overloaded", retryable=True, status=503),
            "Answer: 42",
        ],
        delay=0.01,
    )
    once = FakeClient(["Answer: 7"])
    result = await run(
        ScriptedStrategy([workflow((0, "task-a", []), (1, "task-b", [0]))]),
        make_workers(clients=[client, once]),
        settings=RunSettings(max_attempts=3, backoff=0.5),
        sleep=RecordingSleep(),
    )

    assert result.status == "succeeded"
    log = result.steps[0].attempt_log
    assert [(a.attempt, a.error, a.backoff) for a in log] == [
        (1, "rate limited", 0.5),
        (2, "overloaded", 1.0),
        (3, "", 0.0),
    ]
    assert log[0].offset == 0.0
    for earlier, later in zip(log, log[1:], strict=False):
        # Each call took the client's delay, and the next one started after it.
        assert earlier.seconds >= 0.01
        assert later.offset >= earlier.offset + earlier.seconds
    assert result.steps[1].attempt_log == []  # its first call succeeded: nothing to show


async def test_a_step_that_keeps_failing_fails_the_run_with_its_reason():
    client = FakeClient(fail_first=10)
    sleep = RecordingSleep()
    observer = RecordingObserver()
    plan = workflow((0, "task-a", []), (0, "task-b", [0]))
    result = await run(
        ScriptedStrategy([plan]),
        make_workers(1, client=client),
        observer=observer,
        settings=RunSettings(max_attempts=4, backoff=0.1),
        sleep=sleep,
    )

    assert result.status == "failed"
    assert result.error == "step 0.0 (w0) failed: rate limited"
    assert result.answer == ""
    assert sleep.delays == pytest.approx([0.1, 0.2, 0.4])
    assert client.call_count == 4
    log = result.steps[0].attempt_log
    assert [a.error for a in log] == ["rate limited"] * 4
    assert [a.backoff for a in log] == pytest.approx([0.1, 0.2, 0.4, 0.0])  # none after the last
    assert [step.status for step in result.steps] == ["failed", "skipped"]
    assert result.steps[1].error == ("Not run: the run failed: step 0.0 (w0) failed: rate limited")
    assert observer.names() == [
        "planning",
        "plan_created",
        "step_started",
        "step_failed",
        "run_finished",
    ]


async def test_a_non_retryable_error_fails_at_once_and_running_steps_still_finish():
    broken = FakeClient(error=ModelError("bad request", retryable=False, status=400), fail_first=1)
    slow = FakeClient(echo_instruction, delay=0.05)
    plan = workflow((0, "task-a", []), (1, "task-b", []), (1, "task-c", [1]))
    sleep = RecordingSleep()
    result = await run(ScriptedStrategy([plan]), make_workers(clients=[broken, slow]), sleep=sleep)

    assert result.status == "failed"
    assert result.error == "step 0.0 (w0) failed: bad request"
    assert sleep.delays == []
    assert [step.status for step in result.steps] == ["failed", "succeeded", "skipped"]
    assert result.steps[1].response == "done task-b"
    assert slow.call_count == 1  # task-c never started


async def test_a_slow_model_times_out_as_a_retryable_error():
    client = FakeClient(delay=60.0)
    started = time.perf_counter()
    result = await run(
        ScriptedStrategy([workflow((0, "task-a", []))]),
        make_workers(1, client=client),
        settings=RunSettings(step_timeout=0.05, max_attempts=2),
        sleep=RecordingSleep(),
    )

    assert time.perf_counter() - started < 30  # not one whole call: each attempt timed out
    assert result.status == "failed"
    assert result.error == "step 0.0 (w0) failed: timed out after 0.05s"
    assert result.steps[0].attempts == 2
    assert client.timeouts == [0.05, 0.05]


async def test_the_token_budget_stops_new_steps_and_names_the_amount():
    client = FakeClient(echo_instruction, tokens_in=10, tokens_out=5)  # 15 tokens a call
    plan = workflow((0, "task-a", []), (0, "task-b", [0]), (0, "task-c", [1]))
    result = await run(
        ScriptedStrategy([plan]),
        make_workers(1, client=client),
        settings=RunSettings(token_budget=20),
    )

    assert result.status == "failed"
    assert result.error == "token budget exhausted: 30 of 20 tokens used"
    assert client.call_count == 2
    assert [step.status for step in result.steps] == ["succeeded", "succeeded", "skipped"]
    assert result.steps[2].error == (
        "Not run: the run failed: token budget exhausted: 30 of 20 tokens used"
    )


async def test_the_cost_budget_stops_new_steps():
    client = FakeClient(echo_instruction, cost=0.02)
    plan = workflow((0, "task-a", []), (0, "task-b", [0]))
    result = await run(
        ScriptedStrategy([plan]),
        make_workers(1, client=client),
        settings=RunSettings(cost_budget=0.01),
    )

    assert result.status == "failed"
    assert "cost budget" in result.error and "$0.0200" in result.error
    assert client.call_count == 1


class CostlyPlanner:
    """A strategy whose (conductor) plan used many tokens."""

    name = "costly"
    max_rounds = None

    async def plan(self, *, round, question, workers, settings, previous_answer):
        if round > 0:
            return None
        attempt = PlanAttempt(raw="...", tokens_in=900, tokens_out=200, cost=0.5)
        return PlanRecord(
            round=0, strategy=self.name, attempts=[attempt], workflow=workflow((0, "task-a", []))
        )


async def test_the_conductors_usage_counts_toward_totals_and_budget():
    client = FakeClient()
    result = await run(
        CostlyPlanner(), make_workers(1, client=client), settings=RunSettings(token_budget=1000)
    )

    assert result.status == "failed"
    assert result.error == "token budget exhausted: 1100 of 1000 tokens used"
    assert client.call_count == 0
    assert result.totals.model_calls == 1
    assert result.totals.cost == pytest.approx(0.5)

    result = await run(CostlyPlanner(), make_workers(1, client=client))
    assert result.status == "succeeded"
    assert result.totals.tokens_in == 910 and result.totals.model_calls == 2


async def test_the_budget_is_checked_before_asking_the_strategy_again():
    client = FakeClient(echo_instruction, tokens_in=50, tokens_out=0)
    strategy = ScriptedStrategy([workflow((0, "task-a", [])), workflow((0, "task-b", []))])
    result = await run(
        strategy, make_workers(1, client=client), settings=RunSettings(token_budget=50)
    )

    assert result.status == "failed"
    assert "token budget" in result.error
    assert len(strategy.previous_answers) == 1


async def test_resume_does_not_call_finished_steps_again_and_gives_the_same_answer():
    plan = workflow(
        (0, "task-a", []), (1, "task-b", [0]), (0, "task-c", [0, 1]), (1, "task-d", "all")
    )
    first_client = FakeClient(echo_instruction)
    first = await run(ScriptedStrategy([plan]), make_workers(2, client=first_client))
    assert first.status == "succeeded"

    done = {step.key: step for step in first.steps[:2]}
    resume = ResumeState(plans={0: first.plans[0]}, steps=done)
    client = FakeClient(echo_instruction)
    observer = RecordingObserver()
    strategy = ScriptedStrategy([plan])
    second = await run(strategy, make_workers(2, client=client), observer=observer, resume=resume)

    assert second.status == "succeeded"
    assert second.answer == first.answer == "done task-d"
    assert sorted(echo_instruction(call.messages) for call in client.calls) == [
        "done task-c",
        "done task-d",
    ]
    assert "done task-b" in str(
        call_for(client, "task-c").messages
    )  # resumed responses feed later steps
    assert observer.names() == [
        "step_started",
        "step_finished",
        "step_started",
        "step_finished",
        "planning",
        "run_finished",
    ]
    assert strategy.previous_answers == [first.answer]  # only asked about round 1
    assert second.totals.tokens_in == first.totals.tokens_in
    assert second.totals.model_calls == first.totals.model_calls


async def test_resume_runs_again_a_step_that_had_failed():
    plan = workflow((0, "task-a", []), (0, "task-b", [0]))
    first = await run(
        ScriptedStrategy([plan]),
        make_workers(
            1,
            client=FakeClient(
                echo_instruction, fail_first=1, error=ModelError("boom", retryable=False)
            ),
        ),
    )
    assert first.status == "failed"

    client = FakeClient(echo_instruction)
    resume = ResumeState(plans={0: first.plans[0]}, steps={step.key: step for step in first.steps})
    second = await run(ScriptedStrategy([]), make_workers(1, client=client), resume=resume)

    assert second.status == "succeeded"
    assert client.call_count == 2


async def test_a_bug_propagates_and_cancels_the_other_steps():
    cancelled = asyncio.Event()

    class Slow:
        model = "fake/slow"

        async def complete(self, messages, *, timeout):
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return Completion("never")

    buggy = FakeClient(lambda messages: 1 / 0, delay=0.01)
    observer = RecordingObserver()
    workers = make_workers(clients=[buggy, buggy])
    workers[1] = WorkerInfo(name="slow", model="fake/slow", description="", client=Slow())
    with pytest.raises(ZeroDivisionError):
        await run(
            ScriptedStrategy([workflow((1, "task-a", []), (0, "task-b", []))]),
            workers,
            observer=observer,
        )

    assert cancelled.is_set()
    assert "run_finished" not in observer.names()
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_cancelling_the_run_cancels_its_steps():
    client = FakeClient(delay=5.0)
    task = asyncio.create_task(
        run(
            ScriptedStrategy([workflow((0, "task-a", []), (0, "task-b", []))]),
            make_workers(1, client=client),
        )
    )
    await asyncio.sleep(0.05)
    assert client.call_count == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_observer_callbacks_come_in_order_and_run_finished_once():
    observer = RecordingObserver()
    strategy = ScriptedStrategy(
        [workflow((0, "task-a", []), (0, "task-b", [0])), workflow((0, "task-c", []))]
    )
    result = await run(
        strategy,
        make_workers(1, client=FakeClient(echo_instruction)),
        observer=observer,
        settings=RunSettings(max_rounds=2),
    )

    assert observer.events == [
        ("planning", 0),
        ("plan_created", 0),
        ("step_started", "0.0"),
        ("step_finished", "0.0"),
        ("step_started", "0.1"),
        ("step_finished", "0.1"),
        ("planning", 1),
        ("plan_created", 1),
        ("step_started", "1.0"),
        ("step_finished", "1.0"),
        ("run_finished", "succeeded"),
    ]
    assert observer.results == [result]
    assert [step.status for step in observer.plan_steps[0]] == ["succeeded", "succeeded"]
    assert observer.plan_steps[0][1].reads == (0,)


async def test_each_step_records_what_was_sent_and_what_came_back():
    client = FakeClient(
        [Completion("Answer: 7", tokens_in=12, tokens_out=3, cost=0.25, latency=1.5)]
    )
    workers = make_workers(1, client=client)
    result = await run(ScriptedStrategy([workflow((0, "task-a", []))]), workers)

    step = result.steps[0]
    assert step.messages == client.calls[0].messages
    assert QUESTION in str(step.messages) and "task-a" in step.messages[-1]["content"]
    assert (step.response, step.tokens_in, step.tokens_out, step.cost, step.latency) == (
        "Answer: 7",
        12,
        3,
        0.25,
        1.5,
    )
    assert (step.worker_name, step.model, step.attempts, step.error) == ("w0", "fake/model", 1, "")


async def test_a_wide_workflow_of_thousands_of_steps_runs_to_its_end():
    steps = [(0, f"task-{n}", []) for n in range(2000)] + [(0, "task-end", list(range(0, 2000, 7)))]
    client = FakeClient(echo_instruction)
    result = await run(
        ScriptedStrategy([workflow(*steps)]),
        make_workers(1, client=client),
        settings=RunSettings(max_steps=3000),
    )

    assert result.status == "succeeded"
    assert result.answer == "done task-end"


async def test_call_with_retries_reports_each_failed_attempt():
    failures = []
    outcome = await call_with_retries(
        FakeClient(["ok"], fail_first=1),
        [{"role": "user", "content": "hi"}],
        settings=RunSettings(),
        sleep=RecordingSleep(),
        on_failed_attempt=lambda error, seconds, queued: failures.append(error),
    )

    assert outcome.completion is not None and outcome.completion.text == "ok"
    assert outcome.attempts == 2
    assert failures == ["rate limited"]
