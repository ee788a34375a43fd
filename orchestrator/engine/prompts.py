"""The prompted conductor's messages: our own prompt text for writing a workflow.

``conductor_messages`` returns a system message (the job, the three-list format, the limits of
this pool and, in the "full" prompt style, a few short worked examples; a later round, which only
decides whether to accept the previous answer, gets a short one instead) and one user message. ``repair_message`` is the user
turn that shows a parse error back to the conductor.

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
    binary access mode only, says access entries are ``only "all" or []``. The system message
    uses the same phrases, and the word "binary" appears only in binary mode.

Each marker occurs exactly once: a line of the question or previous answer that would read as a
marker (after stripping spaces) is written with a leading backslash (``\\## Question``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from orchestrator.engine.plan import format_workflow
from orchestrator.engine.types import (
    ALL,
    Access,
    Message,
    RunSettings,
    StepSpec,
    WorkerInfo,
    Workflow,
)

__all__ = ["MARKERS", "conductor_messages", "repair_message"]

WORKERS_MARKER: Final = "## Workers"
QUESTION_MARKER: Final = "## Question"
PREVIOUS_ANSWER_MARKER: Final = "## Previous answer"
WORKFLOW_MARKER: Final = "## Your workflow"
MARKERS: Final = (WORKERS_MARKER, QUESTION_MARKER, PREVIOUS_ANSWER_MARKER, WORKFLOW_MARKER)

_INTRODUCTION = """\
You are the conductor of a team of language models. You do not answer questions yourself: for \
each question you write a short workflow, a list of steps, and each step is an instruction for \
one worker model. The workers run the steps, and the response of the last step is the final \
answer.

Every step has three parts:
- model_id: the worker that runs it, by number (Model 0, Model 1, ...). Choose workers by their \
descriptions: give each step to the worker best suited to it.
- subtasks: the instruction, addressed to the worker. Make it specific and self-contained: say \
what to produce and in what form. The last step must produce the complete final answer.
- access_list: the earlier steps the worker sees. Each step it sees arrives as a pair of \
conversation turns: that step's instruction, then the response to it."""

_FORMAT = """\
Write your workflow like this: think briefly about the question, then end your reply with \
exactly three Python lists of equal length, one entry per step, in a code block:

```python
model_id = [...]
subtasks = [...]
access_list = [...]
```

Use at most {max_steps} steps. Use fewer when the question is easy: one step with a strong \
worker is often enough. Steps that do not read each other run at the same time."""

_ACCESS_FINE = """\
Each access entry is one of:
- "all": every earlier step;
- []: no earlier step (the worker starts fresh);
- a list of earlier step numbers such as [0, 2]: exactly those steps. Steps are numbered from 0 \
and a step can only read steps before it."""

_ACCESS_BINARY = """\
In this pool access is binary: each access entry is only "all" or [] (no step numbers).
- "all": every earlier step;
- []: no earlier step (the worker starts fresh)."""

_QUESTION_IN_LATER_STEPS = "Every step is shown the question along with its instruction."
_QUESTION_IN_FIRST_STEP_ONLY = (
    "Only step 0 is shown the question. Later steps see their own instruction and the steps "
    "they read: put in each instruction everything the worker needs."
)

_ROUNDS = """\
After your workflow has run you may be shown its final answer and asked again. If that answer \
is correct and complete, accept it by writing three empty lists:

```python
model_id = []
subtasks = []
access_list = []
```

Otherwise write a new workflow that fixes what is wrong; its steps do not see the earlier \
round, so say in the instructions what needs fixing."""

_EXAMPLES_HEADING = (
    "Worked examples (the worker numbers here only illustrate; choose from the pool you are given):"
)


_COUNT_WORDS: Final = {2: "Two", 3: "Three"}


def _example(
    title: str, question: str, reasoning: str, steps: Sequence[tuple[int, str, Access]], pool: int
) -> str:
    workflow = Workflow(
        steps=tuple(
            StepSpec(worker % pool, instruction, access) for worker, instruction, access in steps
        )
    )
    return (
        f"Example: {title}\nQuestion: {question}\n{reasoning}\n\n"
        f"```python\n{format_workflow(workflow)}\n```"
    )


def _examples(settings: RunSettings, pool: int) -> list[str]:
    """Examples that are valid for this pool: worker numbers in range, within max_steps, and
    without step numbers in binary mode."""
    fine = settings.access_mode == "fine"
    examples = []
    if settings.max_steps >= 2:
        examples.append(
            _example(
                "a chain (solve, then check)",
                "A train covers 180 km in 2.5 hours. What is its average speed in m/s?",
                "One worker computes the speed; a second checks the work and states the answer.",
                [
                    (1, "Compute the average speed in m/s. Show each unit conversion.", ()),
                    (
                        0,
                        (
                            "Check the computation above step by step, correct any mistake, and "
                            "state the final speed in m/s."
                        ),
                        (0,) if fine else ALL,
                    ),
                ],
                pool,
            )
        )
    else:
        examples.append(
            _example(
                "a single step",
                "What is the capital of Australia?",
                "An easy lookup: one capable worker answers directly.",
                [(0, "Name the capital of Australia in one word.", ())],
                pool,
            )
        )
    if settings.max_steps >= 3:
        attempts = min(3, settings.max_steps - 1)
        attempt = "Decide which is larger, 2^100 or 3^60, and justify it in a few lines."
        examples.append(
            _example(
                "independent attempts and an aggregator",
                "Which is larger, 2^100 or 3^60?",
                f"{_COUNT_WORDS[attempts]} independent attempts; one more step compares them and "
                "gives the answer.",
                [
                    *((i, attempt, ()) for i in range(attempts)),
                    (
                        0,
                        (
                            "Several independent answers are shown above. Compare them, resolve any "
                            "disagreement by checking the reasoning, and give the final answer with "
                            "a short justification."
                        ),
                        ALL,
                    ),
                ],
                pool,
            )
        )
        examples.append(
            _example(
                "plan, solve, verify",
                "Write a Python function fib(n) that returns the n-th Fibonacci number in "
                "O(log n) time.",
                "One worker designs the algorithm, another writes the code, a third reviews "
                "the code against the design.",
                [
                    (
                        2,
                        "Describe an O(log n) algorithm for the n-th Fibonacci number. No code.",
                        (),
                    ),
                    (
                        1,
                        (
                            "Implement the algorithm described above as a Python function fib(n). "
                            "Return only the code."
                        ),
                        (0,) if fine else ALL,
                    ),
                    (
                        0,
                        (
                            "Review the design and the code above. Fix any bug and return the final, "
                            "complete Python function fib(n)."
                        ),
                        (0, 1) if fine else ALL,
                    ),
                ],
                pool,
            )
        )
    return examples


_ACCEPT_INTRODUCTION = """\
You are the conductor of a team of language models. You wrote a workflow for the question \
below and it has run; its final answer is shown as the previous answer. If that answer is \
correct and complete, accept it by writing three empty lists in a code block:

```python
model_id = []
subtasks = []
access_list = []
```

Otherwise write a new workflow that fixes what is wrong, in the same format: three Python lists \
of equal length, model_id (a worker number), subtasks (the instruction) and access_list (the \
earlier steps each step sees), at most {max_steps} steps. Its steps do not see the earlier \
round, so say in the instructions what needs fixing."""


_COMPACT_ACCEPT = """\
Accept the previous answer with three empty lists, or write a new workflow (at most \
{max_steps} steps{binary})."""


def _accept_prompt(settings: RunSettings) -> str:
    """The short system message of a later round: whether to accept the previous answer. It does
    not repeat the first round's explanations and examples."""
    if settings.prompt_style == "compact":
        binary = '; access only "all" or []' if settings.access_mode == "binary" else ""
        return _COMPACT_ACCEPT.format(max_steps=settings.max_steps, binary=binary)
    access = _ACCESS_FINE if settings.access_mode == "fine" else _ACCESS_BINARY
    return "\n\n".join([_ACCEPT_INTRODUCTION.format(max_steps=settings.max_steps), access])


_COMPACT = """\
You are the conductor: write a workflow for the question, three Python lists of equal length \
in a code block: model_id (worker numbers), subtasks (one instruction per step; the last step \
gives the final answer) and access_list (per step: "all", [] or earlier step numbers)\
{binary}. At most {max_steps} steps."""


def _compact_prompt(settings: RunSettings) -> str:
    binary = '; in this pool access is binary: only "all" or []'
    return _COMPACT.format(
        max_steps=settings.max_steps, binary=binary if settings.access_mode == "binary" else ""
    )


def _system_prompt(settings: RunSettings, pool: int) -> str:
    if settings.prompt_style == "compact":
        return _compact_prompt(settings)
    parts = [
        _INTRODUCTION,
        _ACCESS_FINE if settings.access_mode == "fine" else _ACCESS_BINARY,
        _QUESTION_IN_LATER_STEPS
        if settings.question_in_later_steps
        else _QUESTION_IN_FIRST_STEP_ONLY,
        _FORMAT.format(max_steps=settings.max_steps),
    ]
    if settings.max_rounds > 1:
        parts.append(_ROUNDS)
    if settings.prompt_style == "full":
        parts.append(_EXAMPLES_HEADING)
        parts.extend(_examples(settings, pool))
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
    if settings.access_mode == "fine":
        access = 'access entries "all", [] or lists of earlier step numbers'
    else:
        access = 'access entries only "all" or []'
    reminder = (
        "Think briefly, then write model_id, subtasks and access_list for this question: "
        f"at most {settings.max_steps} steps, {access}."
    )
    if round > 0:
        reminder += (
            " If the previous answer is correct and complete, accept it with three empty lists."
        )
    return reminder


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
        sections += ["", _kept_steps(kept)]
    system = _accept_prompt(settings) if later else _system_prompt(settings, max(1, len(workers)))
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n".join(sections)},
    ]


def _kept_steps(kept: Sequence[StepSpec]) -> str:
    count = len(kept)
    listed = _escape_markers(format_workflow(Workflow(tuple(kept))))
    return (
        f"The first {count} step{'s' if count != 1 else ''} of this workflow are already written "
        "and done. Write the whole workflow again: keep them first, exactly as they are, and "
        f"write the steps after them anew.\n{listed}"
    )


def repair_message(error: str) -> Message:
    """The user turn that shows the conductor why its workflow could not be used."""
    return {
        "role": "user",
        "content": (
            f"Your workflow could not be used: {error}\n\n"
            "Write the three lists again, corrected: model_id = [...], subtasks = [...] and "
            "access_list = [...], with one entry per step in each."
        ),
    }
