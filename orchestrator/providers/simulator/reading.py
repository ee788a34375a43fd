"""Reading the chat messages a simulated model receives: the question, the instruction, the
earlier steps it can see, and what a conductor prompt says about the pool.

The formats read here are the engine's (``context.build_messages`` and the conductor prompt);
anything unexpected degrades to "no question found", never to an exception.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.engine.types import Message

QUESTION_PREFIX = "Question:\n"
TASK_SEPARATOR = "\n\nYour task:\n"


@dataclass(frozen=True, slots=True)
class WorkerTurn:
    """What a worker was asked: the question (if it can be found), its own instruction, and the
    earlier (instruction, response) pairs in its context, oldest first."""

    question: str | None
    instruction: str
    visible: tuple[tuple[str, str], ...]

    def context_text(self) -> str:
        return "\n\x1e".join(
            f"{instruction}\n\x1f{response}" for instruction, response in self.visible
        )


def _split_question(content: str) -> tuple[str, str] | None:
    if content.startswith(QUESTION_PREFIX) and TASK_SEPARATOR in content:
        question, instruction = content[len(QUESTION_PREFIX) :].split(TASK_SEPARATOR, 1)
        return question, instruction
    return None


def read_worker_turn(messages: Sequence[Message]) -> WorkerTurn:
    """The worker's view of ``messages``: the last user turn is its own; earlier user/assistant
    pairs are the steps it reads. A plain user message is taken as the question itself."""
    turns = [m for m in messages if m.get("role") in ("user", "assistant")]
    if not turns or turns[-1].get("role") != "user":
        return WorkerTurn(None, "", ())
    own = turns[-1].get("content", "")
    visible: list[tuple[str, str]] = []
    question: str | None = None
    for position in range(0, len(turns) - 1, 2):
        instruction = turns[position].get("content", "")
        response = turns[position + 1].get("content", "") if position + 1 < len(turns) - 1 else ""
        split = _split_question(instruction)
        if split:
            question, instruction = split
        visible.append((instruction, response))
    split = _split_question(own)
    if split:
        return WorkerTurn(split[0], split[1], tuple(visible))
    if question is None and not visible:
        return WorkerTurn(own, "", ())
    return WorkerTurn(question, own, tuple(visible))


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """A worker as the conductor prompt lists it."""

    index: int
    name: str
    description: str


@dataclass(frozen=True, slots=True)
class ConductorPrompt:
    """What the simulated conductor reads from its prompt."""

    workers: tuple[PoolEntry, ...]
    question: str
    previous_answer: str | None
    max_steps: int
    binary_access: bool
    repairs: int


_MARKERS = ("## Workers", "## Question", "## Previous answer", "## Your workflow")
_WORKER_LINE = re.compile(r"^Model (\d+)(?: \((.*?)\))?:\s*(.*)$")
_MAX_STEPS = re.compile(r"(?:at most|up to|no more than|maximum of)\s+(\d+)\s+steps", re.IGNORECASE)
_BINARY = re.compile(
    r'(binary|only\s+"?all"?\s+or\s+\[\]|either\s+"?all"?\s+or\s+\[\]|no\s+(?:explicit\s+)?indices)',
    re.IGNORECASE,
)


def _sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.strip() in _MARKERS:
            current = sections.setdefault(line.strip(), [])
        elif current is not None:
            # The prompt escapes question lines that would read as a marker with a backslash.
            escaped = line.strip().startswith("\\") and line.strip()[1:] in _MARKERS
            current.append(line.replace("\\", "", 1) if escaped else line)
    return {marker: "\n".join(lines).strip("\n") for marker, lines in sections.items()}


def read_conductor_prompt(messages: Sequence[Message]) -> ConductorPrompt | None:
    """The pool, question, previous answer and limits from a conductor prompt, or None if the
    messages do not contain one (no "## Workers" and "## Question" sections)."""
    user_messages = [m.get("content", "") for m in messages if m.get("role") == "user"]
    prompt_index = next(
        (
            i
            for i, content in enumerate(user_messages)
            if "## Workers" in content and "## Question" in content
        ),
        None,
    )
    if prompt_index is None:
        return None
    sections = _sections(user_messages[prompt_index])
    workers = []
    for line in sections.get("## Workers", "").splitlines():
        match = _WORKER_LINE.match(line.strip())
        if match:
            workers.append(PoolEntry(int(match.group(1)), match.group(2) or "", match.group(3)))
    instructions = "\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
    instructions += "\n" + sections.get("## Your workflow", "")
    steps = _MAX_STEPS.search(instructions)
    return ConductorPrompt(
        workers=tuple(workers),
        question=sections.get("## Question", "").strip(),
        previous_answer=sections.get("## Previous answer"),
        max_steps=int(steps.group(1)) if steps else 5,
        binary_access=bool(_BINARY.search(instructions)),
        repairs=len(user_messages) - 1 - prompt_index,
    )
