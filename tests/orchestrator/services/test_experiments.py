"""Experiments: runs per arm, resume after a kill without re-running finished items, cancel, and
the scoreboard's figures checked against the runs they come from."""

from __future__ import annotations

import statistics

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from orchestrator.models import Experiment, Membership, Run, Step, Trial
from orchestrator.scoreboard import (
    experiment_cell_runs,
    experiment_head_to_head,
    experiment_scoreboard,
    wilson,
)
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.experiments import (
    ArmSpec,
    experiment_cancel,
    experiment_create,
    experiment_execute,
    experiment_resume,
    parse_arms,
)
from tests.factories import make_member, make_pool, make_project
from tests.orchestrator.services.conftest import SimulatedKill

NO_CODE = ("arithmetic", "countdown", "lookup")


@pytest.fixture
def suite(project):
    return dataset_ensure_suite(project=project)


@pytest.fixture
def run_experiment(django_capture_on_commit_callbacks):
    def run(experiment, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            experiment_execute(experiment_id=experiment.pk, **kwargs)
        experiment.refresh_from_db()
        return experiment

    return run


def four_arms(pool):
    return parse_arms("conductor,single:0,reflection:1,moa:1", pool=pool)


def test_every_item_runs_once_per_arm_as_an_ordinary_run(suite, sim_pool, run_experiment):
    experiment = experiment_create(
        dataset=suite, arms=four_arms(sim_pool), sample=6, seed=3, tags=NO_CODE, enqueue=False
    )
    assert (experiment.status, experiment.total, experiment.done) == ("queued", 24, 0)
    progress = []

    run_experiment(experiment, on_progress=lambda done, total: progress.append((done, total)))

    assert (experiment.status, experiment.done) == ("finished", 24)
    assert progress == [(n, 24) for n in range(1, 25)]
    runs = Run.objects.filter(trial__experiment=experiment)
    assert runs.count() == 24
    for arm in experiment.arms.all():
        arm_runs = runs.filter(trial__arm=arm)
        assert arm_runs.count() == 6
        assert {run.strategy for run in arm_runs} == {arm.strategy}
        assert {run.pool_id for run in arm_runs} == {sim_pool.pk}
        # The same six items for every arm.
        assert set(arm_runs.values_list("trial__item_id", flat=True)) == set(
            runs.filter(trial__arm=experiment.arms.first()).values_list("trial__item_id", flat=True)
        )
    assert set(runs.values_list("status", flat=True)) == {"succeeded"}
    assert all(run.score is not None for run in runs)
    # The same seed draws the same sample.
    again = experiment_create(
        dataset=suite, arms=four_arms(sim_pool), sample=6, seed=3, tags=NO_CODE, enqueue=False
    )
    assert set(again.trials.values_list("item_id", flat=True)) == set(
        experiment.trials.values_list("item_id", flat=True)
    )


def test_resume_after_a_kill_does_not_run_finished_items_again(
    suite, sim_pool, run_experiment, call_log, settings
):
    # The killed execution's run lease lapses quickly, so the resumed one takes its run over.
    settings.CONDUCTOR_RUN_LEASE_SECONDS = 0.5
    experiment = experiment_create(
        dataset=suite,
        arms=parse_arms("single:0,moa:1", pool=sim_pool),
        sample=4,
        tags=NO_CODE,
        enqueue=False,
    )
    # Killed at the aggregator of the 4th trial's moa run, its proposers done (single: 1 call
    # per item; moa: one per worker).
    moa_calls = sim_pool.workers.filter(enabled=True).count()
    call_log.kill_at_call = 1 + moa_calls + 1 + moa_calls
    with pytest.raises(SimulatedKill):
        run_experiment(experiment)
    experiment.refresh_from_db()
    assert (experiment.status, experiment.done) == ("running", 3)
    finished_before = dict(
        Trial.objects.filter(experiment=experiment, finished=True).values_list("pk", "run_id")
    )
    steps_before = {
        run_id: set(Step.objects.filter(run_id=run_id).values_list("pk", "response"))
        for run_id in finished_before.values()
    }
    calls_before = len(call_log.calls)
    call_log.kill_at_call = None

    experiment_resume(experiment=experiment, user=None, enqueue=False)
    run_experiment(experiment)

    assert (experiment.status, experiment.done) == ("finished", 8)
    # Finished trials kept their runs, and those runs were not touched.
    for trial_id, run_id in finished_before.items():
        assert Trial.objects.get(pk=trial_id).run_id == run_id
        assert (
            set(Step.objects.filter(run_id=run_id).values_list("pk", "response"))
            == steps_before[run_id]
        )
    # One run per trial: the interrupted run was resumed, not replaced.
    assert Run.objects.filter(trial__experiment=experiment).count() == 8
    # Calls after the resume: the aggregator of the killed moa run (its proposers are not asked
    # again), then the two items left, once per arm.
    assert len(call_log.calls) - calls_before == 1 + 2 * (1 + moa_calls)


def test_cancel_stops_the_experiment_and_resume_goes_on(suite, sim_pool, run_experiment):
    experiment = experiment_create(
        dataset=suite,
        arms=parse_arms("single:0,single:1", pool=sim_pool),
        sample=5,
        tags=NO_CODE,
        enqueue=False,
    )

    def cancel_at_three(done, total):
        if done == 3:
            experiment_cancel(experiment=experiment, user=None)

    run_experiment(experiment, on_progress=cancel_at_three)
    assert (experiment.status, experiment.done) == ("cancelled", 3)
    assert experiment.finished_at is not None
    assert Run.objects.filter(trial__experiment=experiment).count() == 3
    # Executing a cancelled experiment does nothing.
    run_experiment(experiment)
    assert Run.objects.filter(trial__experiment=experiment).count() == 3

    experiment_resume(experiment=experiment, user=None, enqueue=False)
    run_experiment(experiment)
    assert (experiment.status, experiment.done) == ("finished", 10)
    assert Run.objects.filter(trial__experiment=experiment).count() == 10


def test_cancel_cancels_the_runs_under_way(suite, sim_pool, project_admin):
    experiment = experiment_create(
        dataset=suite,
        arms=parse_arms("single:0", pool=sim_pool),
        sample=2,
        tags=NO_CODE,
        enqueue=False,
    )
    from orchestrator.services.experiments import _experiment_start, _trial_claim_next

    _experiment_start(experiment.pk)
    _, run_id = _trial_claim_next(experiment.pk)  # claimed, its run made, not executed yet

    experiment_cancel(experiment=experiment, user=project_admin)

    assert Run.objects.get(pk=run_id).status == "cancelled"
    assert not Trial.objects.filter(experiment=experiment, finished=True).exists()
    assert not Trial.objects.filter(experiment=experiment, claimed_until__isnull=False).exists()


def test_scoreboard_figures_come_from_the_runs(suite, sim_pool, run_experiment):
    experiment = experiment_create(
        dataset=suite, arms=four_arms(sim_pool), sample=12, seed=7, tags=NO_CODE, enqueue=False
    )
    run_experiment(experiment)

    board = experiment_scoreboard(experiment=experiment)

    assert [row["label"] for row in board["arms"]] == [
        "conductor",
        "single:0",
        "reflection:1",
        "moa:1",
    ]
    assert board["interval"].startswith("Wilson")
    for row in board["arms"]:
        runs = list(Run.objects.filter(trial__arm_id=row["arm"]).select_related("trial__item"))
        assert row["runs"] == row["graded"] == 12
        scores = [run.score for run in runs]
        assert row["accuracy"] == round(sum(scores) / 12, 4)
        low, high = wilson(sum(scores), 12)
        assert (row["accuracy_low"], row["accuracy_high"]) == (round(low, 4), round(high, 4))
        tokens = sum(run.tokens_in + run.tokens_out for run in runs)
        assert row["tokens_per_item"] == round(tokens / 12, 1)
        workers = sum(
            step.tokens_in + step.tokens_out for step in Step.objects.filter(run__in=runs)
        )
        assert row["worker_tokens_per_item"] == round(workers / 12, 1)
        assert row["conductor_tokens_per_item"] == round((tokens - workers) / 12, 1)
        if row["strategy"] != "conductor":
            assert row["conductor_tokens_per_item"] == 0
        assert row["calls_per_item"] == round(sum(run.model_calls for run in runs) / 12, 2)
        assert row["cost_per_item"] == round(sum(run.cost for run in runs) / 12, 7)
        walls = sorted(run.wall_time for run in runs)
        assert row["wall_p50"] == round(walls[5], 3)  # nearest rank: the 6th of 12
        assert row["wall_p95"] == round(walls[11], 3)
        for tag, score in row["tags"].items():
            tagged = [run.score for run in runs if tag in run.trial.item.tags]
            assert score["runs"] == len(tagged)
            assert score["accuracy"] == round(statistics.mean(tagged), 4)
    for column, higher in (
        ("accuracy", True),
        ("tokens_per_item", False),
        ("cost_per_item", False),
    ):
        values = {row["arm"]: row[column] for row in board["arms"]}
        target = max(values.values()) if higher else min(values.values())
        assert board["best"][column] == [arm for arm, value in values.items() if value == target]

    # A cell's runs are the arm's runs; right and wrong split them.
    arm = board["arms"][1]["arm"]
    right = set(experiment_cell_runs(experiment=experiment, arm=arm, outcome="right"))
    wrong = set(experiment_cell_runs(experiment=experiment, arm=arm, outcome="wrong"))
    assert right | wrong == set(Run.objects.filter(trial__arm_id=arm))
    assert len(right) == round(board["arms"][1]["accuracy"] * 12)

    # Head to head: the counts add up, and each listed item has one right and one wrong run.
    a, b = board["arms"][0]["arm"], board["arms"][1]["arm"]
    result = experiment_head_to_head(experiment=experiment, a=a, b=b)
    assert sum(result["counts"].values()) == 12
    assert len(result["items"]) == result["counts"]["only_a"] + result["counts"]["only_b"]
    for item in result["items"]:
        run_a, run_b = Run.objects.get(pk=item["a_run"]), Run.objects.get(pk=item["b_run"])
        assert {run_a.score, run_b.score} == {0.0, 1.0}
        assert item["compare_url"] == f"/compare/?runs={run_a.pk},{run_b.pk}"


def test_bad_experiments_are_refused_and_nothing_is_stored(suite, sim_pool, project, settings):
    other_pool = make_pool(project=make_project())
    cases = [
        ({"arms": []}, "arms"),
        ({"arms": [ArmSpec(strategy="single", pool=other_pool)]}, "arms"),
        ({"arms": [ArmSpec(strategy="single", pool=sim_pool, options={"worker": 40})]}, "arms"),
        ({"arms": [ArmSpec(strategy="nope", pool=sim_pool)]}, "arms"),
        ({"arms": parse_arms("single:0,single:0", pool=sim_pool)}, "arms"),
        ({"arms": parse_arms("single", pool=sim_pool), "sample": 0}, "sample"),
        ({"arms": parse_arms("single", pool=sim_pool), "tags": ["no such tag"]}, "dataset"),
    ]
    for kwargs, field in cases:
        with pytest.raises(ValidationError) as raised:
            experiment_create(dataset=suite, enqueue=False, **kwargs)
        assert field in raised.value.message_dict, (kwargs, raised.value)
    settings.CONDUCTOR_EXPERIMENT_MAX_TRIALS = 10
    with pytest.raises(ValidationError) as raised:
        experiment_create(dataset=suite, arms=parse_arms("single", pool=sim_pool), enqueue=False)
    assert "CONDUCTOR_EXPERIMENT_MAX_TRIALS" in raised.value.message_dict["sample"][0]
    with pytest.raises(ValidationError):
        parse_arms("single:x", pool=sim_pool)
    assert not Experiment.objects.exists()


def test_only_admins_and_reviewers_start_experiments(suite, sim_pool, project):
    viewer = make_member(project=project, role=Membership.Role.VIEWER)
    reviewer = make_member(project=project, role=Membership.Role.REVIEWER)
    arms = parse_arms("single", pool=sim_pool)
    with pytest.raises(PermissionDenied):
        experiment_create(dataset=suite, arms=arms, sample=2, created_by=viewer, enqueue=False)
    # The suite's code tasks' references run as code: admins only.
    with pytest.raises(PermissionDenied, match="code"):
        experiment_create(
            dataset=suite, arms=arms, tags=["code"], created_by=reviewer, enqueue=False
        )
    experiment = experiment_create(
        dataset=suite, arms=arms, sample=2, tags=["lookup"], created_by=reviewer, enqueue=False
    )
    with pytest.raises(PermissionDenied):
        experiment_cancel(experiment=experiment, user=viewer)
