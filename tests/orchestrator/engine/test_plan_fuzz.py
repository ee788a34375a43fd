"""Property tests for the plan format: no input breaks the parser, and what it accepts is valid."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.plan import WorkflowError, format_workflow, parse_workflow
from orchestrator.engine.types import ALL, StepSpec, Workflow

options = st.fixed_dictionaries(
    {
        "pool_size": st.integers(min_value=0, max_value=5),
        "max_steps": st.integers(min_value=1, max_value=6),
        "access_mode": st.sampled_from(["fine", "binary"]),
    }
)

# Pieces of the grammar and of the ways it goes wrong, to build texts that are almost plans.
FRAGMENTS = [
    "model_id",
    "subtasks",
    "access_list",
    '"steps"',
    "'model_id'",
    "steps",
    " = ",
    "=",
    ":",
    ": ",
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    ",",
    ", ",
    "(",
    ")",
    '"all"',
    "'all'",
    '["all"]',
    "[]",
    "0",
    "1",
    "2",
    "7",
    "-1",
    "1.5",
    "1e400",
    "9" * 60,
    "True",
    "false",
    "null",
    "None",
    "all",
    '"',
    "'",
    '"""',
    "'''",
    "\\",
    "\\n",
    "\\u",
    "\\ud800",
    "\\ud83d\\ude00",
    "\\x4",
    "\\N{x}",
    '"Solve it"',
    "'Check it'",
    '""',
    '"  "',
    '"worker"',
    '"instruction"',
    '"access"',
    "#",
    "# note\n",
    "\n",
    " ",
    "\t",
    "```",
    "```python\n",
    "```json\n",
    "\r\n",
    "é",
    "\x00",
]
near_miss_texts = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=60
).map("".join)


def check(text: str, **parse_options) -> None:
    """Parse; anything but a Workflow or a WorkflowError fails the test, and so does an
    accepted workflow that breaks the limits it was parsed under."""
    try:
        workflow = parse_workflow(text, **parse_options)
    except WorkflowError as error:
        assert str(error)
        return
    assert isinstance(workflow, Workflow)
    assert len(workflow.steps) <= parse_options["max_steps"]
    for index, step in enumerate(workflow.steps):
        assert type(step.worker) is int and 0 <= step.worker < parse_options["pool_size"]
        assert isinstance(step.instruction, str) and step.instruction.strip()
        if step.access != ALL:
            assert parse_options["access_mode"] == "fine" or step.access == ()
            assert list(step.access) == sorted(set(step.access))
            assert all(type(i) is int and 0 <= i < index for i in step.access)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300), parse_options=options)
def test_any_text_is_parsed_or_rejected_with_a_workflow_error(text, parse_options):
    check(text, **parse_options)


@settings(max_examples=1000, deadline=None)
@given(text=near_miss_texts, parse_options=options)
def test_near_miss_plans_are_parsed_or_rejected_with_a_workflow_error(text, parse_options):
    check(text, **parse_options)


@st.composite
def workflows(draw, *, pool_size: int = 5, max_steps: int = 5, fine: bool = True) -> Workflow:
    count = draw(st.integers(min_value=0, max_value=max_steps))
    steps = []
    for index in range(count):
        if fine:
            subset = (
                draw(st.sets(st.integers(min_value=0, max_value=index - 1))) if index else set()
            )
            access = draw(st.sampled_from([ALL, tuple(sorted(subset))]))
        else:
            access = draw(st.sampled_from([ALL, ()]))
        instruction = draw(st.text(min_size=1, max_size=80).filter(lambda s: s.strip()))
        worker = draw(st.integers(min_value=0, max_value=pool_size - 1))
        steps.append(StepSpec(worker=worker, instruction=instruction, access=access))
    return Workflow(steps=tuple(steps))


@settings(max_examples=300, deadline=None)
@given(workflow=workflows())
def test_format_then_parse_round_trips(workflow):
    assert parse_workflow(format_workflow(workflow), pool_size=5) == workflow


PLAN_NAMES = ("model_id", "subtasks", "access_list", "steps")


@settings(max_examples=200, deadline=None)
@given(
    draft=workflows(fine=False),
    workflow=workflows(fine=False),
    reasoning=st.text(max_size=200).filter(lambda text: not any(n in text for n in PLAN_NAMES)),
)
def test_the_final_plan_wins_over_any_reasoning_and_drafts(draft, workflow, reasoning):
    text = (
        f"{reasoning}\nA first draft:\n{format_workflow(draft)}\n{reasoning}\n"
        f"```python\n{format_workflow(workflow)}\n```\n{reasoning}"
    )
    assert parse_workflow(text, pool_size=5, access_mode="binary") == workflow


@settings(max_examples=500, deadline=None)
@given(
    workflow=workflows(),
    edits=st.lists(
        st.tuples(st.floats(min_value=0, max_value=1), st.sampled_from(FRAGMENTS + [""])),
        min_size=1,
        max_size=4,
    ),
    parse_options=options,
)
def test_damaged_plans_are_parsed_or_rejected_with_a_workflow_error(workflow, edits, parse_options):
    text = format_workflow(workflow)
    for where, fragment in edits:
        at = int(where * len(text))
        text = text[:at] + fragment + text[at + 1 :]
    check(text, **parse_options)
