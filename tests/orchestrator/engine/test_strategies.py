import pytest

from orchestrator.engine.conductor import PromptedConductor
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.strategies import (
    MAX_PROPOSERS,
    MAX_REFLECTION_ROUNDS,
    MAX_WORKER_INDEX,
    STRATEGIES,
    build_strategy,
    check_fits,
)
from orchestrator.engine.types import RunSettings
from tests.orchestrator.engine.fakes import FakeClient, RecordingObserver, make_workers

QUESTION = "What is six times seven?"


async def first_plan(strategy, workers):
    return await strategy.plan(
        round=0, question=QUESTION, workers=workers, settings=RunSettings(), previous_answer=None
    )


def shape(workflow):
    return [(step.worker, step.access) for step in workflow.steps]


def test_every_listed_strategy_can_be_built():
    assert STRATEGIES == ("conductor", "single", "reflection", "moa")
    for name in STRATEGIES:
        strategy = build_strategy(name, conductor=FakeClient())
        assert strategy.name == name


def test_the_conductor_strategy_is_the_prompted_conductor_and_needs_a_client():
    client = FakeClient()
    strategy = build_strategy("conductor", conductor=client)
    assert isinstance(strategy, PromptedConductor) and strategy.client is client
    with pytest.raises(ValueError, match="conductor"):
        build_strategy("conductor")


async def test_single_is_one_solve_step_on_the_chosen_worker():
    strategy = build_strategy("single", options={"worker": 2})
    plan = await first_plan(strategy, make_workers(3))

    assert plan.strategy == "single" and plan.round == 0
    assert shape(plan.workflow) == [(2, ())]
    instruction = plan.workflow.steps[0].instruction
    assert "Solve" in instruction and instruction.endswith('"Answer: ...".')
    assert plan.attempts == [] and plan.messages == []


async def test_fixed_strategies_stop_after_the_first_round():
    for name in ("single", "reflection", "moa"):
        strategy = build_strategy(name)
        second = await strategy.plan(
            round=1,
            question=QUESTION,
            workers=make_workers(3),
            settings=RunSettings(),
            previous_answer="Answer: 1",
        )
        assert second is None


async def test_a_fixed_strategy_is_never_asked_to_plan_a_second_round():
    observer = RecordingObserver()
    result = await execute_run(
        question=QUESTION,
        strategy=build_strategy("single"),
        workers=make_workers(2),
        settings=RunSettings(max_rounds=3),
        observer=observer,
    )

    assert result.status == "succeeded"
    assert [name for name in observer.names() if name == "planning"] == ["planning"]


async def test_reflection_is_a_chain_of_reviews():
    strategy = build_strategy("reflection", options={"worker": 1, "rounds": 3})
    plan = await first_plan(strategy, make_workers(2))

    assert shape(plan.workflow) == [(1, ()), (1, (0,)), (1, (1,)), (1, (2,))]
    solve, *reviews = [step.instruction for step in plan.workflow.steps]
    assert "Solve" in solve and "review" not in solve.lower()
    for review in reviews:
        assert "Review" in review and "verify" in review and "improved final answer" in review
        assert review.endswith('"Answer: ...".')


async def test_reflection_defaults_to_three_reviews_by_worker_zero():
    plan = await first_plan(build_strategy("reflection"), make_workers(2))
    assert shape(plan.workflow) == [(0, ()), (0, (0,)), (0, (1,)), (0, (2,))]


async def test_moa_proposes_independently_then_combines_everything():
    strategy = build_strategy("moa", options={"proposers": [1, 2, 2], "aggregator": 0})
    plan = await first_plan(strategy, make_workers(3))

    assert shape(plan.workflow) == [(1, ()), (2, ()), (2, ()), (0, "all")]
    *proposals, aggregate = [step.instruction for step in plan.workflow.steps]
    assert all("Solve" in proposal for proposal in proposals)
    assert "Combine" in aggregate and "solve" not in aggregate.lower()
    assert aggregate.endswith('"Answer: ...".')


async def test_moa_defaults_to_every_other_worker_as_proposer():
    plan = await first_plan(build_strategy("moa", options={"aggregator": 1}), make_workers(4))
    assert shape(plan.workflow) == [(0, ()), (2, ()), (3, ()), (1, "all")]

    alone = await first_plan(build_strategy("moa"), make_workers(1))
    assert shape(alone.workflow) == [(0, ()), (0, "all")]


async def test_options_may_come_from_a_form_as_text():
    strategy = build_strategy("moa", options={"proposers": "1,2", "aggregator": "0"})
    plan = await first_plan(strategy, make_workers(3))
    assert shape(plan.workflow) == [(1, ()), (2, ()), (0, "all")]


@pytest.mark.parametrize(
    "name, options, named",
    [
        ("best-of", None, "best-of"),
        ("single", {"workers": 1}, "workers"),
        ("single", {"worker": -1}, "worker"),
        ("single", {"worker": "two"}, "worker"),
        ("single", {"worker": True}, "worker"),
        ("reflection", {"rounds": 0}, "rounds"),
        ("moa", {"proposers": []}, "proposers"),
        ("moa", {"proposers": [0, "x"]}, "proposers"),
        ("moa", {"proposers": 3}, "proposers"),
        ("moa", {"aggregator": 1.5}, "aggregator"),
        ("conductor", {"worker": 0}, "worker"),
    ],
)
def test_unknown_names_and_bad_options_are_rejected_by_name(name, options, named):
    with pytest.raises(ValueError, match=named):
        build_strategy(name, conductor=FakeClient(), options=options)


async def test_a_worker_outside_the_pool_fails_the_run_with_a_clear_error():
    result = await execute_run(
        question=QUESTION,
        strategy=build_strategy("single", options={"worker": 3}),
        workers=make_workers(2),
    )
    assert result.status == "failed"
    assert "worker 3" in result.error


def reply_by_role(messages):
    """A worker that answers by the role its instruction names."""
    instruction = messages[-1]["content"]
    if "Combine" in instruction:
        return "combined. Answer: 42"
    if "Review" in instruction:
        return f"reviewed {len(messages)}. Answer: 42"
    return "solved. Answer: 41"


async def test_baselines_run_on_the_scheduler_end_to_end():
    workers = make_workers(3, client=FakeClient(reply_by_role))

    single = await execute_run(
        question=QUESTION, strategy=build_strategy("single"), workers=workers
    )
    assert (single.status, single.answer, single.totals.model_calls) == (
        "succeeded",
        "solved. Answer: 41",
        1,
    )

    reflection = await execute_run(
        question=QUESTION,
        strategy=build_strategy("reflection", options={"rounds": 2}),
        workers=workers,
    )
    assert reflection.status == "succeeded"
    assert reflection.answer.startswith("reviewed") and reflection.totals.model_calls == 3

    moa = await execute_run(question=QUESTION, strategy=build_strategy("moa"), workers=workers)
    assert (moa.answer, moa.totals.model_calls) == ("combined. Answer: 42", 3)
    assert len(moa.plans) == 1 and moa.plans[0].strategy == "moa"


# Bounds ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, options, named",
    [
        ("reflection", {"rounds": 1_000_000_000}, "rounds must be an integer from 1 to 20"),
        ("reflection", {"rounds": MAX_REFLECTION_ROUNDS + 1}, "from 1 to 20"),
        ("reflection", {"rounds": "9" * 5000}, "rounds must be an integer from 1 to 20"),
        ("moa", {"proposers": [0, 1, 2, 3, 4] * 1000}, "lists 5000 workers, but at most 20"),
        ("moa", {"proposers": ",".join(["1"] * 21)}, "at most 20"),
        ("moa", {"proposers": [0, MAX_WORKER_INDEX + 1]}, "from 0 to 99"),
        ("moa", {"aggregator": 2**64}, "aggregator must be an integer from 0 to 99"),
        ("single", {"worker": MAX_WORKER_INDEX + 1}, "worker must be an integer from 0 to 99"),
        ("single", {"worker": "²"}, "worker"),
    ],
)
def test_every_numeric_option_has_a_maximum_checked_before_building(name, options, named):
    with pytest.raises(ValueError, match=named) as excinfo:
        build_strategy(name, options=options)
    assert len(str(excinfo.value)) < 300  # a huge option is not echoed back whole


def test_many_unknown_options_are_named_briefly():
    options = {f"option{n:05d}" + "x" * 1000: 1 for n in range(10_000)}
    with pytest.raises(ValueError, match=r"no option option00000x+\.\.\., .* and 9995 more") as e:
        build_strategy("single", options=options)
    assert len(str(e.value)) < 400


def test_the_largest_allowed_options_are_accepted():
    assert build_strategy("reflection", options={"rounds": MAX_REFLECTION_ROUNDS})
    assert build_strategy("moa", options={"proposers": [MAX_WORKER_INDEX] * MAX_PROPOSERS})


@pytest.mark.parametrize(
    "name, options, pool_size, fits",
    [
        ("reflection", {"rounds": 9}, 3, True),  # 10 steps: exactly 5 × 2
        ("reflection", {"rounds": 10}, 3, False),
        ("moa", {}, 10, True),  # 9 proposers and the aggregator
        ("moa", {}, 11, False),  # the default proposers grow with the pool
        ("single", {}, 50, True),
    ],
)
def test_a_fixed_strategy_must_fit_the_pools_steps_times_rounds(name, options, pool_size, fits):
    settings = RunSettings(max_steps=5, max_rounds=2)
    strategy = build_strategy(name, options=options)
    if fits:
        check_fits(strategy, pool_size=pool_size, settings=settings)
    else:
        with pytest.raises(ValueError, match=r"the pool allows at most 10 .*5 steps .* 2 rounds"):
            check_fits(strategy, pool_size=pool_size, settings=settings)


async def test_the_scheduler_refuses_a_workflow_past_the_pools_step_limit_before_any_call():
    client = FakeClient()
    result = await execute_run(
        question=QUESTION,
        strategy=build_strategy("reflection", options={"rounds": 6}),
        workers=make_workers(2, client=client),
        settings=RunSettings(max_steps=3, max_rounds=2),
    )
    assert result.status == "failed"
    assert "7 steps, but the pool allows at most 6" in result.error
    assert client.call_count == 0 and result.steps == []


async def test_budgets_bound_fixed_strategies_too():
    client = FakeClient(tokens_in=10, tokens_out=5)
    result = await execute_run(
        question=QUESTION,
        strategy=build_strategy("reflection", options={"rounds": 9}),
        workers=make_workers(1, client=client),
        settings=RunSettings(max_steps=10, max_rounds=1, token_budget=40),
    )
    assert result.status == "failed"
    assert result.error == "token budget exhausted: 45 of 40 tokens used"
    assert client.call_count == 3  # of the 10 steps planned
