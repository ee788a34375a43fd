"""Runs: create one, execute it (resuming what is already stored), cancel it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import InterfaceError, OperationalError, connection, transaction

from orchestrator import events, wire
from orchestrator.engine.grading import GRADER_KINDS, parse_number, reference_problem
from orchestrator.engine.replay import ReplayState
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.strategies import STRATEGIES, build_strategy, check_fits
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
from orchestrator.models import Membership, Plan, Pool, Run, Step, Worker
from orchestrator.providers.calls import nested_depth
from orchestrator.records import resume_state_from_rows
from orchestrator.selectors import reference_for_question, user_can_run, user_role
from orchestrator.services.ending import (
    close_open_steps,
    lock_open_steps,
    run_end_reason,
    run_fail,
    run_set_end,
)
from orchestrator.services.grading import code_grading_problem
from orchestrator.services.nesting import CallingStepObserver
from orchestrator.services.ownership import (
    Claim,
    claim_taken,
    claim_update,
    new_executor_token,
    run_claim,
    run_claim_forget,
    run_claim_release,
    run_claim_renew,
)
from orchestrator.services.recorder import RunClosed, RunTakenOver
from orchestrator.services.recording import RecordingObserver
from orchestrator.services.replay import replay_execution_state, replay_strategy
from orchestrator.sql import (
    can_store_in_one_statement,
    current,
    fetch_bound,
    hot_cursor,
    ids_columns,
    model_columns,
    not_durable_select,
)
from orchestrator.telemetry import run_trace_enqueue

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
    extra: Mapping[str, Any] | None = None,
) -> Run:
    """Create a queued run of ``input`` on ``pool`` and, once committed, start executing it.

    ``created_by`` (a user, or None for the CLI) must be an admin or reviewer of the pool's
    project, and an admin to set a ``code`` grader, whose reference runs as code
    (PermissionDenied otherwise). Raises ValidationError keyed by field (input, reference,
    strategy, strategy_options, pool, grader) for bad input, among them a question or reference
    over ``CONDUCTOR_MAX_TEXT_BYTES``, an option past its bound, a strategy whose steps would not
    fit the pool's ``max_steps`` × ``max_rounds``, and a code grader when code grading is off or
    its sandbox cannot run here. With no ``grader`` but a reference, the grader is chosen from the
    reference's form (a number: numeric; a letter: choice; else exact). With no reference, a
    question of a known task (``selectors.reference_for_question``) takes the task's reference
    and grader (a code task's only where code can be graded).
    Publishes ``run.status`` queued. ``enqueue=False`` leaves execution to the caller (the CLI).
    ``extra``: more Run fields, set by other services (``chat_run_create``: depth, called_from).
    """
    if created_by is not None and not user_can_run(user=created_by, project=pool.project_id):
        raise PermissionDenied("Only admins and reviewers of the project may start runs.")
    if (
        (grader or "").strip() == "code"
        and created_by is not None
        and user_role(user=created_by, project=pool.project_id) != Membership.Role.ADMIN
    ):
        raise PermissionDenied(
            "Only admins of the project may set a code grader: its reference runs as code."
        )
    options = dict(strategy_options or {})
    reference = (reference or "").strip()
    grader = (grader or "").strip()
    errors: dict[str, list[str]] = {}
    if not (input or "").strip():
        errors["input"] = ["Give a question."]
    for field, text in (("input", input or ""), ("reference", reference)):
        problem = text_size_problem(text)
        if problem:
            errors[field] = [problem]
    errors.update(strategy_problems(pool=pool, strategy=strategy, options=options))
    if grader and grader not in GRADER_KINDS:
        errors["grader"] = [f'Unknown grader "{grader}". Choose one of: {", ".join(GRADER_KINDS)}.']
    elif grader == "code" and reference and (problem := code_grading_problem()):
        errors["grader"] = [problem]
    elif grader and reference and (unusable := reference_problem(grader, reference)):
        errors["reference"] = [unusable]
    if errors:
        raise ValidationError(errors)
    if not reference:
        # A question of a known task (the bundled suite) is scored against its reference.
        match = reference_for_question(question=input)
        if match is not None and not (match.grader == "code" and code_grading_problem()):
            reference, grader = match.reference, match.grader
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
            **dict(extra or {}),
        )
        events.publish(run.pk, wire.RUN_STATUS, {"status": Run.Status.QUEUED.value})
        if enqueue:
            from orchestrator.services.execution import run_enqueue

            run_id = run.pk
            # robust: a broker that is away does not turn a stored run into an error; the run
            # stays queued and the workers' sweep enqueues it again (orchestrator/tasks.py).
            transaction.on_commit(lambda: run_enqueue(run_id=run_id), robust=True)
        run.refresh_from_db(fields=["last_seq"])
    return run


def strategy_problems(
    *, pool: Pool, strategy: str, options: Mapping[str, Any]
) -> dict[str, list[str]]:
    """What is wrong with running ``strategy`` with ``options`` on ``pool``, keyed by field
    (pool, strategy, strategy_options); empty when it can run there."""
    errors: dict[str, list[str]] = {}
    enabled_workers = pool.workers.filter(enabled=True).count()
    if enabled_workers == 0:
        errors["pool"] = [f'Pool "{pool.name}" has no enabled worker.']
    if strategy not in STRATEGIES:
        errors["strategy"] = [
            f'Unknown strategy "{strategy}". Choose one of: {", ".join(STRATEGIES)}.'
        ]
        return errors
    try:
        built = build_strategy(strategy, conductor=_VALIDATION_ONLY_CLIENT, options=dict(options))
    except ValueError as error:
        errors["strategy_options"] = [str(error)]
        return errors
    problem = _worker_option_problem(options, enabled_workers)
    if problem and enabled_workers:
        errors["strategy_options"] = [problem]
    elif enabled_workers:
        try:
            check_fits(built, pool_size=enabled_workers, settings=run_settings_for(pool))
        except ValueError as error:
            errors["strategy_options"] = [str(error)]
    return errors


def text_size_problem(text: str) -> str:
    """Why ``text`` is too long for a question or a reference, or "" when it fits within
    ``settings.CONDUCTOR_MAX_TEXT_BYTES`` (UTF-8 bytes)."""
    limit = settings.CONDUCTOR_MAX_TEXT_BYTES
    if len(text) * 4 <= limit:  # no character takes more than four bytes
        return ""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return ""
    in_kb = f" ({limit // 1024} KB)" if limit % 1024 == 0 else ""
    return (
        f"Too long: {size:,} bytes in UTF-8; the limit is {limit:,} bytes{in_kb} "
        "(CONDUCTOR_MAX_TEXT_BYTES)."
    )


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
    claim: Claim
    pool: Pool
    workers: list[Worker]
    plans: list[Plan]
    steps: list[Step]
    # Plan and step ids taken for the rows it will store (PostgreSQL; see ``_claim_and_load``).
    ids_ahead: tuple[list[int], list[int]] = ([], [])
    replay: ReplayState | None = None

    def resume(self) -> ResumeState:
        if self.replay is not None:
            return self.replay.resume
        return resume_state_from_rows(self.plans, self.steps)

    def totals(self) -> dict[str, Any]:
        return {field: getattr(self.run, field) for field in wire.TOTAL_FIELDS}


def run_watch(*, run_id: int) -> None:
    """Have the run's live events sent to its channel group from now on (``Run.watched``;
    before, an execution stores them without sending them there). A subscriber calls this after
    joining the group and before it reads what is stored: an event stored before the mark is in
    what it reads, one stored after is sent to it (the storing statement reads the mark under
    the run row's lock). Read first: a write only the first time (on SQLite a write waits for
    the database's one writer, a run's batch included). Callers check who may watch."""
    unmarked = Run.objects.filter(pk=run_id, watched=False)
    if unmarked.exists():
        unmarked.update(watched=True)


def run_execute(
    *,
    run_id: int,
    executor: str | None = None,
    exclusive: bool = False,
    resumable: bool = False,
) -> None:
    """Execute a run to its end, from sync code (a Celery task, the CLI).

    ``resumable``: see ``run_execute_async``.
    Runs ``run_execute_async`` on a fresh event loop; its database work comes back to the
    calling thread, so it uses this thread's connection (and transaction, in tests).
    Must not be called from a thread that runs an event loop.
    """
    async_to_sync(run_execute_async)(
        run_id=run_id, executor=executor, exclusive=exclusive, resumable=resumable
    )


async def run_execute_async(
    *,
    run_id: int,
    observer: RunObserver | None = None,
    executor: str | None = None,
    exclusive: bool = False,
    resumable: bool = False,
) -> None:
    """Execute a run: plan, call the workers, store every step and publish its events.

    A finished run is not executed again. A run executed before (a worker died mid-run) resumes:
    its stored plans are not made again and its succeeded steps are never sent to their model
    again. ``observer`` hears every callback after it is stored (the CLI prints from it).
    Model failures end the run as failed with the engine's error. Any other exception marks the
    run failed with a short error and propagates; a cancelled run stops quietly.

    The execution first claims the run (``services/ownership.py``) as ``executor`` (a new token
    by default): leased and renewed by a heartbeat, or, with ``exclusive``, taken over because
    the caller holds an exclusive lease elsewhere (Celery's). A run another execution holds is
    not executed; one taken over while this execution runs is stopped as soon as storing a
    callback finds it (at once, a model call in flight with it: see ``_execute_recorded``).

    With ``resumable`` (the caller executes the run again later: the Celery task retries), a
    database that is away or full is not the run's fault: the error propagates and the run is
    left as it is, to be resumed.
    """
    execution = await sync_to_async(_load_execution)(
        run_id=run_id, executor=executor or new_executor_token(), exclusive=exclusive
    )
    if execution is None:
        logger.info("run %s is finished, gone or held elsewhere; not executing it", run_id)
        return
    run = execution.run
    claim = execution.claim
    heartbeat = asyncio.create_task(_keep_claim(claim)) if claim.lease_seconds else None
    recorder: RecordingObserver | None = None
    # Calls this run makes to a pool of a Conductor Studio server nest one level deeper.
    nested_depth.set(run.depth + 1)
    try:
        workers = [
            _worker_info(worker, execution.pool, run.worker_params) for worker in execution.workers
        ]
        conductor = _conductor_client(execution.pool) if run.strategy == "conductor" else None
        strategy = build_strategy(
            run.strategy,
            conductor=conductor,
            options=dict(run.strategy_options or {}),
            conductor_slots=_slots(
                f"conductor:{execution.pool.pk}", execution.pool.conductor_max_concurrency
            ),
        )
        if execution.replay is not None:
            strategy = replay_strategy(strategy, execution.replay)
        recorder = RecordingObserver(
            run_id=run_id,
            worker_ids=[worker.pk for worker in execution.workers],
            reference=run.reference,
            grader=run.grader,
            steps=execution.steps,
            plan_rounds=[plan.round for plan in execution.plans],
            totals=execution.totals(),
            status=run.status,
            fence=claim.fence,
            last_seq=run.last_seq,
            ids_ahead=execution.ids_ahead,
            # An observer of the caller's hears each callback once it is stored.
            write_behind=observer is None,
        )
        recorder.listen_for_committed()
        await _execute_recorded(
            recorder,
            question=run.input,
            strategy=strategy,
            workers=workers,
            settings=run_settings_for(execution.pool),
            observer=_Observers(
                recorder, CallingStepObserver(recorder), *([observer] if observer else [])
            ),
            resume=execution.resume(),
        )
    except RunClosed as closed:
        logger.info("run %s finished elsewhere (%s); execution stopped", run_id, closed)
    except RunTakenOver:
        logger.warning("run %s was taken over by another execution; this one stopped", run_id)
    except (OperationalError, InterfaceError) as error:
        if not resumable:
            if recorder is not None:  # what was stored goes out before run.finished
                await _flush_quietly(recorder)
            await sync_to_async(run_fail)(
                run_id=run_id, error=short_error(error), fence=claim.fence
            )
            run_trace_enqueue(run_id=run_id)
        elif recorder is not None:  # nothing taken is stored after the claim is let go
            await _flush_quietly(recorder)
        # Let go if the database allows it (a retry takes the run over in any case).
        with contextlib.suppress(OperationalError, InterfaceError):
            await sync_to_async(run_claim_release)(claim=claim)
        raise
    except Exception as error:
        if recorder is not None:  # what was stored before the error goes out before run.finished
            await _flush_quietly(recorder)
        await sync_to_async(run_fail)(run_id=run_id, error=short_error(error), fence=claim.fence)
        await sync_to_async(run_claim_release)(claim=claim)
        run_trace_enqueue(run_id=run_id)
        raise
    else:
        run_trace_enqueue(run_id=run_id)
    finally:
        if heartbeat is not None:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        if recorder is not None:
            await _flush_quietly(recorder)
            recorder.stop_listening()
            await asyncio.sleep(0)  # events others committed meanwhile, handed to this loop
            await _flush_quietly(recorder)
    # Not on BaseException: a process being killed (or its loop stopped) cannot let go here;
    # its lease lapses, or its exit lets go (see ownership.py). A run this execution finished
    # is never claimed again: its row keeps who executed it, and saves a write.
    if recorder is not None and recorder.recorder.status in Run.FINISHED:
        run_claim_forget(claim=claim)
    else:
        await sync_to_async(run_claim_release)(claim=claim)


async def _execute_recorded(recorder: RecordingObserver, **arguments: Any) -> None:
    """``execute_run``, stopped at once if storing one of its callbacks raises (the run was
    cancelled or finished elsewhere, taken over, the database failed): the recorder cancels this
    task, model calls in flight with it, and the error is raised here as if the callback had
    raised it. A cancel from elsewhere (``run_stop_inline``) stays a cancel."""
    task = asyncio.current_task()
    assert task is not None
    requested = False

    def stop() -> None:
        nonlocal requested
        requested = True
        task.cancel()

    recorder.stop = stop
    try:
        await execute_run(**arguments)
    except asyncio.CancelledError:
        if not requested:
            raise
        requested = False
        if task.uncancel() > 0 or recorder.stopped_by is None:
            raise  # a cancel from elsewhere too: it stays a cancel
        raise recorder.stopped_by from None
    finally:
        recorder.stop = None
        if requested:
            # The cancel this function asked for did not come out as such (another exception
            # left first): withdrawn, so that it never reaches what this task does next.
            task.uncancel()


async def _flush_quietly(recorder: RecordingObserver) -> None:
    """Send what the execution stored and has not sent yet; a failure to send is logged (the
    events are stored, and a client that reconnects gets them)."""
    try:
        await recorder.flush()
    except Exception:
        logger.exception("run %s: could not send its live events", recorder.recorder.run_id)


async def _keep_claim(claim: Claim) -> None:
    """Renew a leased claim every third of a lease until cancelled or lost."""
    interval = claim.lease_seconds / 3
    while True:
        await asyncio.sleep(interval)
        try:
            held = await sync_to_async(run_claim_renew)(claim=claim)
        except Exception:  # a database blip: the lease may survive it; try at the next beat
            logger.warning("could not renew the claim on run %s", claim.run_id, exc_info=True)
            continue
        if not held:  # finished, or taken over: the recorder's fence stops this execution
            return


def short_error(error: BaseException) -> str:
    """One line naming an unexpected error, for the run's page (the traceback goes to the log)."""
    text = " ".join(str(error).split())
    message = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return message[:MAX_ERROR_LENGTH]


def _load_execution(*, run_id: int, executor: str, exclusive: bool) -> _Execution | None:
    lease_seconds = None if exclusive else settings.CONDUCTOR_RUN_LEASE_SECONDS
    ids_ahead: tuple[list[int], list[int]] = ([], [])
    if can_store_in_one_statement():  # PostgreSQL: the claim and the load in one round trip
        loaded = _claim_and_load(run_id=run_id, executor=executor, lease_seconds=lease_seconds)
        if loaded is None:
            return None
        claim, run, pool, workers, ids_ahead = loaded
    else:
        claim = run_claim(run_id=run_id, executor=executor, lease_seconds=lease_seconds)
        if claim is None:
            return None
        run, pool, workers = _run_pool_and_workers(run_id)
    # Every plan or step the recorder stores comes with its events, in the same transaction: a
    # queued run that has published nothing since its creation has none to resume from.
    fresh = run.status == Run.Status.QUEUED and run.last_seq <= 1
    execution = _Execution(
        run=run,
        claim=claim,
        pool=pool,
        workers=workers,
        plans=[] if fresh else list(Plan.objects.filter(run_id=run_id).order_by("round")),
        steps=[] if fresh else list(Step.objects.filter(run_id=run_id).order_by("round", "index")),
        ids_ahead=ids_ahead,
    )
    if run.replay_of_id is not None:  # resumes from its source's results (services/replay.py)
        execution.replay = replay_execution_state(
            run=run, plans=execution.plans, steps=execution.steps, workers=execution.workers
        )
    return execution


def _run_pool_and_workers(run_id: int) -> tuple[Run, Pool, list[Worker]]:
    """``Run.objects.select_related("pool").get(pk=run_id)`` and the pool's enabled workers in
    order (``position``, ``id``), in one statement of plain SQL (a row per worker): every
    execution loads them, and the ORM took longer to build the queries than the database to
    answer them."""
    run_table = current().ops.quote_name(Run._meta.db_table)
    with hot_cursor() as cursor:
        cursor.execute(
            _run_pool_and_workers_sql(
                f"SELECT {model_columns(Run).sql}",
                "",
                f"FROM {run_table}",
                run_table,
                f"{run_table}.id = %s",
            ),
            [True, run_id],
        )
        rows = cursor.fetchall()
    if not rows:
        raise Run.DoesNotExist(f"run {run_id} does not exist")
    return _run_pool_and_workers_from(rows)


def _run_pool_and_workers_sql(select: str, more: str, source: str, run: str, where: str) -> str:
    """The SELECT of ``_run_pool_and_workers``: ``select`` names the run's columns (those of
    ``model_columns(Run)``, in order), the pool's and the workers' follow, then ``more``;
    ``source`` is the FROM clause that holds the run's row, ``run`` its name there, and
    ``where`` picks it."""
    pool_columns, worker_columns = model_columns(Pool), model_columns(Worker)
    quote = current().ops.quote_name
    pool_table, worker_table = quote(Pool._meta.db_table), quote(Worker._meta.db_table)
    return (
        f"{select}, {pool_columns.sql}, {worker_columns.sql}{more} {source} "
        f"JOIN {pool_table} ON {pool_table}.id = {run}.pool_id "
        f"LEFT JOIN {worker_table} ON {worker_table}.{quote('pool_id')} = {pool_table}.id "
        f"AND {worker_table}.{quote('enabled')} = %s WHERE {where} "
        f"ORDER BY {worker_table}.{quote('position')}, {worker_table}.{quote('id')}"
    )


def _run_pool_and_workers_from(rows: Sequence[Sequence[Any]]) -> tuple[Run, Pool, list[Worker]]:
    run_columns, pool_columns = model_columns(Run), model_columns(Pool)
    worker_columns = model_columns(Worker)
    pool_end = run_columns.count + pool_columns.count
    worker_end = pool_end + worker_columns.count
    run = run_columns.instance(rows[0][: run_columns.count])
    pool = pool_columns.instance(rows[0][run_columns.count : pool_end])
    run.pool = pool
    workers = [
        worker_columns.instance(row[pool_end:worker_end])
        for row in rows
        if row[pool_end] is not None
    ]
    return run, pool, workers


# Step ids taken when a run is claimed (PostgreSQL): enough for most first rounds, whose rows are
# then stored without a statement of their own to take ids (a larger round takes the rest then).
STEP_IDS_AHEAD = 8


def _claim_and_load(
    *, run_id: int, executor: str, lease_seconds: float | None
) -> tuple[Claim, Run, Pool, list[Worker], tuple[list[int], list[int]]] | None:
    """``run_claim`` and ``_run_pool_and_workers`` in one statement (PostgreSQL: one round trip
    where they took two), which also takes ids ahead for the run's first plans (two: its first
    round and the next) and ``STEP_IDS_AHEAD`` steps. None if the run cannot be claimed now."""
    claim_sql, claim_params = claim_update(
        run_id=run_id, executor=executor, lease_seconds=lease_seconds
    )
    run_columns = model_columns(Run)
    ahead, ahead_params = ids_columns([(Plan, 2), (Step, STEP_IDS_AHEAD)], counts_in_text=True)
    # A statement's parts see the rows as they were before it: the run's row is the claim's.
    # Its commit need not wait for the disk (``not_durable_select``): a claim lost with the
    # database server's crash is one that the crash ends anyway (the execution's next write
    # finds its connection gone, or the fence no longer its own, and stops; the run is resumed).
    sql = _run_pool_and_workers_sql(
        f"WITH run_row AS ({claim_sql} RETURNING {run_columns.sql}), "
        f"ahead AS MATERIALIZED (SELECT {ahead}), "
        f"not_durable AS MATERIALIZED ({not_durable_select()}) SELECT run_row.*",
        ", ahead.*",
        "FROM run_row CROSS JOIN ahead CROSS JOIN not_durable",
        "run_row",
        "true",
    )
    # In a caller's transaction (tests), a savepoint: a refused claim leaves that transaction
    # as it was.
    with transaction.atomic() if current().in_atomic_block else contextlib.nullcontext():
        rows = fetch_bound(sql, [*claim_params, *ahead_params, True])
    if not rows:
        return None
    run, pool, workers = _run_pool_and_workers_from(rows)
    claim = claim_taken(
        run_id=run_id,
        executor=executor,
        lease_seconds=lease_seconds,
        fence=run.fence,
        interruptions=run.interruptions,
    )
    if claim is None:
        return None
    return claim, run, pool, workers, (list(rows[0][-2]), list(rows[0][-1]))


def run_settings_for(pool: Pool) -> RunSettings:
    """The engine's bounds for runs on ``pool``."""
    return RunSettings(
        max_steps=pool.max_steps,
        max_rounds=pool.max_rounds,
        access_mode=pool.access_mode,
        prompt_style=pool.conductor_prompt_style,
        show_worker_names=pool.show_worker_names,
        step_timeout=pool.step_timeout,
        conductor_output=pool.conductor_output,
        plan_fallback=pool.plan_fallback,
        token_budget=pool.token_budget,
        cost_budget=pool.cost_budget,
    )


def _worker_info(
    worker: Worker, pool: Pool, run_params: Mapping[str, Any] | None = None
) -> WorkerInfo:
    """The engine's view of a worker; ``run_params`` (the run's own call parameters, such as a
    temperature asked for over /v1) override the worker's. A call's output is bounded by the
    worker's ``max_tokens``, else the pool's ``worker_max_tokens``, unless its parameters
    bound it themselves."""
    from orchestrator.providers import worker_info

    max_tokens = worker.max_tokens if worker.max_tokens is not None else pool.worker_max_tokens
    return worker_info(
        worker,
        extra_params=run_params,
        max_tokens=max_tokens,
        slots=_slots(f"worker:{worker.pk}", worker.max_concurrency),
    )


def _slots(name: str, limit: int | None):
    """A concurrency bound on calls: in Redis when the deployment has it (every process that
    executes runs holds the same bound), in this process otherwise; None when unbounded."""
    from orchestrator.providers.slots import slots_for

    return slots_for(
        name, limit, redis_url=settings.REDIS_URL, ttl=settings.CONDUCTOR_SLOT_TTL_SECONDS
    )


def _conductor_client(pool: Pool):
    """The conductor's client: its calls bounded by ``conductor_max_tokens`` unless its
    parameters bound them themselves."""
    from orchestrator.providers import bounded_params, make_client

    return make_client(
        pool.conductor_model,
        api_base=pool.conductor_api_base,
        api_key_env=pool.conductor_api_key_env,
        params=bounded_params(pool.conductor_params or {}, pool.conductor_max_tokens),
        json_dialect=pool.conductor_json_dialect,
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


# How long a cancel request waits for SQLite's write lock before it is queued (the request then
# answers at once and the cancel is written in the background), and how long it is retried then.
CANCEL_WAIT_SECONDS = 3.0
CANCEL_RETRY_SECONDS = 600.0
_CANCEL_FIRST_BACKOFF = 0.05
_CANCEL_MAX_BACKOFF = 1.0


def run_cancel(
    *, run_id: int, wait: float = CANCEL_WAIT_SECONDS, sleep: Callable[[float], None] = time.sleep
) -> Run:
    """Cancel a run that has not finished; a finished run is returned unchanged.

    Ends the run's running steps as cancelled and its pending ones as skipped, then publishes
    ``run.finished`` (status cancelled, ``closed_steps``): the run's last event, as an execution
    in progress stores nothing more (an inline one in this process is stopped after the commit).

    On SQLite a long write of another run can hold the database's write lock: the write is
    retried with backoff for ``wait`` seconds; if the lock is still held, the run's inline task
    is stopped, the cancel is queued (written by a background thread as soon as the lock frees)
    and the run is returned not finished yet. Callers answer "accepted" then.
    """
    run = _write_retrying_while_locked(lambda: _cancel(run_id), seconds=wait, sleep=sleep)
    if run is not None:
        return run
    from orchestrator.services.execution import run_stop_inline

    logger.warning("run %s: the database stayed locked; the cancel is queued", run_id)
    run_stop_inline(run_id=run_id)
    threading.Thread(
        target=_cancel_in_background, args=(run_id,), name=f"cancel run {run_id}", daemon=True
    ).start()
    return Run.objects.get(pk=run_id)


def _cancel(run_id: int) -> Run:
    with transaction.atomic():
        open_steps = lock_open_steps(run_id=run_id)  # steps first, as the recorder takes them
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_finished:
            return run
        run.save(update_fields=run_set_end(run=run, status=Run.Status.CANCELLED, error=run.error))
        closed = close_open_steps(
            run_id=run_id, open_steps=open_steps, why=run_end_reason(run.status), at=run.finished_at
        )
        events.publish(run_id, wire.RUN_FINISHED, wire.finished_data_of(run, closed))
        from orchestrator.services.execution import run_stop_inline

        transaction.on_commit(lambda: run_stop_inline(run_id=run_id))
        transaction.on_commit(lambda: run_trace_enqueue(run_id=run_id))
    return run


def _cancel_in_background(run_id: int) -> None:
    from django.db import connections

    try:
        run = _write_retrying_while_locked(
            lambda: _cancel(run_id), seconds=CANCEL_RETRY_SECONDS, sleep=time.sleep
        )
        if run is None:
            logger.error("run %s: could not store its cancel; the database stayed locked", run_id)
    except Exception:
        logger.exception("run %s: storing its cancel failed", run_id)
    finally:
        connections.close_all()  # this thread's own connections only


def _write_retrying_while_locked(
    write: Callable[[], Run], *, seconds: float, sleep: Callable[[float], None]
) -> Run | None:
    """``write()``, tried again with growing pauses while SQLite reports the database locked,
    for about ``seconds``; None if it never got the lock. Other errors propagate."""
    deadline = time.monotonic() + seconds
    backoff = _CANCEL_FIRST_BACKOFF
    while True:
        remaining = deadline - time.monotonic()
        try:
            with _sqlite_busy_timeout(max(0.05, min(remaining, 1.0))):
                return write()
        except OperationalError as error:
            if not _database_locked(error):
                raise
        if time.monotonic() + backoff >= deadline:
            return None
        sleep(backoff)
        backoff = min(backoff * 2, _CANCEL_MAX_BACKOFF)


def _database_locked(error: OperationalError) -> bool:
    text = str(error).lower()
    return "database is locked" in text or "database is busy" in text


@contextmanager
def _sqlite_busy_timeout(seconds: float) -> Iterator[None]:
    """Wait at most ``seconds`` for SQLite's write lock (instead of the connection's long
    default), so a starved write is retried with backoff rather than failing after it."""
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        yield
        return
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        (before,) = cursor.fetchone()
        cursor.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {int(before)}")


__all__ = [
    "default_grader",
    "text_size_problem",
    "run_cancel",
    "run_create",
    "run_execute",
    "run_execute_async",
    "run_settings_for",
    "short_error",
]
