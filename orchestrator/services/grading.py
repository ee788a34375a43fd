"""Grading a run's final answer against its reference, and whether code can be graded here."""

from __future__ import annotations

from django.conf import settings

from orchestrator.engine.grading import GradingUnavailable, extract_answer, grade
from orchestrator.engine.sandbox import sandbox_problem

CODE_GRADING_OFF = "Code grading is turned off on this server (CONDUCTOR_CODE_GRADING=off)."


def code_grading_problem() -> str | None:
    """Why code references cannot be graded on this server (turned off, or no sandbox), said so
    that an operator knows what to do; None when they can."""
    if settings.CONDUCTOR_CODE_GRADING == "off":
        return CODE_GRADING_OFF
    return sandbox_problem()


def grade_answer(*, answer: str, reference: str, grader: str) -> float:
    """The score of a final answer against a reference under ``grader``.

    Raises GradingUnavailable when a code answer cannot be graded here: it is never run outside
    the sandbox, and a refusal is not a wrong answer."""
    if grader == "code" and settings.CONDUCTOR_CODE_GRADING == "off":
        raise GradingUnavailable(CODE_GRADING_OFF)
    return grade(extract_answer(answer, kind=grader), reference, grader)
