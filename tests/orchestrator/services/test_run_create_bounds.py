"""run_create refuses unbounded work before anything is built or stored: options past their
maximum, strategies that would not fit the pool, questions and references over the size limit.
Pools come with budgets, so every strategy is bounded in tokens and dollars too."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from orchestrator.engine.types import DEFAULT_COST_BUDGET, DEFAULT_TOKEN_BUDGET
from orchestrator.models import Pool, Run
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_pool

QUESTION = "What is 17 * 23?"


def refusal(**kwargs) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as excinfo:
        run_create(**kwargs)
    assert not Run.objects.exists()
    return excinfo.value.message_dict


@pytest.mark.parametrize(
    ("strategy", "options", "message"),
    [
        ("reflection", {"rounds": 1_000_000_000}, "rounds must be an integer from 1 to 20"),
        ("reflection", {"rounds": 100_000}, "rounds must be an integer from 1 to 20"),
        ("moa", {"proposers": [0, 1, 2, 3, 4] * 1000}, "lists 5000 workers, but at most 20"),
        ("reflection", {"rounds": 12}, "would run 13 steps, but the pool allows at most 10"),
        ("moa", {"proposers": [1] * 12}, "would run 13 steps, but the pool allows at most 10"),
    ],
)
def test_options_past_their_bounds_are_refused_at_once(
    sim_pool, reviewer, strategy, options, message
):
    errors = refusal(
        pool=sim_pool,
        input=QUESTION,
        strategy=strategy,
        strategy_options=options,
        created_by=reviewer,
    )
    assert set(errors) == {"strategy_options"}
    assert message in errors["strategy_options"][0]


def test_the_step_limit_follows_the_pool(sim_pool, reviewer):
    sim_pool.max_steps, sim_pool.max_rounds = 3, 1
    sim_pool.save(update_fields=["max_steps", "max_rounds"])
    # The demo pool's default MoA: 4 proposers and the aggregator.
    errors = refusal(pool=sim_pool, input=QUESTION, strategy="moa", created_by=reviewer)
    assert errors["strategy_options"] == [
        'strategy "moa" would run 5 steps, but the pool allows at most 3 in a run '
        "(3 steps per round × 1 rounds)"
    ]


def test_a_question_or_reference_over_the_limit_is_refused_naming_it(sim_pool, reviewer, settings):
    settings.CONDUCTOR_MAX_TEXT_BYTES = 1000
    errors = refusal(pool=sim_pool, input="é" * 501, reference="x" * 1001, created_by=reviewer)
    assert errors["input"] == [
        "Too long: 1,002 bytes in UTF-8; the limit is 1,000 bytes (CONDUCTOR_MAX_TEXT_BYTES)."
    ]
    assert "the limit is 1,000 bytes" in errors["reference"][0]

    run = run_create(pool=sim_pool, input="é" * 500, reference="x" * 1000, enqueue=False)
    assert len(run.input) == 500


def test_the_default_limit_is_100_kb(sim_pool, reviewer):
    errors = refusal(pool=sim_pool, input="x" * (100 * 1024 + 1), created_by=reviewer)
    assert "the limit is 102,400 bytes (100 KB) (CONDUCTOR_MAX_TEXT_BYTES)" in errors["input"][0]
    assert run_create(pool=sim_pool, input="x" * 100 * 1024, enqueue=False).pk


def test_pools_get_budgets_by_default(project):
    pool = Pool.objects.create(project=project, name="New")
    assert (pool.token_budget, pool.cost_budget) == (DEFAULT_TOKEN_BUDGET, DEFAULT_COST_BUDGET)


def test_the_demo_pool_has_budgets(sim_pool):
    assert (sim_pool.token_budget, sim_pool.cost_budget) == (
        DEFAULT_TOKEN_BUDGET,
        DEFAULT_COST_BUDGET,
    )


def test_a_pools_budget_stops_a_baseline_strategy(project):
    pool = make_pool(project=project, workers=1, token_budget=1)
    run = run_create(
        pool=pool,
        input=QUESTION,
        strategy="reflection",
        strategy_options={"rounds": 3},
        enqueue=False,
    )
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("token budget exhausted")
    assert run.steps.count() == 4 and run.model_calls == 1
