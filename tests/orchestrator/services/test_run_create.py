"""run_create: what it refuses, what it stores, the event it publishes and when it enqueues."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from orchestrator.models import Run, RunEvent
from orchestrator.services import execution
from orchestrator.services.runs import run_create

QUESTION = (
    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?"
)


def error_fields(excinfo) -> set[str]:
    return set(excinfo.value.message_dict)


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(execution, "run_enqueue", lambda *, run_id: calls.append(run_id))
    return calls


def test_creates_a_queued_run_in_the_pools_project(
    sim_pool, reviewer, enqueued, sent_events, django_capture_on_commit_callbacks
):
    # The commit happens (its callbacks run), so an enqueue would be seen.
    with django_capture_on_commit_callbacks(execute=True):
        run = run_create(pool=sim_pool, input=f"  {QUESTION}  ", created_by=reviewer, enqueue=False)

    stored = Run.objects.get(pk=run.pk)
    assert stored.status == Run.Status.QUEUED
    assert stored.project_id == sim_pool.project_id
    assert stored.input == QUESTION
    assert stored.strategy == "conductor"
    assert stored.created_by == reviewer
    assert [event["status"] for event in sent_events] == ["queued"]
    assert enqueued == []  # enqueue=False: the caller (the CLI) executes the run itself


def test_publishes_queued_and_enqueues_only_after_commit(
    sim_pool, project_admin, enqueued, sent_events, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run = run_create(pool=sim_pool, input=QUESTION, created_by=project_admin)
        assert enqueued == [] and sent_events == []  # nothing leaves before the commit

    assert len(callbacks) == 2
    assert enqueued == [run.pk]
    assert sent_events == [{"type": "run.status", "run": run.pk, "seq": 1, "status": "queued"}]
    assert list(RunEvent.objects.filter(run=run).values_list("seq", "type")) == [(1, "run.status")]
    assert run.last_seq == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"input": "   "}, "input"),
        ({"strategy": "oracle"}, "strategy"),
        ({"strategy": "single", "strategy_options": {"temperature": 2}}, "strategy_options"),
        ({"strategy": "single", "strategy_options": {"worker": "x"}}, "strategy_options"),
        ({"strategy": "single", "strategy_options": {"worker": 9}}, "strategy_options"),
        ({"strategy": "moa", "strategy_options": {"proposers": [0, 7]}}, "strategy_options"),
        ({"strategy": "conductor", "strategy_options": {"worker": 1}}, "strategy_options"),
        ({"reference": "50", "grader": "vibes"}, "grader"),
    ],
)
def test_bad_input_is_refused_naming_the_field(sim_pool, reviewer, kwargs, field):
    arguments = {"pool": sim_pool, "input": QUESTION, "created_by": reviewer, **kwargs}
    with pytest.raises(ValidationError) as excinfo:
        run_create(**arguments)
    assert field in error_fields(excinfo)
    assert not Run.objects.exists()


def test_a_pool_without_enabled_workers_is_refused(sim_pool, reviewer):
    sim_pool.workers.update(enabled=False)
    with pytest.raises(ValidationError) as excinfo:
        run_create(pool=sim_pool, input=QUESTION, created_by=reviewer)
    assert error_fields(excinfo) == {"pool"}


def test_viewers_and_outsiders_may_not_start_runs(sim_pool, viewer, outsider):
    for user in (viewer, outsider):
        with pytest.raises(PermissionDenied):
            run_create(pool=sim_pool, input=QUESTION, created_by=user)
    assert not Run.objects.exists()


def test_superuser_and_the_cli_may_start_runs(sim_pool, superuser):
    assert run_create(pool=sim_pool, input=QUESTION, created_by=superuser, enqueue=False).pk
    assert run_create(pool=sim_pool, input=QUESTION, created_by=None, enqueue=False).pk


@pytest.mark.parametrize(
    ("reference", "grader"),
    [("50", "numeric"), ("-2.5", "numeric"), ("B", "choice"), ("Paris", "exact"), ("", "")],
)
def test_grader_is_chosen_from_the_reference_when_not_given(sim_pool, reviewer, reference, grader):
    # Not a question of the bundled suite, which would bring its own reference and grader.
    question = "How many cookies are left after the sale?"
    run = run_create(
        pool=sim_pool, input=question, reference=reference, created_by=reviewer, enqueue=False
    )
    assert run.grader == grader


def test_a_given_grader_is_kept(sim_pool, reviewer):
    run = run_create(
        pool=sim_pool,
        input=QUESTION,
        reference="50",
        grader="exact",
        created_by=reviewer,
        enqueue=False,
    )
    assert run.grader == "exact"
