"""An experiment on the production path: PostgreSQL, Redis and real Celery worker processes.

Its slices (several ``experiment_execute_task`` messages) share the trials across two worker
processes; every item × arm runs once. A worker killed with SIGKILL mid-experiment loses
nothing: the slices are delivered again to another worker, which finishes the experiment
without running a finished item again.
"""

from __future__ import annotations

import time

import pytest
from django.db.models import Count

from orchestrator.models import Experiment, Run, Step, Trial
from orchestrator.providers.simulator import demo_pool
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.experiments import experiment_create, parse_arms
from orchestrator.services.pools import pool_sync_from_data, project_get_or_create

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

TIMEOUT = 120.0


def suite_experiment(*, latency: float, sample: int) -> Experiment:
    project = project_get_or_create(name="Experiments on Celery")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=latency))
    return experiment_create(
        dataset=dataset_ensure_suite(project=project),
        arms=parse_arms("single:0,moa:1", pool=pool),
        sample=sample,
        seed=5,
        tags=["arithmetic", "lookup"],
    )


def wait_until(condition, *, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_an_experiment_runs_on_celery_workers_every_item_once(start_celery_worker):
    worker = start_celery_worker(concurrency=2, CONDUCTOR_SIM_LATENCY_SCALE="0")
    experiment = suite_experiment(latency=0, sample=10)  # enqueued on commit

    wait_until(
        lambda: Experiment.objects.filter(pk=experiment.pk, status="finished").exists(),
        what=f"the experiment to finish; worker log:\n{worker.log()[-3000:]}",
    )
    experiment.refresh_from_db()
    assert (experiment.done, experiment.total) == (20, 20)
    runs = Run.objects.filter(trial__experiment=experiment)
    assert runs.count() == 20 and set(runs.values_list("status", flat=True)) == {"succeeded"}
    per_arm = dict(
        Trial.objects.filter(experiment=experiment)
        .values_list("arm__label")
        .annotate(n=Count("pk"))
    )
    assert per_arm == {"single:0": 10, "moa:1": 10}
    # Each run was executed once: a step per worker call, never a second attempt.
    assert not Step.objects.filter(run__in=runs, attempts__gt=1).exists()
    assert worker.log().count("experiment_execute_task") >= 2


def test_an_experiment_survives_its_worker_being_killed(start_celery_worker):
    first = start_celery_worker(concurrency=1)
    experiment = suite_experiment(latency=0.1, sample=6)
    wait_until(
        lambda: Experiment.objects.filter(pk=experiment.pk, done__gte=3).exists(),
        what="three runs done",
    )
    first.kill()
    finished_before = dict(
        Trial.objects.filter(experiment=experiment, finished=True).values_list("pk", "run_id")
    )
    steps_before = set(
        Step.objects.filter(run_id__in=finished_before.values()).values_list("pk", "finished_at")
    )

    second = start_celery_worker(concurrency=1)
    wait_until(
        lambda: Experiment.objects.filter(pk=experiment.pk, status="finished").exists(),
        what=f"the experiment to finish after the kill; log:\n{second.log()[-3000:]}",
    )
    experiment.refresh_from_db()
    assert experiment.done == experiment.total == 12
    # Finished trials kept their runs, whose steps were not run again.
    for trial_id, run_id in finished_before.items():
        assert Trial.objects.get(pk=trial_id).run_id == run_id
    assert (
        set(
            Step.objects.filter(run_id__in=finished_before.values()).values_list(
                "pk", "finished_at"
            )
        )
        == steps_before
    )
    assert Run.objects.filter(trial__experiment=experiment).count() == 12
