"""The event log: per-run seq without gaps, sending only after commit, replay after a seq."""

from __future__ import annotations

import pytest
from django.db import transaction

from orchestrator import events, selectors, wire
from orchestrator.models import RunEvent
from tests.factories import make_plan, make_run, make_step


@pytest.fixture
def run(sim_pool):
    return make_run(pool=sim_pool)


def test_seq_increases_by_one_per_run(sim_pool, run):
    other = make_run(pool=sim_pool)
    first = events.publish(run.pk, wire.RUN_STATUS, {"status": "planning"})
    events.publish(other.pk, wire.RUN_STATUS, {"status": "planning"})
    second = events.publish(run.pk, wire.RUN_STATUS, {"status": "running"})

    assert (first["seq"], second["seq"]) == (1, 2)
    assert first == {"type": "run.status", "run": run.pk, "seq": 1, "status": "planning"}
    run.refresh_from_db()
    assert run.last_seq == 2
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2]


def test_events_are_sent_only_after_commit(run, sent_events, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        event = events.publish(run.pk, wire.RUN_STATUS, {"status": "running"})
        assert sent_events == []
    assert sent_events == [event]


def test_a_rolled_back_event_is_neither_stored_nor_sent(
    run, sent_events, django_capture_on_commit_callbacks
):
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        events.publish(run.pk, wire.RUN_STATUS, {"status": "running"})
        raise RuntimeError("the change failed")
    assert sent_events == []
    assert not RunEvent.objects.filter(run=run).exists()
    assert events.publish(run.pk, wire.RUN_STATUS, {"status": "running"})["seq"] == 1


def test_unknown_event_types_are_refused(run):
    with pytest.raises(ValueError):
        events.publish(run.pk, "step.exploded", {})


def test_events_after_gives_what_a_client_missed(run):
    for status in ("planning", "running", "planning"):
        events.publish(run.pk, wire.RUN_STATUS, {"status": status})
    missed = selectors.run_events_after(run_id=run.pk, seq=1)
    assert [(e["seq"], e["status"]) for e in missed] == [(2, "running"), (3, "planning")]
    assert selectors.run_events_after(run_id=run.pk, seq=3) == []


def test_snapshot_has_the_run_its_plans_and_steps(run):
    make_plan(run=run, workflow=[])
    step = make_step(run=run, messages=[{"role": "user", "content": "big"}], response="long")

    state = selectors.run_snapshot(run=run)

    assert state["run"]["id"] == run.pk and state["run"]["status"] == "queued"
    assert state["plans"][0]["accepts"] is True
    assert state["steps"] == [wire.step_data(step)]
    assert "messages" not in state["steps"][0] and "response" not in state["steps"][0]


def test_snapshot_steps_are_step_data_in_run_order(run):
    from django.utils import timezone

    later = make_step(run=run, round=1, index=0, status="failed", error="timed out")
    first = make_step(
        run=run,
        round=0,
        index=0,
        status="succeeded",
        tokens_in=12,
        tokens_out=5,
        cost=0.25,
        latency=1.5,
        attempts=2,
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    second = make_step(run=run, round=0, index=1, access=[0], reads=[first.pk], reused_from=first)
    for step in (first, second, later):
        step.refresh_from_db()

    steps = selectors.run_snapshot(run=run)["steps"]

    assert steps == [wire.step_data(first), wire.step_data(second), wire.step_data(later)]
    assert steps[0]["finished_at"] and steps[1]["reads"] == [first.pk]
