from orchestrator.engine import prompts
from orchestrator.engine.conductor import PromptedConductor
from orchestrator.engine.plan import format_workflow
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.types import Completion, ModelError, RunSettings, StepSpec, Workflow
from tests.orchestrator.engine.fakes import FakeClient, RecordingSleep, make_workers

QUESTION = "What is six times seven?"
GOOD = (
    "I will solve it and then check it.\n"
    'model_id = [0, 1]\nsubtasks = ["Solve the question", "Verify the answer above"]\n'
    'access_list = [[], ["all"]]'
)
ACCEPT = "The answer looks right.\nmodel_id = []\nsubtasks = []\naccess_list = []"
GARBAGE = "I think we should just answer 42."


async def plan(client, *, round=0, settings=RunSettings(), previous_answer=None, workers=None):
    conductor = PromptedConductor(client, sleep=RecordingSleep())
    return await conductor.plan(
        round=round,
        question=QUESTION,
        workers=workers or make_workers(2),
        settings=settings,
        previous_answer=previous_answer,
    )


async def run_with(conductor, worker_client, settings):
    """A whole run of two workers (answering through ``worker_client``) led by ``conductor``."""
    return await execute_run(
        question=QUESTION,
        strategy=PromptedConductor(conductor),
        workers=make_workers(2, client=worker_client),
        settings=settings,
    )


async def test_a_good_first_reply_becomes_the_workflow():
    client = FakeClient([Completion(GOOD, tokens_in=300, tokens_out=40, cost=0.01, latency=0.7)])
    workers = make_workers(2)
    record = await plan(client, workers=workers)

    assert record.error == ""
    assert record.strategy == "conductor" and record.round == 0
    assert record.workflow == Workflow(
        (StepSpec(0, "Solve the question", ()), StepSpec(1, "Verify the answer above", "all"))
    )
    assert len(record.attempts) == 1
    attempt = record.attempts[0]
    assert (attempt.raw, attempt.error, attempt.tokens_in, attempt.tokens_out) == (
        GOOD,
        "",
        300,
        40,
    )
    assert (attempt.cost, attempt.latency) == (0.01, 0.7)
    expected = prompts.conductor_messages(
        question=QUESTION, workers=workers, settings=RunSettings(), round=0, previous_answer=None
    )
    assert record.messages == expected == client.calls[0].messages


async def test_an_unusable_reply_is_shown_back_with_the_error():
    client = FakeClient([GARBAGE, GOOD])
    record = await plan(client)

    assert record.workflow is not None and len(record.workflow.steps) == 2
    assert record.error == ""
    assert [attempt.raw for attempt in record.attempts] == [GARBAGE, GOOD]
    first_error = record.attempts[0].error
    assert "found no workflow" in first_error
    assert record.attempts[1].error == ""

    retry = client.calls[1].messages
    assert retry[: len(client.calls[0].messages)] == client.calls[0].messages
    assert retry[-2] == {"role": "assistant", "content": GARBAGE}
    assert retry[-1] == prompts.repair_message(first_error)
    assert first_error in retry[-1]["content"]
    assert record.messages == retry  # what was sent on the last attempt


async def test_repairs_are_bounded_and_the_last_error_fails_the_plan():
    client = FakeClient(['model_id = [0]\nsubtasks = ["a", "b"]\naccess_list = [[]]'])
    record = await plan(client, settings=RunSettings(max_parse_retries=2))

    assert client.call_count == 3
    assert record.workflow is None
    assert record.error and record.error == record.attempts[-1].error
    assert len(record.attempts) == 3
    assert all(attempt.error for attempt in record.attempts)
    assert len(record.messages) == len(client.calls[-1].messages)


async def test_an_unknown_worker_is_a_parse_error():
    client = FakeClient(['model_id = [5]\nsubtasks = ["Solve it"]\naccess_list = [[]]'])
    record = await plan(client, settings=RunSettings(max_parse_retries=0))

    assert client.call_count == 1
    assert record.workflow is None
    assert "5" in record.error


async def test_accepting_in_the_first_round_is_rejected_and_repaired():
    client = FakeClient([ACCEPT, GOOD])
    record = await plan(client)

    assert "nothing to accept yet" in record.attempts[0].error
    assert record.workflow is not None and not record.workflow.accepts
    assert "nothing to accept yet" in client.calls[1].messages[-1]["content"]


async def test_accepting_in_a_later_round_is_a_workflow_that_accepts():
    client = FakeClient([ACCEPT])
    record = await plan(client, round=1, previous_answer="Answer: 42")

    assert record.workflow is not None and record.workflow.accepts
    assert record.error == ""


async def test_model_errors_are_retried_and_recorded_as_attempts():
    client = FakeClient([GOOD], fail_first=1)
    record = await plan(client)

    assert record.workflow is not None
    assert [attempt.error for attempt in record.attempts] == ["rate limited", ""]
    assert record.attempts[0].raw == ""


async def test_a_conductor_that_cannot_be_reached_fails_the_plan_at_once():
    client = FakeClient(error=ModelError("unauthorized", retryable=False, status=401), fail_first=9)
    record = await plan(client)

    assert client.call_count == 1
    assert record.workflow is None
    assert "unauthorized" in record.error


async def test_a_run_with_the_conductor_counts_its_calls_and_fails_with_its_error():
    conductor = FakeClient([GARBAGE], tokens_in=100, tokens_out=20)
    worker_client = FakeClient()
    result = await run_with(conductor, worker_client, RunSettings(max_parse_retries=1))

    assert result.status == "failed"
    assert "found no workflow" in result.error
    assert worker_client.call_count == 0
    assert result.totals.model_calls == 2
    assert result.totals.tokens_in == 200 and result.totals.tokens_out == 40


async def test_a_run_with_the_conductor_plans_again_after_each_round():
    workflow = format_workflow(Workflow((StepSpec(1, "Solve it", ()),)))
    conductor = FakeClient([workflow, ACCEPT])
    worker_client = FakeClient(["Answer: 42"])
    result = await run_with(conductor, worker_client, RunSettings(max_rounds=3))

    assert result.status == "succeeded"
    assert result.answer == "Answer: 42"
    assert conductor.call_count == 2
    assert "Answer: 42" in str(conductor.calls[1].messages)  # the conductor saw the answer
    assert result.totals.model_calls == 3
    assert [plan.workflow.accepts for plan in result.plans] == [False, True]


async def test_the_conductors_tokens_count_toward_the_budget():
    conductor = FakeClient([GOOD], tokens_in=5000, tokens_out=100)
    worker_client = FakeClient()
    result = await run_with(conductor, worker_client, RunSettings(token_budget=4000))

    assert result.status == "failed"
    assert "token budget" in result.error and "5100" in result.error
    assert worker_client.call_count == 0


async def test_the_single_fallback_has_the_first_worker_answer_alone():
    conductor = FakeClient([GARBAGE])
    worker_client = FakeClient(["Answer: 42"])
    settings = RunSettings(max_parse_retries=1, max_rounds=1, plan_fallback="single")
    result = await run_with(conductor, worker_client, settings)

    assert result.status == "succeeded" and result.answer == "Answer: 42"
    (record,) = result.plans
    assert record.fallback == "single" and "found no workflow" in record.error
    assert record.workflow == Workflow((StepSpec(0, prompts.SOLVE, ()),))
    assert conductor.call_count == 2 and worker_client.call_count == 1


async def test_a_later_round_falling_back_keeps_the_answer_it_has():
    workflow = format_workflow(Workflow((StepSpec(1, "Solve it", ()),)))
    conductor = FakeClient([workflow, GARBAGE])
    worker_client = FakeClient(["Answer: 42"])
    settings = RunSettings(max_rounds=2, max_parse_retries=0, plan_fallback="single")
    result = await run_with(conductor, worker_client, settings)

    assert result.status == "succeeded" and result.answer == "Answer: 42"
    assert [plan.fallback for plan in result.plans] == ["", "kept"]
    assert result.plans[1].workflow.accepts and worker_client.call_count == 1


async def test_an_unreachable_conductor_is_no_plan_to_fall_back_from():
    conductor = FakeClient([ModelError("refused", retryable=False)])
    settings = RunSettings(plan_fallback="single")
    result = await run_with(conductor, FakeClient(), settings)
    assert result.status == "failed" and "could not be reached" in result.error
    assert result.plans[0].fallback == ""


async def test_json_output_asks_for_the_plan_schema_and_reads_the_json():
    seen = []

    class SchemaClient(FakeClient):
        async def complete(self, messages, *, timeout, schema=None):
            seen.append(schema)
            return await super().complete(messages, timeout=timeout)

    reply = '{"steps": [{"worker": 1, "instruction": "Solve it", "access": []}]}'
    settings = RunSettings(conductor_output="json", max_steps=3)
    record = await plan(SchemaClient([reply]), settings=settings)
    assert record.form == "json" and record.workflow.steps[0].worker == 1
    (schema,) = seen
    assert schema["properties"]["steps"]["maxItems"] == 3
    assert '{"steps": [' in record.messages[0]["content"]
