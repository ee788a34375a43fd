"""Property tests for the plan's JSON form (what "json" conductor output asks for): it reads back
as written, in any of its layouts; whatever follows ``plan_schema`` is read unless the parser has
a reason it can name; damaged JSON is read or rejected with a WorkflowError, never worse."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.plan import (
    WorkflowError,
    format_workflow,
    format_workflow_json,
    parse_plan,
    plan_schema,
)
from orchestrator.engine.types import ALL
from tests.orchestrator.engine.test_plan_fuzz import FRAGMENTS, check, options, workflows


def as_data(workflow) -> list[dict]:
    return json.loads(format_workflow_json(workflow))["steps"]


@st.composite
def layouts(draw, workflow) -> str:
    """The workflow as JSON the way some model or server might lay it out."""
    steps = as_data(workflow)
    seed = draw(st.integers(min_value=0, max_value=2**16))
    shuffled = []
    for step in steps:
        keys = list(step)
        random.Random(seed).shuffle(keys)
        shuffled.append({key: step[key] for key in keys})
    whole = draw(st.sampled_from(["object", "bare list"]))
    value = {"steps": shuffled} if whole == "object" else shuffled
    indent = draw(st.sampled_from([None, 0, 2, "\t"]))
    text = json.dumps(value, indent=indent, ensure_ascii=draw(st.booleans()))
    fence = draw(st.sampled_from(["", "```\n", "```json\n"]))
    space = draw(st.sampled_from(["", " ", "\n", "\n\n  "]))
    return f"{space}{fence}{text}{space}{'```' if fence else ''}{space}"


@settings(max_examples=300, deadline=None)
@given(data=st.data(), workflow=workflows())
def test_the_json_form_reads_back_in_any_layout(data, workflow):
    if not workflow.steps:  # an empty bare list is no plan; the object form accepts
        parsed = parse_plan(format_workflow_json(workflow), pool_size=5)
        assert parsed.workflow == workflow and parsed.form == "json"
        return
    text = data.draw(layouts(workflow))
    parsed = parse_plan(text, pool_size=5)
    assert parsed.workflow == workflow and parsed.form == "json"


@settings(max_examples=200, deadline=None)
@given(workflow=workflows())
def test_the_lists_are_read_as_lists(workflow):
    parsed = parse_plan(format_workflow(workflow), pool_size=5)
    assert parsed.workflow == workflow and parsed.form == "lists"


@st.composite
def schema_following(draw):
    """Options, and a plan that follows their ``plan_schema`` as a constrained server writes
    it (the schema says nothing of whether an access entry is earlier, or of blank text)."""
    pool_size = draw(st.integers(min_value=1, max_value=5))
    max_steps = draw(st.integers(min_value=1, max_value=6))
    access_mode = draw(st.sampled_from(["fine", "binary"]))
    schema = plan_schema(pool_size=pool_size, max_steps=max_steps, access_mode=access_mode)
    step_schema = schema["properties"]["steps"]["items"]["properties"]
    listed = step_schema["access"]["anyOf"][1]
    count = draw(st.integers(min_value=1, max_value=max_steps))
    steps = []
    for _ in range(count):
        if draw(st.booleans()):
            access = ALL
        elif "items" in listed:
            access = draw(
                st.lists(st.sampled_from(listed["items"]["enum"]), max_size=listed["maxItems"])
            )
        else:
            access = []
        steps.append(
            {
                "worker": draw(st.sampled_from(step_schema["worker"]["enum"])),
                "instruction": draw(st.text(min_size=1, max_size=40)),
                "access": access,
            }
        )
    return {"pool_size": pool_size, "max_steps": max_steps, "access_mode": access_mode}, steps


@settings(max_examples=500, deadline=None)
@given(case=schema_following())
def test_a_plan_that_follows_the_schema_is_read_unless_the_parser_names_why(case):
    parse_options, steps = case
    text = json.dumps({"steps": steps})
    reasons = [
        index
        for index, step in enumerate(steps)
        if not step["instruction"].strip()
        or (step["access"] != ALL and any(entry >= index for entry in step["access"]))
    ]
    try:
        parsed = parse_plan(text, **parse_options)
    except WorkflowError as error:
        assert reasons, f"a plan that follows the schema was refused: {error}"
        assert f"steps[{reasons[0]}]" in str(error)
        return
    assert not reasons and parsed.form == "json"
    assert [step.worker for step in parsed.workflow.steps] == [s["worker"] for s in steps]
    check(text, **parse_options)


@settings(max_examples=500, deadline=None)
@given(
    workflow=workflows(),
    edits=st.lists(
        st.tuples(st.floats(min_value=0, max_value=1), st.sampled_from(FRAGMENTS + [""])),
        min_size=1,
        max_size=4,
    ),
    bare=st.booleans(),
    parse_options=options,
)
def test_damaged_json_plans_are_read_or_rejected_with_a_workflow_error(
    workflow, edits, bare, parse_options
):
    text = format_workflow_json(workflow)
    if bare:
        text = json.dumps(as_data(workflow))
    for where, fragment in edits:
        at = int(where * len(text))
        text = text[:at] + fragment + text[at + 1 :]
    check(text, **parse_options)
