"""Comparing runs (``selectors.run_compare``, ``orchestrator/comparing.py``): alignment by
(round, index), each change kind, word diffs, the outcome table, and who may compare what."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import comparing, selectors
from orchestrator.models import Run
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_pool, make_run, make_step

pytestmark = pytest.mark.django_db


def by_position(comparison) -> dict[tuple[int, int], dict]:
    return {(row["round"], row["index"]): row for row in comparison["steps"]}


def joined(parts, *, without: str) -> str:
    return "".join(part["text"] for part in parts if part["op"] != without)


@pytest.fixture
def two_runs(sim_pool):
    """Two stored runs of four and four positions: one the same, one changed, one removed, one
    added, and the same last round."""
    first = make_run(pool=sim_pool, status=Run.Status.SUCCEEDED)
    second = make_run(pool=sim_pool, status=Run.Status.SUCCEEDED)
    common = {"worker_name": "Swift", "status": "succeeded", "response": "Forty."}
    make_step(run=first, index=0, instruction="Read the question.", access=[], **common)
    make_step(run=second, index=0, instruction="Read the question.", access=[], **common)
    make_step(
        run=first,
        index=1,
        instruction="Add 17 and 23 carefully.",
        worker_name="Swift",
        access=[0],
        status="succeeded",
        response="The sum is 40.",
    )
    make_step(
        run=second,
        index=1,
        instruction="Multiply 17 and 23.",
        worker_name="Deep Thinker",
        access="all",
        status="succeeded",
        response="The product is 391.",
    )
    make_step(run=first, index=2, instruction="Check the sum.", access=[1], **common)
    make_step(run=first, round=1, index=0, instruction="Answer.", access=[], **common)
    make_step(run=second, round=1, index=0, instruction="Answer.", access=[], **common)
    make_step(run=second, round=1, index=1, instruction="Explain the answer.", access=[0], **common)
    return first, second


def test_steps_align_by_round_and_index_and_each_position_is_marked(two_runs):
    first, second = two_runs
    comparison = selectors.run_compare(runs=[first, second])

    assert [(row["round"], row["index"], row["change"]) for row in comparison["steps"]] == [
        (0, 0, "same"),
        (0, 1, "changed"),
        (0, 2, "removed"),
        (1, 0, "same"),
        (1, 1, "added"),
    ]
    assert comparison["counts"] == {"same": 2, "changed": 1, "added": 1, "removed": 1}
    rows = by_position(comparison)
    removed, added = rows[(0, 2)], rows[(1, 1)]
    assert removed["steps"][1] is None and removed["steps"][0]["instruction"] == "Check the sum."
    assert added["steps"][0] is None and added["steps"][1]["instruction"] == "Explain the answer."
    assert rows[(0, 0)]["changes"] == [None, "same"] and rows[(0, 0)]["diffs"] == [None, None]
    assert [run["run"]["id"] for run in comparison["runs"]] == [first.pk, second.pk]


def test_a_changed_step_carries_word_diffs_of_instruction_worker_access_and_response(two_runs):
    diff = by_position(selectors.run_compare(runs=list(two_runs)))[(0, 1)]["diffs"][1]

    assert diff["changed"] == ["instruction", "worker", "access", "response"]
    assert diff["instruction"] == [
        {"op": "delete", "text": "Add"},
        {"op": "insert", "text": "Multiply"},
        {"op": "equal", "text": " 17 and 23"},
        {"op": "delete", "text": " carefully"},
        {"op": "equal", "text": "."},
    ]
    assert diff["worker"] == [
        {"op": "delete", "text": "Swift"},
        {"op": "insert", "text": "Deep Thinker"},
    ]
    assert diff["access"] == [{"op": "delete", "text": "0"}, {"op": "insert", "text": "all"}]
    assert diff["response"] == [
        {"op": "equal", "text": "The "},
        {"op": "delete", "text": "sum"},
        {"op": "insert", "text": "product"},
        {"op": "equal", "text": " is "},
        {"op": "delete", "text": "40"},
        {"op": "insert", "text": "391"},
        {"op": "equal", "text": "."},
    ]


def test_a_step_that_only_failed_differently_is_changed_with_its_fields_kept(sim_pool):
    first, second = make_run(pool=sim_pool), make_run(pool=sim_pool)
    make_step(run=first, instruction="Solve it.", status="succeeded", response="")
    make_step(run=second, instruction="Solve it.", status="failed", error="Timed out.")

    row = selectors.run_compare(runs=[first, second])["steps"][0]

    assert row["change"] == "changed"
    assert row["diffs"][1]["changed"] == ["status", "error"]
    assert row["diffs"][1]["instruction"] == [{"op": "equal", "text": "Solve it."}]
    assert row["diffs"][1]["response"] == []


def test_three_runs_are_each_marked_against_the_first(sim_pool):
    first, second, third = (make_run(pool=sim_pool) for _ in range(3))
    make_step(run=first, index=0, instruction="Plan.")
    make_step(run=second, index=0, instruction="Plan.")
    make_step(run=third, index=0, instruction="Plan it.")
    make_step(run=first, index=1, instruction="Do.")
    make_step(run=third, index=1, instruction="Do.")
    make_step(run=third, index=2, instruction="Check.")

    rows = by_position(selectors.run_compare(runs=[first, second, third]))

    assert rows[(0, 0)]["changes"] == [None, "same", "changed"]
    assert rows[(0, 0)]["change"] == "changed"
    assert rows[(0, 0)]["diffs"][1] is None and rows[(0, 0)]["diffs"][2] is not None
    assert rows[(0, 1)]["changes"] == [None, "removed", "same"]
    assert rows[(0, 1)]["change"] == "changed"
    assert rows[(0, 2)]["changes"] == [None, None, "added"]
    assert rows[(0, 2)]["change"] == "added"

    # The compare page embeds the same marks without the word diffs (it asks the API for those).
    page = selectors.compare_page_state(runs=[first, second, third])["comparison"]["steps"]
    assert [(r["round"], r["index"], r["change"], r["changes"]) for r in page] == [
        (key[0], key[1], row["change"], row["changes"]) for key, row in sorted(rows.items())
    ]
    assert all("diffs" not in row for row in page)


def test_a_conductor_run_and_a_moa_run_of_the_same_question(sim_pool):
    """The common case: two strategies answer one question with different numbers of steps."""
    question, reference = "What is 17 * 23?", "391"
    conductor = run_create(pool=sim_pool, input=question, reference=reference, enqueue=False)
    moa = run_create(
        pool=sim_pool, input=question, reference=reference, strategy="moa", enqueue=False
    )
    run_execute(run_id=conductor.pk)
    run_execute(run_id=moa.pk)
    conductor, moa = Run.objects.get(pk=conductor.pk), Run.objects.get(pk=moa.pk)
    positions = {run.pk: set(run.steps.values_list("round", "index")) for run in (conductor, moa)}
    assert positions[conductor.pk] != positions[moa.pk]  # the case this test is about

    comparison = selectors.run_compare(runs=[conductor, moa])

    rows = by_position(comparison)
    assert set(rows) == positions[conductor.pk] | positions[moa.pk]
    for position, row in rows.items():
        in_first, in_second = position in positions[conductor.pk], position in positions[moa.pk]
        expected = {(True, False): "removed", (False, True): "added"}.get((in_first, in_second))
        if expected:
            assert row["change"] == expected, position
        else:
            assert row["change"] in ("same", "changed"), position
            assert (row["diffs"][1] is None) == (row["change"] == "same")
    assert sum(comparison["counts"].values()) == len(rows)
    outcome = {line["key"]: line for line in comparison["outcome"]}
    assert outcome["step_count"]["values"] == [conductor.step_count, moa.step_count]
    assert outcome["model_calls"]["values"] == [conductor.model_calls, moa.model_calls]
    assert outcome["tokens"]["values"] == [
        conductor.tokens_in + conductor.tokens_out,
        moa.tokens_in + moa.tokens_out,
    ]
    assert outcome["answer"]["values"] == [conductor.answer, moa.answer]
    assert [run["run"]["strategy"] for run in comparison["runs"]] == ["conductor", "moa"]


def test_the_outcome_table_marks_what_differs_and_by_how_much(sim_pool):
    first = make_run(
        pool=sim_pool,
        status="succeeded",
        answer="The answer is 391.",
        score=1.0,
        tokens_in=100,
        tokens_out=20,
        cost=0.5,
        model_calls=4,
        wall_time=2.0,
    )
    second = make_run(
        pool=sim_pool,
        status="failed",
        answer="The answer is 40.",
        score=0.0,
        tokens_in=100,
        tokens_out=20,
        cost=0.25,
        model_calls=6,
        wall_time=None,
    )

    outcome = {line["key"]: line for line in selectors.run_compare(runs=[first, second])["outcome"]}

    assert list(outcome) == [
        "status",
        "answer",
        "score",
        "tokens",
        "cost",
        "model_calls",
        "wall_time",
        "step_count",
    ]
    assert outcome["tokens"]["differs"] == [False, False] and outcome["tokens"]["values"] == [
        120,
        120,
    ]
    assert outcome["model_calls"]["differs"] == [False, True]
    assert outcome["model_calls"]["deltas"] == [0, 2]
    assert outcome["cost"]["deltas"] == [0, -0.25]
    assert outcome["score"]["deltas"] == [0, -1.0]
    assert outcome["wall_time"]["values"] == [2.0, None]
    assert outcome["wall_time"]["deltas"] == [0, None]
    assert outcome["status"]["differs"] == [False, True]
    assert outcome["answer"]["diffs"] == [
        None,
        [
            {"op": "equal", "text": "The answer is "},
            {"op": "delete", "text": "391"},
            {"op": "insert", "text": "40"},
            {"op": "equal", "text": "."},
        ],
    ]


def test_runs_to_compare_keeps_the_order_and_refuses_any_run_the_user_cannot_see(
    sim_pool, viewer, outsider
):
    elsewhere = make_pool(project=outsider.memberships.get().project)
    first, second = make_run(pool=sim_pool), make_run(pool=sim_pool)
    theirs = make_run(pool=elsewhere)

    found = selectors.runs_to_compare(user=viewer, run_ids=[second.pk, first.pk])
    assert [run.pk for run in found] == [second.pk, first.pk]
    assert selectors.runs_to_compare(user=viewer, run_ids=[first.pk, theirs.pk]) is None
    assert selectors.runs_to_compare(user=outsider, run_ids=[first.pk, theirs.pk]) is None
    assert selectors.runs_to_compare(user=viewer, run_ids=[first.pk, 999_999]) is None


def test_a_comparison_reads_a_constant_number_of_queries(sim_pool, django_assert_max_num_queries):
    runs = [make_run(pool=sim_pool) for _ in range(2)]
    for run in runs:
        for index in range(30):
            make_step(run=run, index=index, response=f"Answer {index} of run {run.pk}")
    runs = list(Run.objects.select_related("pool").filter(pk__in=[r.pk for r in runs]))

    with django_assert_max_num_queries(1):
        comparison = selectors.run_compare(runs=runs)
    assert comparison["counts"]["changed"] == 30


# Word diffs --------------------------------------------------------------------------------------

WORD_PAIR = re.compile(r"\w\w")
words = st.lists(
    st.one_of(
        st.sampled_from(
            ["the", "sum", "17", "23", "é", "ok", "\n", "  ", ",", ".", "naïve", "日本"]
        ),
        st.text(max_size=6),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(old=words, new=words)
def test_a_word_diff_gives_back_both_texts_and_never_splits_a_word(old, new):
    parts = comparing.WordDiffer().diff(old, new)

    assert joined(parts, without="insert") == old
    assert joined(parts, without="delete") == new
    assert all(part["text"] for part in parts)
    assert all(a["op"] != b["op"] for a, b in zip(parts, parts[1:], strict=False))
    # A changed part starts and ends on word boundaries: never a word cut in two.
    position = {"delete": 0, "insert": 0}
    texts = {"delete": old, "insert": new}
    for part in parts:
        sides = ["delete", "insert"] if part["op"] == "equal" else [part["op"]]
        for side in sides:
            start, end = position[side], position[side] + len(part["text"])
            if part["op"] != "equal":
                text = texts[side]
                assert not (start > 0 and WORD_PAIR.fullmatch(text[start - 1 : start + 1]))
                assert not (end < len(text) and WORD_PAIR.fullmatch(text[end - 1 : end + 1]))
            position[side] = end


def test_once_the_time_budget_is_spent_a_changed_text_is_shown_replaced_whole():
    now = [0.0]
    differ = comparing.WordDiffer(budget=1.0, clock=lambda: now[0])
    assert differ.diff("one two", "one three") == [
        {"op": "equal", "text": "one "},
        {"op": "delete", "text": "two"},
        {"op": "insert", "text": "three"},
    ]
    now[0] = 1.0
    assert differ.diff("one two", "one three") == [
        {"op": "delete", "text": "one two"},
        {"op": "insert", "text": "one three"},
    ]
    assert differ.diff("same", "same") == [{"op": "equal", "text": "same"}]
