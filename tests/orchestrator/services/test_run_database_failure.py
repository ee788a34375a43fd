"""An execution whose database fails: what it stored goes out before the run's end."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError

from orchestrator import wire
from orchestrator.models import Run
from orchestrator.services import recording, runs
from orchestrator.services.runs import run_create, run_execute_async

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_db_connections_closed"),
]


async def test_a_database_failure_sends_what_was_stored_before_run_finished(
    sim_pool, sent_events, monkeypatch
):
    # The sender would otherwise send the stored event soon after its commit, racing the end.
    monkeypatch.setattr(recording, "SEND_WINDOW_SECONDS", 3600.0)

    async def execute_run(*, observer, **kwargs) -> None:
        await observer.planning(0)  # stored; its live event not sent yet
        raise OperationalError("the database went away")

    monkeypatch.setattr(runs, "execute_run", execute_run)
    run = await sync_to_async(run_create)(pool=sim_pool, input="What is 2 + 2?", enqueue=False)

    with pytest.raises(OperationalError):
        await run_execute_async(run_id=run.pk)

    await run.arefresh_from_db()
    assert run.status == Run.Status.FAILED
    seqs = [event["seq"] for event in sent_events]
    assert seqs == sorted(seqs)
    assert sent_events[-1]["type"] == wire.RUN_FINISHED
    assert [event["status"] for event in sent_events] == ["queued", "planning", "failed"]
