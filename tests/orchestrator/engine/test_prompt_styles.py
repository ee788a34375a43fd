"""The conductor's prompt styles and its short accept round: what each sends, and that the
simulated conductor still reads every one of them."""

from __future__ import annotations

import pytest

from orchestrator.engine import prompts
from orchestrator.engine.types import RunSettings
from orchestrator.providers import worker_info
from orchestrator.providers.simulator import demo_pool, load_suite
from orchestrator.providers.simulator.reading import read_conductor_prompt
from orchestrator.providers.simulator.worker import prompt_tokens

WORKERS = [worker_info(worker) for worker in demo_pool(latency=0).workers]
QUESTION = load_suite()[0].question


def messages(style: str, round: int = 0, access_mode: str = "fine"):
    return prompts.conductor_messages(
        question=QUESTION,
        workers=WORKERS,
        settings=RunSettings(prompt_style=style, access_mode=access_mode, max_steps=4),
        round=round,
        previous_answer="Answer: 7" if round else None,
    )


def test_the_full_style_has_a_worked_example_and_the_compact_one_does_not():
    full, compact = messages("full"), messages("compact")
    assert "Example" in full[0]["content"] and "```python\nmodel_id = [" in full[0]["content"]
    assert "Example" not in compact[0]["content"]
    assert (
        "model_id" in compact[0]["content"] and "at most 4 steps" in compact[0]["content"].lower()
    )
    assert prompt_tokens(compact[:1]) < prompt_tokens(full[:1]) / 2
    # Both describe every worker in the first round.
    for sent in (full, compact):
        assert sent[1]["content"].count("Skills:") == len(WORKERS)


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_accept_round_is_short_and_resends_no_examples(style):
    first, later = messages(style), messages(style, round=1)
    assert "Example" not in later[0]["content"]
    assert "three empty lists" in later[0]["content"]
    assert prompt_tokens(later) < prompt_tokens(first) or style == "compact"
    assert "## Previous answer\nAnswer: 7" in later[1]["content"]
    if style == "compact":  # the workers by name only: their descriptions came in round 0
        assert "Skills:" not in later[1]["content"]
        assert prompt_tokens(later) < 200
    else:  # the workers again, with their descriptions: a new workflow has to choose them
        assert later[1]["content"].count("Skills:") == len(WORKERS)


def test_the_full_style_stays_lean_on_the_demo_pool():
    """The system messages the full style adds to the pool and the question in each round: one
    short worked example in the first round, one paragraph in the accept round (the suite's
    token figure in docs/PERFORMANCE.md rests on these sizes)."""
    first, later = messages("full"), messages("full", round=1)
    assert prompt_tokens(first[:1]) < 400
    assert prompt_tokens(later[:1]) < 150


@pytest.mark.parametrize("style", ["full", "compact"])
@pytest.mark.parametrize("access_mode", ["fine", "binary"])
@pytest.mark.parametrize("round", [0, 1])
def test_the_simulated_conductor_reads_every_style(style, access_mode, round):
    prompt = read_conductor_prompt(messages(style, round=round, access_mode=access_mode))
    assert prompt is not None
    assert [worker.index for worker in prompt.workers] == list(range(len(WORKERS)))
    assert prompt.question == QUESTION
    assert prompt.max_steps == 4
    assert prompt.binary_access == (access_mode == "binary")
    assert (prompt.previous_answer is not None) == (round == 1)
