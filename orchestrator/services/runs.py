"""Runs: create one, execute it (resuming what is already stored), cancel it."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from orchestrator import events
from orchestrator.engine.grading import GRADER_KINDS, parse_number
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.strategies import STRATEGIES, build_strategy
from orchestrator.engine.types import (
    Completion,
    Message,
    PlanRecord,
    ResumeState,
    RunObserver,
    RunResult,
    RunSettings,
    StepRecord,
    WorkerInfo,
)
from orchestrator.models import Plan, Pool, Run, Step, Worker
from orchestrator.selectors import user_can_run
from orchestrator.services.recording import (
    TOTAL_FIELDS,
    RecordingObserver,
    RunCancelled,
    finished_event_data,
    record_run_failed,
)
from orchestrator.services.records import resume_state_from_rows

logger = logging.getLogger(__name__)

MAX_ERROR_LENGTH = 500
_CHOICE_REFERENCE = re.compile(r"^\(?[A-Ja-j]\)?$")


# Creating ----------------------------------------------------------------------------------------


def run_create(
    *,
    pool: Pool,
    input: str,
    strategy: str = "conductor",
    strategy_options: Mapping[str, Any] | None = None,
    reference: str = "",
    grader: str = "",
    created_by: Any = None,
    enqueue: bool = True,
) -> Run:
    """Create a queued run of ``input`` on ``pool`` and, once committed, start executing it.

    ``created_by`` (a user, or None for the CLI) must be an admin or reviewer of the pool's
    project (PermissionDenied otherwise). Raises ValidationError keyed by field (input, strategy,
    strategy_options, pool, grader) for bad input. With no ``grader`` but a reference, the grader
    is chosen from the reference's form (a number: numeric; a letter: choice; else exact).
    Publishes ``run.status`` queued. ``enqueue=False`` leaves execution to the caller (the CLI).
    """
    if created_by is not None and not user_can_run(user=created_by, project=pool.project_id):
        raise PermissionDenied("Only admins and reviewers of the project may start runs.")
    options = dict(strategy_options or {})
    reference = (reference or "").strip()
    grader = (grader or "").strip()
    errors: dict[str, list[str]] = {}
    if not (input or "").strip():
        errors["input"] = ["Give a question."]
    enabled_workers = pool.workers.filter(enabled=True).count()
    if enabled_workers == 0:
        errors["pool"] = [f'Pool "{pool.name}" has no enabled worker.']
    if strategy not in STRATEGIES:
        errors["strategy"] = [
            f'Unknown strategy "{strategy}". Choose one of: {", ".join(STRATEGIES)}.'
        ]
    else:
        try:
            build_strategy(strategy, conductor=_VALIDATION_ONLY_CLIENT, options=options)
        except ValueError as error:
            errors["strategy_options"] = [str(error)]
        else:
            problem = _worker_option_problem(options, enabled_workers)
            if problem and enabled_workers:
                errors["strategy_options"] = [problem]
    if grader and grader not in GRADER_KINDS:
        errors["grader"] = [f'Unknown grader "{grader}". Choose one of: {", ".join(GRADER_KINDS)}.']
    if errors:
        raise ValidationError(errors)
    if reference and not grader:
        grader = default_grader(reference)

    with transaction.atomic():
        run = Run.objects.create(
            project_id=pool.project_id,
            pool=pool,
            strategy=strategy,
            strategy_options=options,
            input=input.strip(),
            reference=reference,
            grader=grader if reference else "",
            created_by=created_by,
        )
        events.publish(run.pk, events.RUN_STATUS, {"status": Run.Status.QUEUED.value})
        if enqueue:
            from orchestrator.services.execution import run_enqueue

            run_id = run.pk
            # robust: a broker that is away does not turn a stored run into an error; the run
            # stays queued and the workers' sweep enqueues it again (orchestrator/tasks.py).
            transaction.on_commit(lambda: run_enqueue(run_id=run_id), robust=True)
        run.refresh_from_db(fields=["last_seq"])
    return run


def default_grader(reference: str) -> str:
    """The grader that fits a reference's form: numeric, choice, or exact text."""
    text = reference.strip()
    if parse_number(text) is not None and re.fullmatch(r"[-+0-9.,/ ]+", text):
        return "numeric"
    if _CHOICE_REFERENCE.match(text):
        return "choice"
    return "exact"


def _worker_option_problem(options: Mapping[str, Any], pool_size: int) -> str:
    """A worker index in the options that the pool does not have, said plainly; or ""."""
    for key in ("worker", "aggregator", "proposers"):
        if key not in options or options[key] is None:
            continue
        value = options[key]
        items = value.split(",") if isinstance(value, str) else value
        items = items if isinstance(items, (list, tuple)) else [items]
        for item in items:
            text = str(item).strip()
            if text.isdigit() and int(text) >= pool_size:
                return (
                    f"Option {key} names worker {text}, but the pool has {pool_size} enabled "
                    f"workers (0 to {pool_size - 1})."
                )
    return ""


class _ValidationOnlyClient:
    """Stands in for the conductor when only the strategy's name and options are checked."""

    model = "validation-only"

    async def complete(self, messages: Sequence[Message], *, timeout: float) -> Completion:
        raise RuntimeError("a validation-only client is never called")


_VALIDATION_ONLY_CLIENT = _ValidationOnlyClient()


# Executing ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Execution:
    """Everything a run's execution needs, loaded in one go from the database."""

    run: Run
    pool: Pool
    workers: list[Worker]
    plans: list[Plan]
    steps: list[Step]

    def resume(self) -> ResumeState:
        return resume_state_from_rows(self.plans, self.steps)

    def totals(self) -> dict[str, Any]:
        return {field: getattr(self.run, field) for field in TOTAL_FIELDS}


def run_execute(*, run_id: int, resumable: bool = False) -> None:
    """Execute a run to its end, from sync code (a Celery task, the CLI).

    ``resumable``: see ``run_execute_async``.
    Runs ``run_execute_async`` on a fresh event loop; its database work comes back to the
    calling thread, so it uses this thread's connection (and transaction, in tests).
    Must not be called from a thread that runs an event loop.
    """
    async_to_sync(run_execute_async)(run_id=run_id, resumable=resumable)


async def run_execute_async(
    *, run_id: int, observer: RunObserver | None = None, resumable: bool = False
) -> None:
    """Execute a run: plan, call the workers, store every step and publish its events.

    A finished run is not executed again. A run executed before (a worker died mid-run) resumes:
    its stored plans are not made again and its succeeded steps are never sent to their model
    again. ``observer`` hears every callback after it is stored (the CLI prints from it).
    Model failures end the run as failed with the engine's error. Any other exception marks the
    run failed with a short error and propagates; a cancelled run stops quietly. With
    ``resumable`` (the caller executes the run again later: the Celery task retries), a database
    that is away or full is not the run's fault: the error propagates and the run is left as it
    is, to be resumed.
    """
    execution = await sync_to_async(_load_execution)(run_id=run_id)
    if execution is None:
        logger.info("run %s is finished or gone; not executing it", run_id)
        return
    run = execution.run
    try:
        workers = [_worker_info(worker) for worker in execution.workers]
        conductor = _conductor_client(execution.pool) if run.strategy == "conductor" else None
        strategy = build_strategy(
            run.strategy, conductor=conductor, options=dict(run.strategy_options or {})
        )
        recorder = RecordingObserver(
            run_id=run_id,
            worker_ids=[worker.pk for worker in execution.workers],
            reference=run.reference,
            grader=run.grader,
            steps=execution.steps,
            plan_rounds=[plan.round for plan in execution.plans],
            totals=execution.totals(),
            status=run.status,
        )
        await execute_run(
            question=run.input,
            strategy=strategy,
            workers=workers,
            settings=run_settings_for(execution.pool),
            observer=recorder if observer is None else _Observers(recorder, observer),
            resume=execution.resume(),
        )
    except RunCancelled:
        logger.info("run %s was cancelled; execution stopped", run_id)
    except (OperationalError, InterfaceError) as error:
        if not resumable:
            await sync_to_async(record_run_failed)(run_id=run_id, error=short_error(error))
        raise
    except Exception as error:
        await sync_to_async(record_run_failed)(run_id=run_id, error=short_error(error))
        raise


def short_error(error: BaseException) -> str:
    """One line naming an unexpected error, for the run's page (the traceback goes to the log)."""
    text = " ".join(str(error).split())
    message = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return message[:MAX_ERROR_LENGTH]


def _load_execution(*, run_id: int) -> _Execution | None:
    try:
        run = Run.objects.select_related("pool").get(pk=run_id)
    except Run.DoesNotExist:
        return None
    if run.is_finished:
        return None
    # Every plan or step the recorder stores comes with its events, in the same transaction: a
    # queued run that has published nothing since its creation has none to resume from.
    fresh = run.status == Run.Status.QUEUED and run.last_seq <= 1
    return _Execution(
        run=run,
        pool=run.pool,
        workers=list(
            Worker.objects.filter(pool_id=run.pool_id, enabled=True).order_by("position", "id")
        ),
        plans=[] if fresh else list(Plan.objects.filter(run_id=run_id).order_by("round")),
        steps=[] if fresh else list(Step.objects.filter(run_id=run_id).order_by("round", "index")),
    )


def run_settings_for(pool: Pool) -> RunSettings:
    """The engine's bounds for runs on ``pool``."""
    return RunSettings(
        max_steps=pool.max_steps,
        max_rounds=pool.max_rounds,
        access_mode=pool.access_mode,
        show_worker_names=pool.show_worker_names,
        step_timeout=pool.step_timeout,
        token_budget=pool.token_budget,
        cost_budget=pool.cost_budget,
    )


def _worker_info(worker: Worker) -> WorkerInfo:
    from orchestrator.providers import make_client

    client = make_client(
        worker.model,
        api_base=worker.api_base,
        api_key_env=worker.api_key_env,
        params=dict(worker.params or {}),
        price_in=worker.price_in,
        price_out=worker.price_out,
    )
    return WorkerInfo(
        name=worker.name, model=worker.model, description=worker.description, client=client
    )


def _conductor_client(pool: Pool):
    from orchestrator.providers import make_client

    return make_client(
        pool.conductor_model,
        api_base=pool.conductor_api_base,
        api_key_env=pool.conductor_api_key_env,
        params=dict(pool.conductor_params or {}),
    )


class _Observers:
    """Fans each callback out to the recorder first, then to an extra observer."""

    def __init__(self, *observers: RunObserver) -> None:
        self.observers = observers

    async def planning(self, round: int) -> None:
        for observer in self.observers:
            await observer.planning(round)

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        for observer in self.observers:
            await observer.plan_created(plan, steps)

    async def step_started(self, step: StepRecord) -> None:
        for observer in self.observers:
            await observer.step_started(step)

    async def step_finished(self, step: StepRecord) -> None:
        for observer in self.observers:
            await observer.step_finished(step)

    async def step_failed(self, step: StepRecord) -> None:
        for observer in self.observers:
            await observer.step_failed(step)

    async def run_finished(self, result: RunResult) -> None:
        for observer in self.observers:
            await observer.run_finished(result)


# Cancelling --------------------------------------------------------------------------------------


def run_cancel(*, run_id: int) -> Run:
    """Cancel a run that has not finished; a finished run is returned unchanged.

    Publishes ``run.finished`` with status cancelled. An execution in progress stops at its next
    callback (and an inline one in this process is cancelled at once, after the commit).
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_finished:
            return run
        run.status = Run.Status.CANCELLED
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at"])
        events.publish(run_id, events.RUN_FINISHED, finished_event_data(run))
        from orchestrator.services.execution import run_stop_inline

        transaction.on_commit(lambda: run_stop_inline(run_id=run_id))
    return run


__all__ = [
    "default_grader",
    "run_cancel",
    "run_create",
    "run_execute",
    "run_execute_async",
    "run_settings_for",
    "short_error",
]
