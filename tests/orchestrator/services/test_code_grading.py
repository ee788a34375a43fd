"""Runs graded by code: who may set a code reference, how a code run is scored through the
sandbox, and how a refusal (code grading off, no sandbox) shows on the run instead of a 0."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from orchestrator.engine import sandbox
from orchestrator.engine.grading import extract_answer
from orchestrator.models import Run, RunEvent
from orchestrator.providers.simulator.solving import is_correct
from orchestrator.services.runs import run_create
from tests.orchestrator.services.conftest import CODE_TASK, code_run


def set_code_skill(pool, skill: float) -> None:
    """Every worker of the pool writes the right implementation (1.0) or a known bug (0.0)."""
    for worker in pool.workers.all():
        worker.params = {**worker.params, "skills": {"code": skill}}
        worker.save(update_fields=["params"])


# Who may set a code reference ---------------------------------------------------------------------


def test_reviewers_may_not_set_a_code_reference(sim_pool, reviewer):
    with pytest.raises(PermissionDenied, match="Only admins of the project may set a code grader"):
        code_run(sim_pool, created_by=reviewer)
    assert not Run.objects.exists()


def test_project_admins_superusers_and_the_cli_may(
    code_sandbox, sim_pool, project_admin, superuser
):
    for user in (project_admin, superuser, None):
        assert code_run(sim_pool, created_by=user).grader == "code"


def test_reviewers_keep_every_other_grader(sim_pool, reviewer):
    run = run_create(
        pool=sim_pool, input="2+2?", reference="4", grader="numeric", created_by=reviewer,
        enqueue=False,
    )  # fmt: skip
    assert run.grader == "numeric"


# Refused up front ---------------------------------------------------------------------------------


def test_a_code_reference_is_refused_when_code_grading_is_off(sim_pool, project_admin, settings):
    settings.CONDUCTOR_CODE_GRADING = "off"
    with pytest.raises(ValidationError) as excinfo:
        code_run(sim_pool, created_by=project_admin)
    assert excinfo.value.message_dict["grader"] == [
        "Code grading is turned off on this server (CONDUCTOR_CODE_GRADING=off)."
    ]


def test_a_code_reference_is_refused_where_the_sandbox_cannot_run(
    sim_pool, project_admin, monkeypatch, tmp_path
):
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "bwrap"))
    sandbox.forget_probe()
    try:
        with pytest.raises(ValidationError) as excinfo:
            code_run(sim_pool, created_by=project_admin)
    finally:
        monkeypatch.undo()
        sandbox.forget_probe()
    (message,) = excinfo.value.message_dict["grader"]
    assert "apt-get install bubblewrap" in message and "CONDUCTOR_CODE_GRADING=off" in message


@pytest.mark.parametrize(
    "reference, says",
    [
        ("4", "The reference has no test to run"),
        ("assert add(1, 2) ==", "The reference is not valid Python: line 1"),
    ],
)
def test_a_code_reference_that_cannot_run_is_refused_naming_the_field(
    code_sandbox, sim_pool, project_admin, reference, says
):
    with pytest.raises(ValidationError) as excinfo:
        run_create(
            pool=sim_pool, input="Write add(a, b).", reference=reference, grader="code",
            created_by=project_admin, enqueue=False,
        )  # fmt: skip
    (message,) = excinfo.value.message_dict["reference"]
    assert message.startswith(says)
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "reference",
    [
        "import unittest\nfrom solution import *\n\n\nclass T(unittest.TestCase):\n"
        "    def test_it(self):\n        self.assertTrue(callable(sum_multiples))\n\n\n"
        "unittest.main()\n",
        ">>> callable(sum_multiples)\nTrue\n",
    ],
    ids=["unittest-main", "doctest"],
)
def test_references_as_people_write_them_score_a_right_run(
    code_sandbox, sim_pool, execute, project_admin, reference
):
    set_code_skill(sim_pool, 1.0)
    run = run_create(
        pool=sim_pool, input=CODE_TASK.question, strategy="single", reference=reference,
        grader="code", created_by=project_admin, enqueue=False,
    )  # fmt: skip
    run = execute(run)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.score == 1.0 and run.error == ""


# Scored at the end of the run ---------------------------------------------------------------------


@pytest.mark.parametrize("skill, score", [(1.0, 1.0), (0.0, 0.0)], ids=["right", "buggy"])
def test_a_code_run_is_scored_by_running_the_tests_in_the_sandbox(
    code_sandbox, sim_pool, execute, skill, score
):
    set_code_skill(sim_pool, skill)
    run = execute(code_run(sim_pool))

    assert run.status == Run.Status.SUCCEEDED, run.error
    # The simulator knows its answer is its reference implementation or one of its known bugs;
    # the score comes from running the task's tests against that code.
    assert is_correct(CODE_TASK, extract_answer(run.answer, kind="code")) is (score == 1.0)
    assert run.score == score and run.error == ""


def test_a_run_whose_grading_is_refused_shows_why_and_has_no_score(
    code_sandbox, sim_pool, execute, settings
):
    set_code_skill(sim_pool, 1.0)
    run = code_run(sim_pool)
    settings.CONDUCTOR_CODE_GRADING = "off"  # turned off after the run was created
    run = execute(run)

    assert run.status == Run.Status.SUCCEEDED
    assert run.answer
    assert run.score is None
    assert run.error == (
        "Not graded: Code grading is turned off on this server (CONDUCTOR_CODE_GRADING=off)."
    )
    finished = RunEvent.objects.filter(run=run).order_by("seq").last().data
    assert finished["type"] == "run.finished"
    assert finished["score"] is None and finished["error"] == run.error


def test_a_run_graded_without_a_sandbox_shows_how_to_enable_it(
    code_sandbox, sim_pool, execute, monkeypatch, tmp_path
):
    set_code_skill(sim_pool, 1.0)
    run = code_run(sim_pool)
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "bwrap"))  # removed after creation
    run = execute(run)

    assert run.status == Run.Status.SUCCEEDED
    assert run.score is None
    assert run.error.startswith("Not graded: ")
    assert "apt-get install bubblewrap" in run.error
