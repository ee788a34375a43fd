"""Experiments: a dataset (or a sample of it) against several arms, every item × arm an ordinary
run. Create, execute (in slices that claim one trial at a time), cancel, resume.

Executing claims the next unfinished trial (``Trial.claimed_until``; on PostgreSQL ``SKIP
LOCKED`` lets several slices on several workers share one experiment), makes its run on first
claim, executes that run with ``run_execute_async`` (which resumes a run stored before and never
calls a finished step's model again), and marks the trial finished once its run has ended. A
finished trial is never run again, so an experiment stopped by a cancel or a dead worker
resumes where it stopped. A trial whose execution died is taken again once its claim (a run
lease long) has lapsed, or at once when the experiment is resumed; a slice with nothing to claim
waits for such claims while any trial is unfinished, so the last live slice finishes the work of
a dead one.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from orchestrator.models import (
    Dataset,
    DatasetItem,
    Experiment,
    ExperimentArm,
    Membership,
    Pool,
    Run,
    Trial,
)
from orchestrator.selectors import user_can_run, user_role
from orchestrator.services.audit import audit_record
from orchestrator.services.grading import code_grading_problem
from orchestrator.services.runs import run_cancel, run_create, run_execute_async, strategy_problems

logger = logging.getLogger(__name__)

MAX_ARMS = 8
MAX_LABEL_LENGTH = 100
MAX_ERROR_LENGTH = 500
UNFINISHED = (Experiment.Status.QUEUED, Experiment.Status.RUNNING)
RETRY_MARGIN_SECONDS = 0.2
# A slice with nothing to claim looks again this often while other slices hold the last trials.
IDLE_POLL_SECONDS = 1.0

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class ArmSpec:
    """One arm as asked for: a strategy with its options over a pool; ``label`` names it in the
    scoreboard (made from the strategy and options when empty)."""

    strategy: str
    pool: Pool
    options: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""


def arm_label(strategy: str, options: Mapping[str, Any]) -> str:
    """A short name for an arm: "conductor", "single:2", "reflection:1 x3", "moa:0"."""
    if strategy in ("single", "reflection") and "worker" in options:
        label = f"{strategy}:{options['worker']}"
        if strategy == "reflection" and "rounds" in options:
            label += f" x{options['rounds']}"
        return label
    if strategy == "moa" and "aggregator" in options:
        return f"moa:{options['aggregator']}"
    return strategy


def parse_arms(text: str, *, pool: Pool) -> list[ArmSpec]:
    """Arms written as the CLI and the page take them: comma-separated ``strategy[:worker]``,
    e.g. ``conductor,single:0,reflection:2,moa:2`` (the worker of single and reflection, the
    aggregator of moa), all over ``pool``. Raises ValidationError on ``arms``."""
    from orchestrator.engine.strategies import STRATEGIES

    arms: list[ArmSpec] = []
    for part in (piece.strip() for piece in (text or "").split(",")):
        if not part:
            continue
        strategy, _, index = part.partition(":")
        strategy = strategy.strip()
        if strategy not in STRATEGIES:
            raise ValidationError(
                {"arms": [f'Unknown strategy "{strategy[:40]}" (one of: {", ".join(STRATEGIES)}).']}
            )
        options: dict[str, Any] = {}
        if index.strip():
            if not index.strip().isdigit() or strategy == "conductor":
                raise ValidationError({"arms": [f'"{part[:40]}": write strategy:worker number.']})
            key = "aggregator" if strategy == "moa" else "worker"
            options[key] = int(index)
        arms.append(ArmSpec(strategy=strategy, pool=pool, options=options))
    if not arms:
        raise ValidationError({"arms": ["Give at least one arm, e.g. conductor,single:0,moa."]})
    return arms


def _select_items(
    dataset: Dataset, *, sample: int | None, seed: int, tags: Sequence[str]
) -> list[int]:
    rows = list(dataset.items.order_by("position").values_list("pk", "tags"))
    if tags:
        wanted = set(tags)
        rows = [(pk, item_tags) for pk, item_tags in rows if wanted.intersection(item_tags or ())]
    ids = [pk for pk, _ in rows]
    if sample is not None and sample < len(ids):
        chosen = set(random.Random(seed).sample(ids, sample))
        ids = [pk for pk in ids if pk in chosen]
    return ids


def experiment_create(
    *,
    dataset: Dataset,
    arms: Sequence[ArmSpec],
    sample: int | None = None,
    seed: int = 0,
    tags: Sequence[str] = (),
    name: str = "",
    created_by: Any = None,
    enqueue: bool = True,
) -> Experiment:
    """Store an experiment of ``dataset`` (its items with one of ``tags`` if given, then a random
    sample of ``sample`` of them drawn with ``seed``) against ``arms``, one trial per item × arm,
    and, once committed, start executing it (``enqueue=False``: the caller executes it).

    ``created_by`` (None for the CLI) must be an admin or reviewer of the dataset's project, and
    an admin when the dataset holds items with a code grader (PermissionDenied). Raises
    ValidationError keyed by field (arms, sample, dataset, name) for bad input: no arm or more
    than MAX_ARMS, a pool of another project, an arm that could not run on its pool, an empty
    selection, more trials than ``CONDUCTOR_EXPERIMENT_MAX_TRIALS``.
    """
    project_id = dataset.project_id
    if created_by is not None and not user_can_run(user=created_by, project=project_id):
        raise PermissionDenied("Only admins and reviewers of the project may start experiments.")
    errors: dict[str, list[str]] = {}
    if not arms:
        errors["arms"] = ["Give at least one arm."]
    elif len(arms) > MAX_ARMS:
        errors["arms"] = [f"At most {MAX_ARMS} arms, not {len(arms)}."]
    labels: list[str] = []
    for index, arm in enumerate(arms[:MAX_ARMS]):
        if arm.pool.project_id != project_id:
            errors.setdefault("arms", []).append(
                f"Arm {index}: pool {arm.pool.name!r} is not in the dataset's project."
            )
            continue
        for field_name, messages in strategy_problems(
            pool=arm.pool, strategy=arm.strategy, options=arm.options
        ).items():
            errors.setdefault("arms", []).extend(
                f"Arm {index} ({field_name}): {message}" for message in messages
            )
        label = (arm.label or "").strip() or arm_label(arm.strategy, arm.options)
        if len({a.pool.pk for a in arms}) > 1 and not (arm.label or "").strip():
            label = f"{label} @ {arm.pool.name}"
        labels.append(label[:MAX_LABEL_LENGTH])
    if len(set(labels)) != len(labels):
        errors.setdefault("arms", []).append("Two arms are the same: give each a label of its own.")
    if sample is not None and sample < 1:
        errors["sample"] = ["Give a sample of at least 1 item, or none for every item."]
    if len(name) > 200:
        errors["name"] = ["At most 200 characters."]
    if errors:
        raise ValidationError(errors)
    item_ids = _select_items(dataset, sample=sample, seed=seed, tags=tags)
    if not item_ids:
        raise ValidationError({"dataset": ["No item of the dataset is selected."]})
    if DatasetItem.objects.filter(pk__in=item_ids, grader="code").exists():
        if (
            created_by is not None
            and user_role(user=created_by, project=project_id) != Membership.Role.ADMIN
        ):
            raise PermissionDenied(
                "Only admins of the project may run items with a code grader: their references "
                "run as code."
            )
        problem = code_grading_problem()
        if problem:
            raise ValidationError({"dataset": [f"Items with a code grader: {problem}"]})
    total = len(item_ids) * len(arms)
    limit = settings.CONDUCTOR_EXPERIMENT_MAX_TRIALS
    if total > limit:
        raise ValidationError(
            {
                "sample": [
                    f"{len(item_ids):,} items × {len(arms)} arms is {total:,} runs; the limit "
                    f"is {limit:,} (CONDUCTOR_EXPERIMENT_MAX_TRIALS). Take a sample."
                ]
            }
        )
    with transaction.atomic():
        experiment = Experiment.objects.create(
            project_id=project_id,
            dataset=dataset,
            name=name.strip() or f"{dataset.name}: {', '.join(labels)}"[:200],
            sample=sample,
            seed=seed,
            tags=list(tags),
            total=total,
            created_by=created_by if getattr(created_by, "pk", None) else None,
        )
        stored_arms = ExperimentArm.objects.bulk_create(
            [
                ExperimentArm(
                    experiment=experiment,
                    position=position,
                    label=label,
                    strategy=arm.strategy,
                    options=dict(arm.options),
                    pool=arm.pool,
                )
                for position, (arm, label) in enumerate(zip(arms, labels, strict=True))
            ]
        )
        # Item by item, every arm: a stopped experiment leaves arms comparable on the same items.
        Trial.objects.bulk_create(
            [
                Trial(experiment=experiment, arm=arm, item_id=item_id)
                for item_id in item_ids
                for arm in stored_arms
            ],
            batch_size=2000,
        )
        audit_record(
            project=project_id,
            actor=created_by,
            action="experiment.create",
            target=experiment,
            after={"dataset": dataset.pk, "arms": labels, "total": total},
        )
        if enqueue:
            _enqueue_on_commit(experiment.pk)
    return experiment


def _enqueue_on_commit(experiment_id: int) -> None:
    from orchestrator.services.execution import experiment_enqueue

    transaction.on_commit(lambda: experiment_enqueue(experiment_id=experiment_id), robust=True)


def experiment_cancel(*, experiment: Experiment, user: Any) -> Experiment:
    """Stop an experiment that has not finished: no trial is started after this, and the runs
    of its trials under way are cancelled. Finished trials are kept; ``experiment_resume``
    goes on from there. Admins and reviewers only (PermissionDenied)."""
    if user is not None and not user_can_run(user=user, project=experiment.project_id):
        raise PermissionDenied("Only admins and reviewers of the project may cancel experiments.")
    with transaction.atomic():
        locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if locked.status not in UNFINISHED:
            return locked
        locked.status = Experiment.Status.CANCELLED
        locked.finished_at = timezone.now()
        locked.save(update_fields=["status", "finished_at"])
        audit_record(
            project=locked.project_id,
            actor=user,
            action="experiment.cancel",
            target=locked,
            after={"done": locked.done, "total": locked.total},
        )
    running = list(
        Run.objects.filter(trial__experiment=locked, trial__finished=False)
        .exclude(status__in=Run.FINISHED)
        .values_list("pk", flat=True)
    )
    for run_id in running:
        run_cancel(run_id=run_id)
    Trial.objects.filter(experiment=locked, finished=False).update(claimed_until=None)
    return locked


def experiment_resume(*, experiment: Experiment, user: Any, enqueue: bool = True) -> Experiment:
    """Start an unfinished experiment again (after a cancel, a failure or a lost worker): its
    unfinished trials are released and executed; finished ones are not run again. Admins and
    reviewers only (PermissionDenied); a finished experiment is returned unchanged."""
    if user is not None and not user_can_run(user=user, project=experiment.project_id):
        raise PermissionDenied("Only admins and reviewers of the project may resume experiments.")
    with transaction.atomic():
        locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if locked.status == Experiment.Status.FINISHED:
            return locked
        locked.status = Experiment.Status.QUEUED
        locked.finished_at = None
        locked.error = ""
        locked.save(update_fields=["status", "finished_at", "error"])
        Trial.objects.filter(experiment=locked, finished=False).update(claimed_until=None)
        audit_record(
            project=locked.project_id,
            actor=user,
            action="experiment.resume",
            target=locked,
            after={"done": locked.done, "total": locked.total},
        )
        if enqueue:
            _enqueue_on_commit(locked.pk)
    return locked


# Executing ---------------------------------------------------------------------------------------


def experiment_execute(
    *, experiment_id: int, concurrency: int = 1, on_progress: Progress | None = None
) -> None:
    """``experiment_execute_async`` from sync code (a Celery task, the CLI, a thread)."""
    async_to_sync(experiment_execute_async)(
        experiment_id=experiment_id, concurrency=concurrency, on_progress=on_progress
    )


async def experiment_execute_async(
    *,
    experiment_id: int,
    concurrency: int = 1,
    on_progress: Progress | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Execute the unfinished trials of an experiment, ``concurrency`` at a time, until none is
    left to claim or the experiment is no longer running; then mark it finished if every trial
    is. ``on_progress(done, total)`` hears each trial that finishes.

    A trial whose run another execution holds (one that died, until its run lease lapses) is
    tried again once that lease could have lapsed: the slice waits for it when that is soon."""
    if not await sync_to_async(_experiment_start)(experiment_id):
        return

    async def one_slice() -> None:
        while True:
            claim = await sync_to_async(_trial_claim_next)(experiment_id)
            if claim is None:
                wait = await sync_to_async(_seconds_until_retry)(experiment_id)
                if wait is None:
                    return
                await sleep(wait)
                continue
            trial_id, run_id = claim
            try:
                await run_execute_async(run_id=run_id)
            finally:
                progress = await sync_to_async(_trial_settle)(trial_id, run_id)
            if progress is not None and on_progress is not None:
                await sync_to_async(on_progress)(*progress)
            if progress is not None and progress[0] >= progress[1]:
                await sync_to_async(_experiment_finish_if_done)(experiment_id)

    await asyncio.gather(*(one_slice() for _ in range(max(1, concurrency))))
    await sync_to_async(_experiment_finish_if_done)(experiment_id)


def _experiment_start(experiment_id: int) -> bool:
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().filter(pk=experiment_id).first()
        if experiment is None or experiment.status not in UNFINISHED:
            return False
        if experiment.status == Experiment.Status.QUEUED:
            experiment.status = Experiment.Status.RUNNING
            experiment.started_at = experiment.started_at or timezone.now()
            experiment.save(update_fields=["status", "started_at"])
    return True


def _trial_claim_next(experiment_id: int) -> tuple[int, int] | None:
    """Claim the next unfinished, unclaimed trial and make its run if it has none (or only a
    cancelled one); None when there is none or the experiment is not running."""
    now = timezone.now()
    with transaction.atomic():
        experiment = Experiment.objects.filter(pk=experiment_id).first()
        if experiment is None or experiment.status != Experiment.Status.RUNNING:
            return None
        trial = (
            Trial.objects.select_for_update(skip_locked=True)
            .filter(experiment_id=experiment_id, finished=False)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .order_by("pk")
            .first()
        )
        if trial is None:
            return None
        run = Run.objects.filter(pk=trial.run_id).only("pk", "status").first()
        if run is None or run.status == Run.Status.CANCELLED:
            try:
                run = _trial_run_create(trial, experiment)
            except (ValidationError, PermissionDenied) as error:
                _experiment_fail(
                    experiment_id, f"Item {trial.item_id}, arm {trial.arm_id}: {error}"
                )
                return None
        trial.run = run
        trial.claimed_until = now + timedelta(seconds=claim_seconds())
        trial.save(update_fields=["run", "claimed_until"])
        return trial.pk, run.pk


def _trial_run_create(trial: Trial, experiment: Experiment) -> Run:
    arm = ExperimentArm.objects.select_related("pool").get(pk=trial.arm_id)
    item = DatasetItem.objects.get(pk=trial.item_id)
    return run_create(
        pool=arm.pool,
        input=item.input,
        strategy=arm.strategy,
        strategy_options=arm.options,
        reference=item.reference,
        grader=item.grader,
        created_by=experiment.created_by,
        enqueue=False,
    )


def _trial_settle(trial_id: int, run_id: int) -> tuple[int, int] | None:
    """After a trial's execution: mark it finished if its run ended while the experiment ran
    (then return the new progress), release it if the run was cancelled, or leave it claimed
    (another execution holds its run; the claim lapses if that one died)."""
    with transaction.atomic():
        status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
        trial = Trial.objects.select_related("experiment").get(pk=trial_id)
        experiment = trial.experiment
        if status in Run.FINISHED and (
            status != Run.Status.CANCELLED or experiment.status == Experiment.Status.RUNNING
        ):
            if Trial.objects.filter(pk=trial_id, finished=False).update(
                finished=True, claimed_until=None
            ):
                Experiment.objects.filter(pk=experiment.pk).update(done=F("done") + 1)
                return experiment.done + 1, experiment.total
            return None
        if status == Run.Status.CANCELLED or status is None:
            Trial.objects.filter(pk=trial_id).update(claimed_until=None)
            return None
        # Another execution holds the run: try again when its lease could have lapsed.
        lease = Run.objects.filter(pk=run_id).values_list("lease_expires_at", flat=True).first()
        now = timezone.now()
        retry_at = max(lease or now, now) + timedelta(seconds=RETRY_MARGIN_SECONDS)
        Trial.objects.filter(pk=trial_id).update(claimed_until=retry_at)
    return None


def _seconds_until_retry(experiment_id: int) -> float | None:
    """How long until an unfinished trial another execution holds can be claimed again (its
    execution may have died); None when no trial is left unfinished, or the experiment is no
    longer running."""
    if not Experiment.objects.filter(pk=experiment_id, status=Experiment.Status.RUNNING).exists():
        return None
    soonest = (
        Trial.objects.filter(experiment_id=experiment_id, finished=False)
        .order_by("claimed_until")
        .values_list("claimed_until", flat=True)
        .first()
    )
    if (
        soonest is None
        and not Trial.objects.filter(experiment_id=experiment_id, finished=False).exists()
    ):
        return None
    if soonest is None:
        return RETRY_MARGIN_SECONDS
    wait = (soonest - timezone.now()).total_seconds()
    return min(IDLE_POLL_SECONDS, max(RETRY_MARGIN_SECONDS, wait))


def claim_seconds() -> float:
    """How long a trial's claim holds: a run lease and a margin. Once its run is claimed the
    run's own lease (renewed while it executes) keeps other executions off it; a trial whose
    execution died is taken again when its claim has lapsed."""
    return settings.CONDUCTOR_RUN_LEASE_SECONDS + RETRY_MARGIN_SECONDS


def _experiment_finish_if_done(experiment_id: int) -> None:
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
        if experiment.status != Experiment.Status.RUNNING:
            return
        if experiment.trials.filter(finished=False).exists():
            return  # another slice still runs some, or a dead one's claim has not lapsed
        experiment.status = Experiment.Status.FINISHED
        experiment.finished_at = timezone.now()
        experiment.done = experiment.trials.count()
        experiment.save(update_fields=["status", "finished_at", "done"])


def _experiment_fail(experiment_id: int, error: str) -> None:
    logger.warning("experiment %s failed: %s", experiment_id, error)
    Experiment.objects.filter(pk=experiment_id, status__in=UNFINISHED).update(
        status=Experiment.Status.FAILED, error=error[:MAX_ERROR_LENGTH], finished_at=timezone.now()
    )
