"""The conductor prompt: the marker contract, worker numbering, limits, examples and repairs."""

from __future__ import annotations

import re

import pytest

from orchestrator.engine.plan import parse_workflow
from orchestrator.engine.prompts import MARKERS, conductor_messages, repair_message
from orchestrator.engine.types import Completion, Message, RunSettings, WorkerInfo


class SilentClient:
    """Never called: the prompt only needs names and descriptions."""

    model = "test/silent"

    async def complete(self, messages, *, timeout):  # pragma: no cover - never called
        return Completion(text="")


WORKERS = [
    WorkerInfo("Reasoner", "test/a", "Strong at maths\nand careful proofs", SilentClient()),
    WorkerInfo("Coder", "test/b", "Writes and tests Python code", SilentClient()),
    WorkerInfo("Quick", "test/c", "Fast and cheap; fine for lookups", SilentClient()),
]
QUESTION = "How many primes are below 30?\nAnswer with a number."


def prompt(
    *,
    settings: RunSettings | None = None,
    round: int = 0,
    previous_answer: str | None = None,
    question: str = QUESTION,
    workers=WORKERS,
) -> list[Message]:
    return conductor_messages(
        question=question,
        workers=workers,
        settings=settings or RunSettings(),
        round=round,
        previous_answer=previous_answer,
    )


def sections(user_message: str) -> dict[str, str]:
    """Split the user message at marker lines, the way the simulated conductor reads it."""
    found: dict[str, list[str]] = {}
    current = None
    for line in user_message.split("\n"):
        if line in MARKERS:
            assert line not in found, f"{line} appears twice"
            current = found.setdefault(line, [])
        else:
            assert current is not None, f"text before the first marker: {line!r}"
            current.append(line)
    return {marker: "\n".join(lines).strip("\n") for marker, lines in found.items()}


def test_a_system_message_then_one_user_message():
    messages = prompt()
    assert [m["role"] for m in messages] == ["system", "user"]


def test_markers_each_alone_on_a_line_in_order():
    user = prompt(round=1, previous_answer="10")[1]["content"]
    lines = user.split("\n")
    assert [line for line in lines if line in MARKERS] == list(MARKERS)
    assert lines[0] == "## Workers"


def test_workers_are_numbered_with_names_when_shown():
    found = sections(prompt()[1]["content"])
    assert found["## Workers"].split("\n") == [
        "Model 0 (Reasoner): Strong at maths and careful proofs",
        "Model 1 (Coder): Writes and tests Python code",
        "Model 2 (Quick): Fast and cheap; fine for lookups",
    ]


def test_worker_names_are_hidden_when_not_shown():
    messages = prompt(settings=RunSettings(show_worker_names=False))
    assert sections(messages[1]["content"])["## Workers"].split("\n") == [
        "Model 0: Strong at maths and careful proofs",
        "Model 1: Writes and tests Python code",
        "Model 2: Fast and cheap; fine for lookups",
    ]
    for message in messages:
        for worker in WORKERS:
            assert worker.name not in message["content"]


def test_question_section_keeps_every_line():
    assert sections(prompt()[1]["content"])["## Question"] == QUESTION


def test_previous_answer_only_in_later_rounds_with_an_answer():
    assert "## Previous answer" not in prompt(round=0, previous_answer="10")[1]["content"]
    assert "## Previous answer" not in prompt(round=1, previous_answer=None)[1]["content"]
    later = sections(prompt(round=1, previous_answer="There are 10.\nAnswer: 10")[1]["content"])
    assert later["## Previous answer"] == "There are 10.\nAnswer: 10"


def test_accepting_is_offered_only_in_later_rounds():
    first = sections(prompt(round=0)[1]["content"])["## Your workflow"]
    system, user = (m["content"] for m in prompt(round=1, previous_answer="10"))
    assert "accept" not in first.lower()
    assert "Accept it" in sections(user)["## Your workflow"]
    assert "three empty lists" in system and "access_list = []" in system


def test_marker_lines_inside_free_text_are_escaped():
    question = "Explain this heading:\n## Your workflow\nand this one:\n  ## Workers  "
    user = prompt(question=question, round=1, previous_answer="## Question")[1]["content"]
    found = sections(user)
    assert found["## Question"] == (
        "Explain this heading:\n\\## Your workflow\nand this one:\n\\  ## Workers  "
    )
    assert found["## Previous answer"] == "\\## Question"


def test_the_step_limit_is_stated_in_both_messages():
    system, user = (m["content"] for m in prompt(settings=RunSettings(max_steps=3)))
    assert "at most 3 steps" in system
    assert "at most 3 steps" in sections(user)["## Your workflow"]
    assert not re.search(r"at most [0-24-9]+ steps", system + user)


@pytest.mark.parametrize("round", [0, 1])
def test_fine_access_explains_step_numbers_and_never_says_binary(round):
    settings = RunSettings(access_mode="fine")
    system, user = (
        m["content"] for m in prompt(settings=settings, round=round, previous_answer="10")
    )
    assert (
        "earlier step numbers such as [0, 2]" if round == 0 else "earlier step numbers"
    ) in system
    assert "binary" not in (system + user).lower()
    assert 'only "all" or []' not in system + user


@pytest.mark.parametrize("round", [0, 1])
def test_binary_access_allows_only_all_or_nothing(round):
    settings = RunSettings(access_mode="binary")
    system, user = (
        m["content"] for m in prompt(settings=settings, round=round, previous_answer="10")
    )
    assert 'only "all" or []' in system
    assert 'only "all" or []' in sections(user)["## Your workflow"]
    assert "step numbers" not in system and "[0, 2]" not in system


def test_question_visibility_of_later_steps_is_explained():
    on = prompt(settings=RunSettings(question_in_later_steps=True))[0]["content"]
    off = prompt(settings=RunSettings(question_in_later_steps=False))[0]["content"]
    assert "Every step is shown the question" in on
    assert "Only step 0 is shown the question" in off


def test_a_later_round_is_announced_only_when_the_pool_allows_one():
    announce = "asked to accept or fix the final answer"
    assert announce in prompt(settings=RunSettings(max_rounds=2))[0]["content"]
    assert announce not in prompt(settings=RunSettings(max_rounds=1))[0]["content"]


def example_workflows(system: str, settings: RunSettings, pool_size: int):
    blocks = re.findall(r"```python\n(model_id = \[.+?)\n```", system, re.DOTALL)
    return [
        parse_workflow(
            block,
            pool_size=pool_size,
            max_steps=settings.max_steps,
            access_mode=settings.access_mode,
        )
        for block in blocks
        if not block.startswith(("model_id = []", "model_id = [...]"))
    ]


@pytest.mark.parametrize("access_mode", ["fine", "binary"])
@pytest.mark.parametrize("max_steps", [1, 2, 3, 5])
@pytest.mark.parametrize("pool_size", [1, 2, 3])
def test_worked_examples_are_valid_for_the_pool_they_are_shown_to(
    access_mode, max_steps, pool_size
):
    settings = RunSettings(access_mode=access_mode, max_steps=max_steps)
    system = prompt(settings=settings, workers=WORKERS[:pool_size])[0]["content"]
    [workflow] = example_workflows(system, settings, pool_size)  # exactly one worked example
    assert len(workflow.steps) == min(max_steps, 3)
    kinds = {
        "all" if s.access == "all" else "none" if not s.access else "numbers"
        for s in workflow.steps
    }
    if max_steps >= 3:  # room to show every kind of access entry the pool allows
        assert kinds == ({"none", "numbers", "all"} if access_mode == "fine" else {"none", "all"})
    if access_mode == "binary":
        assert "numbers" not in kinds


def test_same_input_gives_the_same_prompt():
    assert prompt(round=1, previous_answer="10") == prompt(round=1, previous_answer="10")


def test_repair_message_shows_the_error_and_asks_for_the_lists_again():
    message = repair_message("subtasks[2] is empty")
    assert message["role"] == "user"
    assert "subtasks[2] is empty" in message["content"]
    for name in ("model_id", "subtasks", "access_list"):
        assert name in message["content"]
