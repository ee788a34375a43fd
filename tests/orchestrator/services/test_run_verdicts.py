"""Right or wrong at a glance: a run's verdict, the answer shown, a suite question scored
without a reference, and the list filters by verdict and by worker."""

from __future__ import annotations

import pytest

from orchestrator import selectors, verdicts, wire
from orchestrator.models import RunEvent
from orchestrator.providers.simulator import load_suite
from orchestrator.services.runs import run_create
from tests.factories import make_run, make_step

LOOKUP = next(
    task for task in load_suite() if task.question == "What is the capital city of Turkey?"
)
ARITHMETIC = next(task for task in load_suite() if task.domain == "arithmetic")


@pytest.mark.parametrize(
    ("status", "score", "expected"),
    [
        ("succeeded", 1.0, "right"),
        ("succeeded", 0.0, "wrong"),
        ("succeeded", 0.5, "wrong"),
        ("succeeded", None, "unscored"),
        ("failed", None, "failed"),
        ("failed", 1.0, "failed"),
        ("cancelled", None, "cancelled"),
        ("running", None, "pending"),
        ("queued", None, "pending"),
    ],
)
def test_verdict_of_status_and_score(status, score, expected):
    assert verdicts.verdict(status, score) == expected
    assert expected in verdicts.VERDICTS


@pytest.mark.parametrize(
    ("answer", "grader", "shown"),
    [
        ("[simulated sim/summit] Checked the sum.\nWork: 5 * 16 - 30\nAnswer: 50", "numeric", "50"),
        ("I think so.\n**Answer:** Istanbul", "exact", "Istanbul"),
        ("Warsaw", "", "Warsaw"),
        ("Here:\n```python\ndef f(x):\n    return x\n```", "code", "def f(x):"),
        ("", "exact", ""),
    ],
)
def test_answer_shown_is_what_the_grader_reads(answer, grader, shown):
    assert wire.answer_shown(answer, grader) == shown


def test_a_long_answer_is_cut():
    shown = wire.answer_shown("Answer: " + "x" * 500)
    assert len(shown) == wire.ANSWER_SHOWN_CHARS and shown.endswith("…")


def test_a_suite_question_is_scored_against_the_suite(sim_pool, reviewer):
    run = run_create(
        pool=sim_pool, input=f" {LOOKUP.question}\n", created_by=reviewer, enqueue=False
    )
    assert (run.reference, run.grader) == (LOOKUP.reference, "exact")
    match = selectors.reference_for_question(question=run.input)
    assert match is not None and match.source == f"bundled suite, task {LOOKUP.id}"


def test_a_given_reference_wins_over_the_suite(sim_pool, reviewer):
    run = run_create(
        pool=sim_pool, input=ARITHMETIC.question, reference="7", created_by=reviewer, enqueue=False
    )
    assert (run.reference, run.grader) == ("7", "numeric")


def test_another_question_stays_unscored(sim_pool, reviewer):
    run = run_create(pool=sim_pool, input="What is love?", created_by=reviewer, enqueue=False)
    assert (run.reference, run.grader) == ("", "")


def test_an_executed_wrong_answer_is_wrong_in_its_events(sim_pool, reviewer, execute):
    run = run_create(
        pool=sim_pool,
        input=LOOKUP.question,
        reference="Ankara-not-this",
        grader="exact",
        strategy="single",
        created_by=reviewer,
        enqueue=False,
    )
    run = execute(run)
    finished = list(
        RunEvent.objects.filter(run=run, type=wire.RUN_FINISHED).values_list("data", flat=True)
    )
    assert run.score == 0.0
    assert finished[-1]["verdict"] == "wrong"
    assert finished[-1]["answer_shown"] == wire.answer_shown(run.answer, "exact")
    assert finished[-1]["answer_shown"] and "\n" not in finished[-1]["answer_shown"]


def test_run_list_filters_by_verdict(sim_pool, reviewer):
    right = make_run(pool=sim_pool, status="succeeded", score=1.0)
    wrong = make_run(pool=sim_pool, status="succeeded", score=0.0)
    unscored = make_run(pool=sim_pool, status="succeeded")
    failed = make_run(pool=sim_pool, status="failed", error="boom")
    running = make_run(pool=sim_pool, status="running")
    expected = {"right": right, "wrong": wrong, "unscored": unscored, "failed": failed}
    for verdict, run in expected.items():
        found = list(selectors.run_list(user=reviewer, verdict=verdict))
        assert found == [run], verdict
    assert list(selectors.run_list(user=reviewer, verdict="pending")) == [running]


def test_worker_filter_is_a_substring_of_name_or_model_in_any_case(sim_pool, reviewer):
    summit = make_run(pool=sim_pool)
    make_step(run=summit, worker_name="Summit (simulated)", model="sim/summit")
    other = make_run(pool=sim_pool)
    make_step(run=other, worker_name="Abacus (simulated)", model="sim/abacus")
    for text in ("Summit", "summit", "sim/SUMMIT", "mit (sim"):
        assert list(selectors.run_list(user=reviewer, worker=text)) == [summit], text
    assert set(selectors.run_list(user=reviewer, worker="sim/")) == {summit, other}


OUTCOMES = [
    ("succeeded", 1.0),
    ("succeeded", 0.5),
    ("succeeded", 0.0),
    ("succeeded", None),
    ("failed", None),
    ("cancelled", None),
    ("running", None),
]


def test_the_list_filter_batches_and_the_review_queue_agree_on_right_and_wrong(sim_pool, reviewer):
    """One meaning of a run's outcome: each place that tells right from wrong tells it alike."""
    runs = {
        make_run(pool=sim_pool, status=status, score=score).pk: (status, score)
        for status, score in OUTCOMES
    }
    for verdict in verdicts.VERDICTS:
        filtered = set(
            selectors.run_list(user=reviewer)
            .filter(verdicts.verdict_filter(verdict))
            .values_list("pk", flat=True)
        )
        assert filtered == {
            pk for pk, outcome in runs.items() if verdicts.verdict(*outcome) == verdict
        }
    for pk, (status, score) in runs.items():
        row = selectors.run_list(user=reviewer).get(pk=pk)
        assert wire.batch_run_data(row)["outcome"] == verdicts.verdict(status, score)
    queued = set(
        selectors.review_queue(
            user=reviewer, state="all", threshold=selectors.REVIEW_SCORE_THRESHOLD
        ).values_list("pk", flat=True)
    )
    wanting_review = {
        pk for pk, outcome in runs.items() if verdicts.verdict(*outcome) in ("wrong", "failed")
    }
    assert queued == wanting_review  # a half score is wrong here too
