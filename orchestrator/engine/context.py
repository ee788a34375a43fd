"""Context assembly: the exact chat messages a worker receives for one step.

The UI shows these messages verbatim and the simulated workers read them, so the layout is a
contract:

1. a system message: the worker's own system prompt, or DEFAULT_SYSTEM_PROMPT;
2. for each earlier step the access list names, in step order, a user turn with that step's
   instruction and an assistant turn with its response;
3. the step's own user turn: ``"Question:\\n{question}\\n\\nYour task:\\n{instruction}"`` when the
   question is included, otherwise just the instruction. The question is always included for
   step 0, and for later steps when ``settings.question_in_later_steps`` (the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from orchestrator.engine.types import Message, RunSettings, WorkerInfo, Workflow

__all__ = ["DEFAULT_SYSTEM_PROMPT", "build_messages", "own_turn"]

DEFAULT_SYSTEM_PROMPT: Final = (
    "You are one worker in a team of models answering a question together. You are given one "
    "step of the work. Earlier steps you may build on appear before it as prior turns. Do your "
    "step carefully and completely; if your step is to give the final answer, state it clearly."
)


def own_turn(*, question: str, instruction: str, include_question: bool) -> str:
    """The content of a step's own user turn (the last message of its context)."""
    if include_question:
        return f"Question:\n{question}\n\nYour task:\n{instruction}"
    return instruction


def build_messages(
    *,
    question: str,
    workflow: Workflow,
    index: int,
    responses: Mapping[int, str],
    worker: WorkerInfo,
    settings: RunSettings,
) -> list[Message]:
    """The messages sent to ``worker`` for step ``index`` of ``workflow``.

    ``responses`` holds the responses of earlier steps of this round, by index; every step this
    one reads must be there (a missing one is a scheduling bug and raises ValueError).
    """
    steps = workflow.steps
    messages: list[Message] = [
        {"role": "system", "content": worker.system_prompt or DEFAULT_SYSTEM_PROMPT}
    ]
    for earlier in workflow.reads(index):
        try:
            response = responses[earlier]
        except KeyError:
            raise ValueError(
                f"step {index} reads step {earlier}, which has no response yet"
            ) from None
        messages.append({"role": "user", "content": steps[earlier].instruction})
        messages.append({"role": "assistant", "content": response})
    messages.append(
        {
            "role": "user",
            "content": own_turn(
                question=question,
                instruction=steps[index].instruction,
                include_question=index == 0 or settings.question_in_later_steps,
            ),
        }
    )
    return messages
