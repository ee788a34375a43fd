"""A batch replay through the production path: PostgreSQL, Redis and a real Celery worker.

Failed runs (their one step ran on a worker whose key is not set) are replayed with that worker
swapped for a simulated one: the batch task makes the replays on the worker process, chunk by
chunk, each replay executes there too, and the batch ends with every run fixed.
"""

from __future__ import annotations

import time

import pytest

from orchestrator import selectors
from orchestrator.models import Batch, BatchItem, Membership, Run, Step, Worker
from orchestrator.providers.simulator import load_suite
from orchestrator.services.batches import ADVANCE_CHUNK, batch_create
from orchestrator.services.pools import project_get_or_create
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_member, make_pool, make_worker

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

RUNS = ADVANCE_CHUNK + 5  # two chunks: the task sends itself again once
TIMEOUT = 120.0
ABSENT_KEY = "CONDUCTOR_TEST_BATCH_ABSENT_KEY"


def failed_sources(monkeypatch) -> tuple[list[Run], object]:
    monkeypatch.delenv(ABSENT_KEY, raising=False)
    project = project_get_or_create(name="Batch production path")
    pool = make_pool(project=project, workers=0)
    make_worker(
        pool=pool, name="Keyless", position=0, model="openai/gpt-4o-mini", api_key_env=ABSENT_KEY
    )
    make_worker(
        pool=pool,
        name="Simulated",
        position=1,
        params={"latency": 0.02, "skills": {"arithmetic": 1.0}},
    )
    tasks = [task for task in load_suite() if task.domain == "arithmetic"]
    runs = []
    for number in range(RUNS):
        task = tasks[number % len(tasks)]
        run = run_create(
            pool=pool,
            input=task.question,
            reference=task.reference,
            strategy="single",
            enqueue=False,
        )
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        runs.append(run)
    return runs, project


def test_a_batch_of_failed_runs_with_a_worker_override_runs_on_celery(
    start_celery_worker, monkeypatch
):
    sources, project = failed_sources(monkeypatch)
    assert {run.status for run in sources} == {Run.Status.FAILED}
    assert ABSENT_KEY in sources[0].error or ABSENT_KEY in Step.objects.get(run=sources[0]).error
    admin = make_member(project=project, role=Membership.Role.ADMIN)
    worker = start_celery_worker(concurrency=2)

    batch = batch_create(
        project=project,
        actor=admin,
        filters={"status": "failed", "worker": "Keyless"},
        override={"kind": "worker", "from": "Keyless", "to": "Simulated"},
    )

    deadline = time.monotonic() + TIMEOUT
    while True:
        entry = selectors.batch_summary(batch=selectors.batch_get(user=admin, batch_id=batch.pk))
        if entry["status"] == "finished":
            break
        assert time.monotonic() < deadline, (
            f"batch not finished: {entry['progress']}\n{worker.log()[-3000:]}"
        )
        time.sleep(0.2)

    assert entry["progress"] == {
        "total": RUNS,
        "replayed": RUNS,
        "not_replayed": 0,
        "finished": RUNS,
        "done": RUNS,
        "fraction": 1.0,
    }
    assert entry["aggregate"]["compared"] == RUNS
    assert entry["aggregate"]["before"]["failed"] == RUNS
    assert entry["aggregate"]["fixed"] == RUNS and entry["aggregate"]["after"]["right"] == RUNS
    simulated = Worker.objects.get(pool=sources[0].pool, name="Simulated")
    for item in BatchItem.objects.filter(batch=batch).select_related("replay"):
        assert item.replay.replay_of_id == item.source_id
        assert item.replay.status == Run.Status.SUCCEEDED and item.replay.score == 1.0
        assert list(Step.objects.filter(run=item.replay).values_list("worker_id", flat=True)) == [
            simulated.pk
        ]
    assert Batch.objects.get(pk=batch.pk).status == Batch.Status.CREATED
    log = worker.log()
    assert log.count("batch_advance_task[") >= 2, "the task made the replays in two chunks"
