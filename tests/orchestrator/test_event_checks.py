"""The schema check of ``tests/conftest.py`` sees every event a run stores, whichever way the
recorder stored it (one by one, held and inserted together, or in one statement on PostgreSQL:
``tests/production/test_event_checks_postgres.py`` runs these there), and cancels and review
changes, which services publish."""

from __future__ import annotations

import pytest

from orchestrator.models import RunEvent
from orchestrator.services.review import comment_create
from orchestrator.services.runs import run_cancel, run_create, run_execute
from tests import conftest

QUESTION = "What is 6 times 7?"


def stored_seqs(run_id: int) -> list[int]:
    return list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True)
    )


def checked_seqs(run_id: int) -> list[int]:
    return sorted(event["seq"] for event in conftest.checked_events if event["run"] == run_id)


@pytest.mark.parametrize("strategy", ["single", "conductor", "reflection", "moa"])
@pytest.mark.django_db(transaction=True)
def test_every_event_an_execution_stores_is_checked(sim_pool, strategy):
    run = run_create(pool=sim_pool, input=QUESTION, strategy=strategy, enqueue=False)
    run_execute(run_id=run.pk)

    stored = stored_seqs(run.pk)
    assert len(stored) >= 6  # queued, running, a plan, steps started and finished, finished
    assert checked_seqs(run.pk) == stored


@pytest.mark.django_db(transaction=True)
def test_a_cancel_and_a_comment_are_checked_too(sim_pool, reviewer):
    run = run_create(pool=sim_pool, input=QUESTION, strategy="single", enqueue=False)
    run_cancel(run_id=run.pk)
    comment_create(actor=reviewer, run=run, body="Looks cancelled")

    stored = stored_seqs(run.pk)
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert "run.finished" in types and "comment.created" in types
    assert checked_seqs(run.pk) == stored
