"""The prompted conductor's messages: our own prompt text for writing a workflow.

``conductor_messages`` returns a system message and one user message. In the "full" prompt style
(for general chat models) the first round's system message gives the job, the three-list format,
the access rules, the limits of this pool and one short worked example; the "compact" style (for
conductors that know the format) states the format in a few sentences. A later round, which
decides whether to accept the previous answer, gets a short system message of its own and does
not repeat the first round's. ``repair_message`` is the user turn that shows a parse error back
to the conductor.

The user message is a contract: the offline simulated conductor reads it. It consists of these
markers, each alone on its own line, in this order, each followed by its section:

``## Workers``
    one line per worker: ``Model {i}: {description}``, or ``Model {i} ({name}): {description}``
    when ``settings.show_worker_names``. Names and descriptions are folded onto one line.
``## Question``
    the question text (may span lines).
``## Previous answer``
    the previous round's final answer (may span lines); present only when ``round > 0`` and
    ``previous_answer is not None``.
``## Your workflow``
    a short reminder of what to write, which states the limit as ``at most {N} steps`` and, in
    binary access mode only, says access entries are ``only "all" or []`` (empty in the compact
    style, whose system message states both). The system messages use the same phrases, and the
    word "binary" appears only in binary mode.

Each marker occurs exactly once: a line of the question or previous answer that would read as a
marker (after stripping spaces) is written with a leading backslash (``\\## Question``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from orchestrator.engine.plan import format_workflow, format_workflow_json
from orchestrator.engine.types import (
    ALL,
    Access,
    Message,
    RunSettings,
    StepSpec,
    WorkerInfo,
    Workflow,
)

__all__ = ["ANSWER_LINE", "MARKERS", "SOLVE", "conductor_messages", "repair_message"]

ANSWER_LINE: Final = 'End with a final line of the form "Answer: ...".'
SOLVE: Final = "Solve the question. Work through it step by step. " + ANSWER_LINE
"""The instruction of a worker that answers alone (the ``single`` strategy, a plan's fallback)."""

WORKERS_MARKER: Final = "## Workers"
QUESTION_MARKER: Final = "## Question"
PREVIOUS_ANSWER_MARKER: Final = "## Previous answer"
WORKFLOW_MARKER: Final = "## Your workflow"
MARKERS: Final = (WORKERS_MARKER, QUESTION_MARKER, PREVIOUS_ANSWER_MARKER, WORKFLOW_MARKER)

_INTRODUCTION = """\
You are the conductor of a team of language models. Do not answer the question yourself: write \
a workflow, a few steps, each an instruction for one worker. The last step's response is the \
final answer."""

_FORMAT = """\
Think briefly, then end your reply with three Python lists of equal length, one entry per step, \
in a code block:
- model_id: each step's worker, by number, chosen by the descriptions;
- subtasks: each step's instruction, specific and self-contained; the last one asks for the \
complete final answer;
- access_list: the earlier steps each worker sees (instruction and response): {access}."""

_FORMAT_JSON = """\
Reply with one JSON object and nothing else: {{"steps": [...]}}, one object per step, each with \
"worker" (the step's worker, by number, chosen by the descriptions), "instruction" (specific and \
self-contained; the last one asks for the complete final answer) and "access" (the earlier steps \
this worker sees, instruction and response: {access})."""

_ACCESS_FINE = '"all" (every earlier step), [] (none) or earlier step numbers such as [0, 2]'
_ACCESS_BINARY = (
    '"all" (every earlier step) or [] (none); in this pool access is binary: only "all" or []'
)

_QUESTION_IN_LATER_STEPS = "Every step is shown the question."
_QUESTION_IN_FIRST_STEP_ONLY = (
    "Only step 0 is shown the question: put in each later instruction what its worker needs."
)

_LIMITS = "Use at most {max_steps} steps"
_FEWER = ", fewer for an easy question (often one strong worker)"
_CONCURRENT = "Steps that do not read each other run at the same time"
_ATTEMPTS = ': independent attempts, say, that a last step with "all" compares'

_ROUNDS = "You may later be asked to accept or fix the final answer."


def _written(settings: RunSettings, workflow: Workflow) -> str:
    """``workflow`` as this pool's conductor is asked to write it."""
    if settings.conductor_output == "json":
        return format_workflow_json(workflow)
    return format_workflow(workflow)


def _worked_example(settings: RunSettings, pool: int) -> str:
    """One short worked example, valid for this pool: worker numbers in range, within max_steps,
    and without step numbers in binary mode. With room for three steps it shows all three kinds
    of access entry."""
    fine = settings.access_mode == "fine"
    steps: list[tuple[int, str, Access]]
    if settings.max_steps >= 3:
        question = "A Python function fib(n) that runs in O(log n) time."
        reasoning = "One designs, one codes, one reviews."
        steps = [
            (2, "Describe an O(log n) algorithm for fib(n); no code.", ()),
            (1, "Write it as a Python function fib(n).", (0,) if fine else ALL),
            (0, "Review the code, fix any bug, return fib(n).", ALL),
        ]
    elif settings.max_steps == 2:
        question = "A train covers 180 km in 2.5 hours. What is its average speed in m/s?"
        reasoning = "One worker computes, a second checks."
        steps = [
            (1, "Compute the average speed in m/s, showing each unit conversion.", ()),
            (
                0,
                "Check the computation above, correct any mistake, and state the speed in m/s.",
                (0,) if fine else ALL,
            ),
        ]
    else:
        question = "What is the capital of Australia?"
        reasoning = "An easy lookup: one capable worker answers."
        steps = [(0, "Name the capital of Australia in one word.", ())]
    workflow = Workflow(
        steps=tuple(StepSpec(worker % pool, text, access) for worker, text, access in steps)
    )
    if settings.conductor_output == "json":
        return (
            f"Example (worker numbers illustrative): {question} {reasoning}\n"
            f"{format_workflow_json(workflow)}"
        )
    return (
        f"Example (worker numbers illustrative): {question} {reasoning}\n"
        f"```python\n{format_workflow(workflow)}\n```"
    )


_ACCEPT_INTRODUCTION = """\
You are the conductor of a team of language models. Your workflow for the question below has \
run; its final answer is the previous answer. If that is correct and complete, accept it with \
three empty lists in a code block: model_id = [], subtasks = [], access_list = []. Otherwise \
write a new workflow in those three lists, one entry per step (model_id: workers; subtasks: instructions; \
access_list: {access}); its steps do not see the earlier round, so say in them what to fix."""


_ACCEPT_INTRODUCTION_JSON = """\
You are the conductor of a team of language models. Your workflow for the question below has \
run; its final answer is the previous answer. If that is correct and complete, accept it with \
{{"steps": []}}. Otherwise write a new workflow, one JSON object {{"steps": [...]}} whose steps \
each have "worker", "instruction" and "access" ({access}); its steps do not see the earlier \
round, so say in them what to fix."""


_COMPACT_ACCEPT_JSON = """\
Accept the previous answer with {{"steps": []}}, or write a new workflow (at most \
{max_steps} steps{binary})."""


_COMPACT_ACCEPT = """\
Accept the previous answer with three empty lists, or write a new workflow (at most \
{max_steps} steps{binary})."""


def _accept_prompt(settings: RunSettings) -> str:
    """The short system message of a later round: whether to accept the previous answer. It does
    not repeat the first round's explanations and example."""
    json_output = settings.conductor_output == "json"
    if settings.prompt_style == "compact":
        binary = '; access only "all" or []' if settings.access_mode == "binary" else ""
        compact = _COMPACT_ACCEPT_JSON if json_output else _COMPACT_ACCEPT
        return compact.format(max_steps=settings.max_steps, binary=binary)
    fine = settings.access_mode == "fine"
    access = '"all", [] or earlier step numbers' if fine else 'only "all" or [] (binary)'
    introduction = _ACCEPT_INTRODUCTION_JSON if json_output else _ACCEPT_INTRODUCTION
    return introduction.format(access=access)


_COMPACT = """\
You are the conductor: write a workflow for the question, three Python lists of equal length \
in a code block: model_id (worker numbers), subtasks (one instruction per step; the last step \
gives the final answer) and access_list (per step: "all", [] or earlier step numbers)\
{binary}. At most {max_steps} steps."""


_COMPACT_JSON = """\
You are the conductor: write a workflow for the question as one JSON object {{"steps": [...]}}, \
each step an object with "worker" (a worker number), "instruction" (the last step gives the \
final answer) and "access" ("all", [] or earlier step numbers){binary}. At most {max_steps} \
steps."""


def _compact_prompt(settings: RunSettings) -> str:
    binary = '; in this pool access is binary: only "all" or []'
    compact = _COMPACT_JSON if settings.conductor_output == "json" else _COMPACT
    return compact.format(
        max_steps=settings.max_steps, binary=binary if settings.access_mode == "binary" else ""
    )


def _access(settings: RunSettings) -> str:
    return _ACCESS_FINE if settings.access_mode == "fine" else _ACCESS_BINARY


def _limits(settings: RunSettings, visibility: str) -> str:
    text = f"{visibility} {_LIMITS.format(max_steps=settings.max_steps)}"
    if settings.max_steps == 1:
        return f"{text}."
    return f"{text}{_FEWER}. {_CONCURRENT}{_ATTEMPTS if settings.max_steps >= 3 else ''}."


def _system_prompt(settings: RunSettings, pool: int) -> str:
    if settings.prompt_style == "compact":
        return _compact_prompt(settings)
    visibility = (
        _QUESTION_IN_LATER_STEPS
        if settings.question_in_later_steps
        else _QUESTION_IN_FIRST_STEP_ONLY
    )
    parts = [
        _INTRODUCTION,
        (_FORMAT_JSON if settings.conductor_output == "json" else _FORMAT).format(
            access=_access(settings)
        ),
        _limits(settings, visibility),
    ]
    if settings.max_rounds > 1:
        parts.append(_ROUNDS)
    parts.append(_worked_example(settings, pool))
    return "\n\n".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _worker_line(index: int, worker: WorkerInfo, show_name: bool) -> str:
    description = _one_line(worker.description) or "no description given"
    name = _one_line(worker.name)
    if show_name and name:
        return f"Model {index} ({name}): {description}"
    return f"Model {index}: {description}"


def _worker_name_line(index: int, worker: WorkerInfo) -> str:
    return f"Model {index}: {_one_line(worker.name) or 'a worker'}"


def _escape_markers(text: str) -> str:
    """Keep free text from ending a section early: a line that reads as a marker gets a
    backslash in front."""
    if "## " not in text:
        return text
    return "\n".join("\\" + line if line.strip() in MARKERS else line for line in text.split("\n"))


def _reminder(settings: RunSettings, round: int) -> str:
    if settings.prompt_style == "compact":  # the system message says it all
        return ""
    binary = ', access entries only "all" or []' if settings.access_mode == "binary" else ""
    if round > 0:
        return f"Accept it, or write a new workflow: at most {settings.max_steps} steps{binary}."
    return f"Write the workflow for this question: at most {settings.max_steps} steps{binary}."


def conductor_messages(
    *,
    question: str,
    workers: Sequence[WorkerInfo],
    settings: RunSettings,
    round: int,
    previous_answer: str | None,
    kept: Sequence[StepSpec] = (),
) -> list[Message]:
    """The system and user messages asking the conductor for the workflow of ``round``.

    ``kept``: the first steps of the round, already written and run (a replay that asks the
    conductor to write the rest of a round again); the reminder shows them and asks for the
    whole workflow with them first, unchanged."""
    later = round > 0 and previous_answer is not None
    # A compact later round names the workers only: their descriptions came in the first round.
    brief = later and settings.prompt_style == "compact"
    sections = [
        WORKERS_MARKER,
        *(
            _worker_name_line(i, w) if brief else _worker_line(i, w, settings.show_worker_names)
            for i, w in enumerate(workers)
        ),
        "",
        QUESTION_MARKER,
        _escape_markers(question),
        "",
    ]
    if round > 0 and previous_answer is not None:
        sections += [PREVIOUS_ANSWER_MARKER, _escape_markers(previous_answer), ""]
    sections += [WORKFLOW_MARKER, *filter(None, [_reminder(settings, round)])]
    if kept:
        sections += ["", _kept_steps(kept, settings)]
    system = _accept_prompt(settings) if later else _system_prompt(settings, max(1, len(workers)))
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n".join(sections)},
    ]


def _kept_steps(kept: Sequence[StepSpec], settings: RunSettings) -> str:
    count = len(kept)
    listed = _escape_markers(_written(settings, Workflow(tuple(kept))))
    return (
        f"The first {count} step{'s' if count != 1 else ''} of this workflow are already written "
        "and done. Write the whole workflow again: keep them first, exactly as they are, and "
        f"write the steps after them anew.\n{listed}"
    )


def repair_message(error: str, settings: RunSettings | None = None) -> Message:
    """The user turn that shows the conductor why its workflow could not be used."""
    if settings is not None and settings.conductor_output == "json":
        return {
            "role": "user",
            "content": (
                f"Your workflow could not be used: {error}\n\n"
                'Write the JSON object again, corrected: {"steps": [...]}, each step with '
                '"worker", "instruction" and "access".'
            ),
        }
    return {
        "role": "user",
        "content": (
            f"Your workflow could not be used: {error}\n\n"
            "Write the three lists again, corrected: model_id = [...], subtasks = [...] and "
            "access_list = [...], with one entry per step in each."
        ),
    }
