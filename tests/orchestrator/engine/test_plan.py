"""The plan format: every accepted form and every rejection, with the place the error names."""

from __future__ import annotations

import pytest

from orchestrator.engine.plan import WorkflowError, format_workflow, parse_workflow
from orchestrator.engine.types import ALL, StepSpec, Workflow

CHAIN = Workflow(
    steps=(
        StepSpec(worker=2, instruction="Work out an efficient algorithm", access=()),
        StepSpec(worker=0, instruction="Implement the algorithm above in Python", access=ALL),
    )
)


def parse(text: str, **options) -> Workflow:
    options.setdefault("pool_size", 4)
    return parse_workflow(text, **options)


def rejection(text: str, **options) -> str:
    with pytest.raises(WorkflowError) as caught:
        parse(text, **options)
    return str(caught.value)


def lists(model_id: str, subtasks: str, access_list: str) -> str:
    return f"model_id = {model_id}\nsubtasks = {subtasks}\naccess_list = {access_list}"


# --- accepted forms -------------------------------------------------------------------------------


def test_reasoning_then_plain_lists():
    text = (
        "The question needs an algorithm first, then code.\n"
        "I will give the design to Model 2 and the code to Model 0.\n\n"
        'model_id = [2, 0]\nsubtasks = ["Work out an efficient algorithm", '
        '"Implement the algorithm above in Python"]\naccess_list = [[], ["all"]]\n'
    )
    assert parse(text) == CHAIN


def test_lists_in_a_code_fence_in_any_order_with_single_quotes():
    text = (
        "Plan:\n```python\naccess_list = [[], 'all']\n"
        "subtasks = ['Work out an efficient algorithm', "
        "'Implement the algorithm above in Python']\nmodel_id = [2, 0]\n```\nDone."
    )
    assert parse(text) == CHAIN


def test_multiline_lists_with_trailing_commas_and_comments():
    text = """```
model_id = [
    2,  # the strongest reasoner
    0,
]
subtasks = [
    "Work out an efficient algorithm",
    "Implement the algorithm "
    "above in Python",  # adjacent strings are joined
]
access_list = [
    [],
    ["all"],
]
```"""
    assert parse(text) == CHAIN


def test_the_last_assignment_of_each_list_wins_over_drafts_in_the_reasoning():
    text = (
        "A first idea: model_id = [1] and subtasks = ['Just answer'] with access_list = [[]].\n"
        "Better to split the work:\n" + format_workflow(CHAIN)
    )
    assert parse(text) == CHAIN


def test_a_name_inside_an_instruction_is_not_taken_for_an_assignment():
    tricky = Workflow(
        steps=(
            StepSpec(0, 'Explain why model_id = [9] and subtasks = ["x"] look odd'),
            StepSpec(1, "Check access_list = [[5]] in the answer above", (0,)),
        )
    )
    assert parse(format_workflow(tricky)) == tricky


def test_json_form_after_reasoning_in_a_fence():
    text = (
        "I'll chain two workers.\n```json\n"
        '{"steps": [{"worker": 2, "instruction": "Work out an efficient algorithm", "access": []},'
        ' {"worker": 0, "instruction": "Implement the algorithm above in Python", '
        '"access": "all"}]}\n```'
    )
    assert parse(text) == CHAIN


def test_json_form_with_indices_unicode_escapes_and_duplicates():
    text = (
        '{"steps": [{"worker": 1, "instruction": "Caf\\u00e9 \\ud83d\\ude00", "access": []},'
        ' {"worker": 3, "instruction": "b\\/c", "access": [0, 0]}]}'
    )
    assert parse(text) == Workflow(steps=(StepSpec(1, "Café 😀", ()), StepSpec(3, "b/c", (0,))))


def test_lists_as_json_object_keys():
    text = (
        '{"model_id": [2, 0], "subtasks": ["Work out an efficient algorithm", '
        '"Implement the algorithm above in Python"], "access_list": [[], ["all"]]}'
    )
    assert parse(text) == CHAIN


def test_the_form_written_last_wins():
    json_text = '{"steps": [{"worker": 1, "instruction": "Only this", "access": []}]}'
    assert parse(format_workflow(CHAIN) + "\nOr as JSON:\n" + json_text) == Workflow(
        steps=(StepSpec(1, "Only this", ()),)
    )
    assert parse(json_text + "\nOr as lists:\n" + format_workflow(CHAIN)) == CHAIN


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('"all"', ALL),
        ("'ALL'", ALL),
        ('["all"]', ALL),
        ("[]", ()),
        ("[2, 0, 2]", (0, 2)),
        ("[1]", (1,)),
    ],
)
def test_access_entries_are_normalised(entry: str, expected):
    text = lists("[0, 1, 2, 3]", '["a", "b", "c", "d"]', f"[[], [0], [], {entry}]")
    assert parse(text).steps[3].access == expected


def test_binary_mode_accepts_all_and_empty():
    text = lists("[0, 1, 2]", '["a", "b", "c"]', '[[], "all", ["all"]]')
    assert parse(text, access_mode="binary").reads(2) == (0, 1)


def test_three_empty_lists_accept_the_previous_answer():
    workflow = parse("Looks right to me.\nmodel_id = []\nsubtasks = []\naccess_list = []")
    assert workflow == Workflow(steps=()) and workflow.accepts


def test_escapes_triple_quotes_and_raw_newlines_in_strings():
    text = lists(
        "[0, 1, 2]",
        '["Line one\\nline \\"two\\"\\t\\x41\\u00e9", '
        '"""Triple "quoted" text""", \'it\\\'s\n ok\']',
        "[[], [], []]",
    )
    instructions = [step.instruction for step in parse(text).steps]
    assert instructions == ['Line one\nline "two"\tAé', 'Triple "quoted" text', "it's\n ok"]


def test_exactly_max_steps_is_allowed():
    text = lists("[0, 0, 0]", '["a", "b", "c"]', '[[], "all", "all"]')
    assert len(parse(text, max_steps=3).steps) == 3


# --- format_workflow ------------------------------------------------------------------------------


def test_format_writes_the_canonical_three_lists():
    assert format_workflow(CHAIN) == (
        "model_id = [2, 0]\n"
        'subtasks = ["Work out an efficient algorithm", '
        '"Implement the algorithm above in Python"]\n'
        'access_list = [[], ["all"]]'
    )
    assert format_workflow(Workflow(steps=())) == "model_id = []\nsubtasks = []\naccess_list = []"


def test_format_then_parse_gives_the_workflow_back():
    workflow = Workflow(
        steps=(
            StepSpec(3, "Quotes \" and ' and \\ backslash\nnew line", ()),
            StepSpec(1, "Second", (0,)),
            StepSpec(0, "Third", (0, 1)),
            StepSpec(2, "Fourth", ALL),
        )
    )
    assert parse(format_workflow(workflow)) == workflow


# --- rejections -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "I am not sure what to do here.", "[0, 1]"])
def test_text_without_any_workflow(text: str):
    assert "found no workflow" in rejection(text)


def test_missing_list_is_named():
    message = rejection('model_id = [0]\nsubtasks = ["Answer"]')
    assert message == "found no access_list = [...] list"


def test_unequal_lengths_name_both_lists():
    text = lists("[0, 1, 2]", '["a", "b"]', "[[], [], []]")
    assert rejection(text) == "model_id has 3 entries but subtasks has 2"
    text = lists("[0]", '["a"]', "[[], []]")
    assert rejection(text) == "model_id has 1 entry but access_list has 2"


def test_unknown_worker_index_names_the_pool():
    text = lists("[0, 7]", '["a", "b"]', "[[], []]")
    assert rejection(text) == "model_id[1] = 7 but the pool has 4 workers (0-3)"
    assert rejection(lists("[1]", '["a"]', "[[]]"), pool_size=1) == (
        "model_id[0] = 1 but the pool has 1 worker (0)"
    )


@pytest.mark.parametrize(
    ("entry", "shown"), [("-1", "-1"), ("1.0", "1.0"), ("True", "True"), ('"1"', "'1'")]
)
def test_worker_that_is_not_a_valid_number(entry: str, shown: str):
    message = rejection(lists(f"[0, {entry}]", '["a", "b"]', "[[], []]"))
    assert message.startswith(f"model_id[1] = {shown}")


def test_empty_or_whitespace_instruction():
    assert rejection(lists("[0, 1, 2]", '["a", "b", ""]', "[[], [], []]")) == (
        "subtasks[2] is empty"
    )
    assert rejection(lists("[0]", '[" \\n\\t "]', "[[]]")) == "subtasks[0] is empty"


def test_instruction_that_is_not_a_string():
    assert rejection(lists("[0, 1]", '["a", 5]', "[[], []]")) == (
        "subtasks[1] should be a string but is a number"
    )


def test_reference_to_a_later_step():
    text = lists("[0, 1, 2, 3]", '["a", "b", "c", "d"]', "[[], [3], [], []]")
    assert rejection(text) == "access_list[1] refers to step 3, which is not earlier than step 1"


def test_reference_to_the_step_itself():
    text = lists("[0, 1]", '["a", "b"]', "[[], [1]]")
    assert rejection(text).startswith("access_list[1] refers to step 1 itself")


def test_step_zero_cannot_read_anything_by_index():
    text = lists("[0]", '["a"]', "[[0]]")
    assert rejection(text).startswith("access_list[0] refers to step 0 itself")


def test_negative_and_non_integer_indices():
    text = lists("[0, 1]", '["a", "b"]', "[[], [-1]]")
    assert rejection(text).startswith("access_list[1] refers to step -1")
    for entry, shown in [("0.0", "0.0"), ("False", "False"), ('"0"', "'0'"), ("[0]", "[0]")]:
        text = lists("[0, 1]", '["a", "b"]', f"[[], [{entry}]]")
        assert rejection(text) == f"access_list[1][0] = {shown} is not a step index"


def test_access_entry_of_the_wrong_shape():
    text = lists("[0, 1]", '["a", "b"]', '[[], "none"]')
    assert rejection(text).startswith("access_list[1] = 'none' is not")
    text = lists("[0, 1]", '["a", "b"]', "[[], 0]")
    assert rejection(text).startswith("access_list[1] = 0 is not")
    text = lists("[0, 1, 2]", '["a", "b", "c"]', '[[], [], ["all", 0]]')
    assert rejection(text).startswith('access_list[2] mixes "all"')


def test_binary_mode_rejects_explicit_indices():
    text = lists("[0, 1]", '["a", "b"]', "[[], [0]]")
    message = rejection(text, access_mode="binary")
    assert message.startswith("access_list[1] = [0] names steps")
    assert "binary" in message


def test_more_than_max_steps():
    text = lists("[0, 0, 0]", '["a", "b", "c"]', "[[], [], []]")
    assert rejection(text, max_steps=2) == (
        "model_id has more than 2 entries: a workflow has at most 2 steps"
    )
    json_text = (
        '{"steps": [' + ", ".join(['{"worker": 0, "instruction": "a", "access": []}'] * 6) + "]}"
    )
    assert "at most 5 steps" in rejection(json_text)


def test_cut_off_output_names_the_list_and_the_place():
    text = 'model_id = [0, 1]\nsubtasks = ["Solve it", "Check the ans'
    assert rejection(text) == (
        "could not read the subtasks list on line 2: unterminated string (at line 2, column 25)"
    )


def test_a_broken_last_assignment_is_not_replaced_by_an_earlier_draft():
    text = format_workflow(CHAIN) + "\nFinal:\nmodel_id = [2, 0\n"
    message = rejection(text)
    assert message == (
        "could not read the model_id list on line 5: the text ends before the list is closed "
        "(at line 6, column 1)"
    )


def test_unparseable_entries_name_what_was_found():
    message = rejection(lists("[0, 1]", "[first worker, second]", "[[], []]"))
    assert message == (
        "could not read the subtasks list on line 2: unexpected 'first worker, se' "
        "(at line 2, column 13)"
    )
    message = rejection(lists("[0 1]", '["a", "b"]', "[[], []]"))
    assert message.startswith(
        "could not read the model_id list on line 1: expected ',' or ']' but found '1]'"
    )


def test_json_step_problems_name_the_step_and_field():
    def json_rejection(step: str) -> str:
        first = '{"worker": 0, "instruction": "a", "access": []}'
        return rejection('{"steps": [' + first + ", " + step + "]}")

    assert json_rejection('{"worker": 9, "instruction": "b", "access": []}') == (
        "steps[1].worker = 9 but the pool has 4 workers (0-3)"
    )
    assert json_rejection('{"worker": 1, "instruction": " ", "access": []}') == (
        "steps[1].instruction is empty"
    )
    assert json_rejection('{"worker": 1, "instruction": "b", "access": [2]}') == (
        "steps[1].access refers to step 2, which is not earlier than step 1"
    )
    assert json_rejection('{"worker": 1, "instruction": "b"}') == 'steps[1] has no "access"'
    assert json_rejection('"just text"') == "steps[1] should be an object but is a string"


def test_invalid_escape_is_reported():
    message = rejection(lists("[0]", '["bad \\ud800 surrogate"]', "[[]]"))
    assert message.startswith("could not read the subtasks list on line 2: invalid escape")


def test_huge_numbers_are_rejected_without_converting_them():
    message = rejection(lists("[" + "9" * 5000 + "]", '["a"]', "[[]]"))
    assert "too long" in message


def test_deep_nesting_is_rejected():
    message = rejection("model_id = " + "[" * 10_000)
    assert "nested more than" in message


def test_unknown_access_mode_is_a_programming_error():
    with pytest.raises(ValueError) as caught:
        parse(format_workflow(CHAIN), access_mode="coarse")
    assert not isinstance(caught.value, WorkflowError)


@pytest.mark.parametrize(
    "garbage",
    [
        "model_id = " + "[" * 10_000,
        'subtasks = ["' + "x" * 10_000,
        "model_id = [" + "0, " * 3_333,
        "access_list = [[" + "0," * 60 + " " + "access_list = [[" * 200,
        "model_id = [" * 833,
        "steps " * 2_000,
    ],
)
def test_garbage_of_10k_characters_is_rejected(garbage: str):
    # How fast (linear, well under 1 ms per KB) is measured by bench/parse.py, not here.
    with pytest.raises(WorkflowError):
        parse(garbage[:10_000])


def test_names_that_only_contain_a_list_name_are_not_assignments():
    text = "my_model_id = [3]\nold_subtasks = ['x']\n" + format_workflow(CHAIN) + "\nsteps = [1]"
    assert parse(text) == CHAIN


def test_too_many_assignments_are_rejected():
    message = rejection("model_id = [0]\n" * 40)
    assert message.startswith("the text has more than 32 list assignments")
