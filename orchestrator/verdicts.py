"""What a run's outcome means, in one place: its verdict from its status and score, whether it is
right, and the same as a database query.

A run is right when it succeeded with a score of at least ``RIGHT_SCORE``, wrong when it
succeeded with a lower score, unscored when it succeeded without one (no reference, or it could
not be graded); failed, cancelled and pending (not finished) say themselves. The runs list's
filter, the API, batch outcomes, the scoreboard, experiments and the review queue all read it
from here.
"""

from __future__ import annotations

from typing import Final

from django.db.models import Q

from orchestrator.models import Run

VERDICTS: Final = ("right", "wrong", "unscored", "failed", "cancelled", "pending")
"""What a run's outcome is, at a glance: right or wrong against its reference, unscored (no
reference, or it could not be graded), failed (an error), cancelled, or pending (not finished)."""
RIGHT_SCORE: Final = 1.0
"""A score at least this high is right; graders give 1.0 or 0.0."""


def verdict(status: str, score: float | None) -> str:
    """A run's verdict (one of ``VERDICTS``) from its status and score."""
    if status in (Run.Status.FAILED, Run.Status.CANCELLED):
        return str(status)
    if status != Run.Status.SUCCEEDED:
        return "pending"
    if score is None:
        return "unscored"
    return "right" if score >= RIGHT_SCORE else "wrong"


def is_right(status: str, score: float | None) -> bool:
    """Whether a run's verdict is right."""
    return verdict(status, score) == "right"


def is_wrong_score(score: float | None) -> bool:
    """Whether a score (a grader's or a reviewer's) says wrong."""
    return score is not None and score < RIGHT_SCORE


def verdict_filter(verdict: str) -> Q:
    """The runs whose ``verdict`` is ``verdict``, as a query (no column stores it)."""
    succeeded = Q(status=Run.Status.SUCCEEDED)
    conditions = {
        "right": succeeded & Q(score__gte=RIGHT_SCORE),
        "wrong": succeeded & Q(score__lt=RIGHT_SCORE),
        "unscored": succeeded & Q(score__isnull=True),
        "failed": Q(status=Run.Status.FAILED),
        "cancelled": Q(status=Run.Status.CANCELLED),
        "pending": ~Q(status__in=Run.FINISHED),
    }
    if verdict not in conditions:
        raise ValueError(f"unknown verdict {verdict!r}; expected one of {', '.join(VERDICTS)}")
    return conditions[verdict]
