"""A replay on the production path: enqueued on a Celery worker like any run, on PostgreSQL, and
resumed by another worker after the first is killed mid-replay without calling again a step it
finished or one it reused from its source."""

from __future__ import annotations

from collections import Counter

import pytest

from orchestrator import wire
from orchestrator.models import Membership, Run, Step
from orchestrator.services.replay import replay_create
from tests.factories import make_member
from tests.production.test_celery_path import (
    enqueued_code_run,
    stored_events,
    wait_for,
    wait_until_finished,
)

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


def test_replay_runs_on_a_worker_and_resumes_after_a_kill_reusing_what_it_may(
    start_celery_worker,
):
    first = start_celery_worker()
    source = enqueued_code_run(latency=0.5)  # plan, implement, review: one after another
    wait_until_finished(source, what="the source run")
    assert source.status == Run.Status.SUCCEEDED, source.error
    source_steps = list(Step.objects.filter(run=source, round=0).order_by("index"))
    assert len(source_steps) == 3
    admin = make_member(project=source.project, role=Membership.Role.ADMIN)

    replay = replay_create(
        source=source,
        actor=admin,
        edits=[{"step": source_steps[1].pk, "instruction": "Implement it again, carefully."}],
    )

    def edited_step_done():
        return Step.objects.filter(
            run=replay, round=0, index=1, status=Step.Status.SUCCEEDED
        ).first()

    wait_for(edited_step_done, timeout=45, what="the edited step of the replay")
    first.kill()
    replay.refresh_from_db()
    assert not replay.is_finished, "the replay finished before the kill; it proves nothing"
    edited = edited_step_done()

    second = start_celery_worker()
    wait_until_finished(replay, what="the replay to finish on the second worker")
    assert replay.status == Run.Status.SUCCEEDED, replay.error
    assert "run_execute_task" in second.log()

    steps = list(Step.objects.filter(run=replay, round=0).order_by("index"))
    assert steps[0].reused_from_id == source_steps[0].pk
    assert steps[0].response == source_steps[0].response
    assert [s.reused_from_id for s in steps[1:]] == [None, None]
    assert steps[1].pk == edited.pk and steps[1].response == edited.response
    stored = stored_events(replay.pk)
    started = Counter(e["step"]["id"] for e in stored if e["type"] == wire.STEP_STARTED)
    assert started[steps[0].pk] == 0, "the reused step was never sent to its model"
    assert started[steps[1].pk] == 1, "the step finished before the kill was not sent again"
    # The step that was running when the worker died is sent again (its call was lost).
    finished = Counter(e["step"]["id"] for e in stored if e["type"] == wire.STEP_FINISHED)
    assert started[steps[2].pk] >= 1 and finished[steps[2].pk] == 1
    assert finished[steps[0].pk] == 0 and finished[steps[1].pk] == 1
    assert [event["seq"] for event in stored] == list(range(1, replay.last_seq + 1))
    # Its totals are its own calls: the two steps it ran, and the conductor's if it was asked
    # about a later round (the final answer changed).
    later_plans = [p for p in replay.plans.filter(round__gt=0) if p.reused_from_id is None]
    conductor_calls = sum(len(plan.attempts) for plan in later_plans)
    assert replay.model_calls == 2 + conductor_calls
