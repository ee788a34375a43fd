"""Context assembly: the exact messages a worker is sent (the UI shows them verbatim)."""

from __future__ import annotations

import pytest

from orchestrator.engine.context import DEFAULT_SYSTEM_PROMPT, build_messages
from orchestrator.engine.types import (
    ALL,
    Completion,
    Message,
    RunSettings,
    StepSpec,
    WorkerInfo,
    Workflow,
)

QUESTION = "What is 17 * 23?"
RESPONSES = {0: "Plan: multiply.", 1: "391", 2: "Checked: 391", 3: "Also 391"}


class SilentClient:
    """Never called: context assembly only needs the worker's description."""

    model = "test/silent"

    async def complete(self, messages, *, timeout):  # pragma: no cover - never called
        return Completion(text="")


def worker(system_prompt: str = "") -> WorkerInfo:
    return WorkerInfo(
        name="Solver",
        model="test/silent",
        description="Good at arithmetic",
        client=SilentClient(),
        system_prompt=system_prompt,
    )


def messages_for(
    workflow: Workflow,
    index: int,
    *,
    settings: RunSettings | None = None,
    system_prompt: str = "",
) -> list[Message]:
    return build_messages(
        question=QUESTION,
        workflow=workflow,
        index=index,
        responses={i: RESPONSES[i] for i in range(index)},
        worker=worker(system_prompt),
        settings=settings or RunSettings(),
    )


def system(content: str = DEFAULT_SYSTEM_PROMPT) -> Message:
    return {"role": "system", "content": content}


def user(content: str) -> Message:
    return {"role": "user", "content": content}


def assistant(content: str) -> Message:
    return {"role": "assistant", "content": content}


def own(instruction: str) -> Message:
    return user(f"Question:\n{QUESTION}\n\nYour task:\n{instruction}")


CHAIN = Workflow(
    steps=(
        StepSpec(0, "Plan the computation"),
        StepSpec(1, "Carry out the plan", (0,)),
        StepSpec(2, "Check the result", (1,)),
    )
)


def test_first_step_gets_system_prompt_and_the_question_with_its_task():
    assert messages_for(CHAIN, 0) == [system(), own("Plan the computation")]


def test_the_worker_system_prompt_replaces_the_default():
    assert messages_for(CHAIN, 0, system_prompt="You are terse.")[0] == system("You are terse.")


def test_chain_step_sees_only_the_step_it_reads():
    assert messages_for(CHAIN, 2) == [
        system(),
        user("Carry out the plan"),
        assistant("391"),
        own("Check the result"),
    ]


def test_all_reads_every_earlier_step_in_order():
    workflow = Workflow(
        steps=(
            StepSpec(0, "Answer A"),
            StepSpec(1, "Answer B"),
            StepSpec(2, "Answer C"),
            StepSpec(3, "Pick the best answer", ALL),
        )
    )
    assert messages_for(workflow, 3) == [
        system(),
        user("Answer A"),
        assistant("Plan: multiply."),
        user("Answer B"),
        assistant("391"),
        user("Answer C"),
        assistant("Checked: 391"),
        own("Pick the best answer"),
    ]


def test_explicit_indices_skip_unlisted_steps():
    workflow = Workflow(
        steps=(
            StepSpec(0, "Plan"),
            StepSpec(1, "Solve"),
            StepSpec(2, "Solve again"),
            StepSpec(3, "Compare the plan with the second solution", (0, 2)),
        )
    )
    assert messages_for(workflow, 3) == [
        system(),
        user("Plan"),
        assistant("Plan: multiply."),
        user("Solve again"),
        assistant("Checked: 391"),
        own("Compare the plan with the second solution"),
    ]


def test_empty_access_sees_no_earlier_step():
    workflow = Workflow(steps=(StepSpec(0, "Solve"), StepSpec(1, "Solve independently", ())))
    assert messages_for(workflow, 1) == [system(), own("Solve independently")]


def test_question_left_out_of_later_steps_when_the_setting_is_off():
    off = RunSettings(question_in_later_steps=False)
    assert messages_for(CHAIN, 1, settings=off) == [
        system(),
        user("Plan the computation"),
        assistant("Plan: multiply."),
        user("Carry out the plan"),
    ]
    # The first step always gets the question.
    assert messages_for(CHAIN, 0, settings=off) == [system(), own("Plan the computation")]


def test_same_input_same_messages_and_no_shared_state():
    first = messages_for(CHAIN, 2)
    first[1]["content"] = "edited by a caller"
    assert messages_for(CHAIN, 2)[1] == user("Carry out the plan")


def test_a_missing_response_is_a_scheduling_bug():
    with pytest.raises(ValueError, match="step 2 reads step 1, which has no response yet"):
        build_messages(
            question=QUESTION,
            workflow=CHAIN,
            index=2,
            responses={0: "only the first"},
            worker=worker(),
            settings=RunSettings(),
        )
