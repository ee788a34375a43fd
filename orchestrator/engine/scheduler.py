"""The async scheduler: the one code path that runs a workflow.

Each round a strategy writes a workflow; every step starts as soon as the steps it reads have
succeeded, so independent steps run at the same time. After a round the strategy sees the final
response and may write another workflow or accept it. Model failures are retried with backoff,
recorded on the step and fail the run cleanly; anything else is a bug and propagates.

Cost is linear in steps plus access edges: a step waits on a counter of unfinished reads, and a
finishing step wakes only the steps that read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine import context
from orchestrator.engine.types import (
    Completion,
    Message,
    ModelClient,
    ModelError,
    NullObserver,
    PlanRecord,
    ResumeState,
    RunObserver,
    RunResult,
    RunSettings,
    Slots,
    StepAttempt,
    StepRecord,
    Strategy,
    Totals,
    WorkerInfo,
    Workflow,
)

Sleep = Callable[[float], Awaitable[object]]
"""How to wait between retries; injected so tests run instantly."""


@dataclass(slots=True)
class CallOutcome:
    """The end of a model call with retries: the completion (None if every attempt failed) and
    the error of the last failed attempt ("" if the first attempt succeeded). ``log`` has every
    attempt when one failed (empty when the first one succeeded). ``queued``: seconds waited
    for a slot over every attempt; ``last_queued``: the last attempt's."""

    completion: Completion | None
    attempts: int
    latency: float
    error: str = ""
    log: list[StepAttempt] = field(default_factory=list)
    queued: float = 0.0
    last_queued: float = 0.0


async def call_with_retries(
    client: ModelClient,
    messages: Sequence[Message],
    *,
    settings: RunSettings,
    sleep: Sleep = asyncio.sleep,
    on_failed_attempt: Callable[[str, float, float], None] | None = None,
    schema: Mapping[str, Any] | None = None,
    slots: Slots | None = None,
) -> CallOutcome:
    """Call ``client`` under the step timeout, retrying retryable ModelErrors with backoff.

    Waits ``settings.backoff * 2 ** (attempt - 1)`` before attempt ``attempt + 1``, for at most
    ``settings.max_attempts`` attempts. With ``slots``, each attempt first waits for a free slot
    and holds it for its call only (not over a backoff); the step timeout counts from the
    call's start, never the wait. ``on_failed_attempt(error, seconds, queued)`` hears of every
    attempt that failed (the conductor records each as a PlanAttempt); the outcome's ``log``
    has every attempt, with the backoff waited after it, once one failed (a step stores it).
    ``latency`` is that of the successful call: what the client reported, else what was
    measured. Only ModelError is caught.
    A ModelError that is not retryable (a ConfigurationError always: a missing key, a refused
    key, an unknown model) ends the call after that one attempt. ``schema`` goes to the client
    when given (the conductor's plan in "json" output).
    """
    timeout = settings.step_timeout
    attempt = 0
    last_error = ""
    log: list[StepAttempt] = []
    first = 0.0
    queued = 0.0
    while True:
        attempt += 1
        waiting = time.perf_counter()
        if attempt == 1:
            first = waiting
        error: ModelError | None
        async with slots.hold() if slots is not None else contextlib.nullcontext():
            started = waiting if slots is None else time.perf_counter()
            try:
                async with asyncio.timeout(timeout):
                    if schema is None:
                        completion = await client.complete(messages, timeout=timeout)
                    else:
                        completion = await client.complete(messages, timeout=timeout, schema=schema)
            except TimeoutError:
                error = ModelError(f"timed out after {timeout:g}s", retryable=True)
            except ModelError as model_error:
                error = model_error
            else:
                error = None
            ended = time.perf_counter()
        waited = started - waiting
        queued += waited
        if error is None:
            latency = completion.latency or (ended - started)
            if log:
                log.append(StepAttempt(attempt, started - first, ended - started))
            return CallOutcome(completion, attempt, latency, last_error, log, queued, waited)
        last_error = str(error) or type(error).__name__
        if on_failed_attempt is not None:
            on_failed_attempt(last_error, ended - started, waited)
        failed = StepAttempt(attempt, started - first, ended - started, last_error)
        log.append(failed)
        if not error.retryable or attempt >= settings.max_attempts:
            return CallOutcome(None, attempt, 0.0, last_error, log, queued, waited)
        failed.backoff = settings.backoff * 2 ** (attempt - 1)
        await sleep(failed.backoff)


async def execute_run(
    *,
    question: str,
    strategy: Strategy,
    workers: Sequence[WorkerInfo],
    settings: RunSettings = RunSettings(),
    observer: RunObserver | None = None,
    resume: ResumeState | None = None,
    sleep: Sleep = asyncio.sleep,
) -> RunResult:
    """Run ``question`` through ``strategy``'s workflows on ``workers`` and say how it ended.

    ``resume`` supplies plans that are not made again and succeeded steps that are not called
    again (their responses feed later steps; their usage counts in the totals unless they are
    another run's, ``reused_from``). ``run_finished``
    fires exactly once for a run that succeeded or failed; a bug or a cancellation propagates
    instead, after the running steps are cancelled. A failed run's steps that never started end
    ``skipped``, their error saying why.
    """
    run = _Run(
        question=question,
        strategy=strategy,
        workers=workers,
        settings=settings,
        observer=observer or NullObserver(),
        resume=resume or ResumeState(),
        sleep=sleep,
    )
    result = await run.execute()
    await run.observer.run_finished(result)
    return result


def end_reason(status: str, why: str) -> str:
    """The error of a step the run's end closed: ``cancelled`` while it ran, ``skipped`` before
    it started; ``why`` says how the run ended."""
    if status == "cancelled":
        return f"Stopped while running: {why}"
    return f"Not run: {why}"


class _Run:
    """The mutable state of one run; lives only inside execute_run."""

    def __init__(
        self,
        *,
        question: str,
        strategy: Strategy,
        workers: Sequence[WorkerInfo],
        settings: RunSettings,
        observer: RunObserver,
        resume: ResumeState,
        sleep: Sleep,
    ) -> None:
        self.question = question
        self.strategy = strategy
        self.workers = workers
        self.settings = settings
        self.observer = observer
        self.resume = resume
        self.sleep = sleep
        self.totals = Totals()
        self.plans: list[PlanRecord] = []
        self.steps: list[StepRecord] = []
        self.error = ""

    async def execute(self) -> RunResult:
        started = time.perf_counter()
        answer = ""
        previous_answer: str | None = None
        rounds = self.settings.max_rounds
        if self.strategy.max_rounds is not None:
            # Asking a fixed strategy for a round it never plans would show "planning" for nothing.
            rounds = min(rounds, self.strategy.max_rounds)
        for round_ in range(rounds):
            plan = await self._plan(round_, previous_answer)
            if plan is None:
                break
            workflow = plan.workflow
            if workflow is None:
                self.error = plan.error or f"round {round_}: the strategy wrote no workflow"
                break
            if workflow.accepts:
                if previous_answer is None:
                    self.error = f"round {round_}: the workflow accepts, but there is no answer yet"
                break
            problem = _workflow_problem(workflow, len(self.workers))
            if problem:
                self.error = f"round {round_}: invalid workflow: {problem}"
                break
            limit = self.settings.max_run_steps
            if len(self.steps) + len(workflow.steps) > limit:
                self.error = (
                    f"round {round_}: the workflow would bring the run to "
                    f"{len(self.steps) + len(workflow.steps)} steps, but the pool allows at "
                    f"most {limit} ({self.settings.max_steps} steps per round × "
                    f"{self.settings.max_rounds} rounds)"
                )
                break
            records = self._records(round_, workflow)
            self.steps.extend(records)
            if round_ not in self.resume.plans or round_ in self.resume.unrecorded:
                await self.observer.plan_created(plan, records)
            await _RoundExecution(self, workflow, records).execute()
            if self.error:
                break
            answer = previous_answer = records[-1].response
            expected = self.resume.kept_if.get(round_)
            if expected is not None and answer != expected:
                # A replay: the later rounds were planned from another answer; plan them again.
                self.resume.forget_after(round_)
        if not self.error and previous_answer is None:
            self.error = "the strategy wrote no workflow to run"
        if self.error:
            # A failed run leaves no step waiting: the ones it never started say why.
            for record in self.steps:
                if record.status == "pending":
                    record.status = "skipped"
                    record.error = end_reason("skipped", f"the run failed: {self.error}")
        self.totals.wall_time = time.perf_counter() - started
        return RunResult(
            status="failed" if self.error else "succeeded",
            answer="" if self.error else answer,
            error=self.error,
            plans=self.plans,
            steps=self.steps,
            totals=self.totals,
        )

    async def _plan(self, round_: int, previous_answer: str | None) -> PlanRecord | None:
        plan = self.resume.plans.get(round_)
        if plan is None:
            over = self.over_budget()
            if over:
                self.error = over
                return None
            await self.observer.planning(round_)
            try:
                plan = await self.strategy.plan(
                    round=round_,
                    question=self.question,
                    workers=self.workers,
                    settings=self.settings,
                    previous_answer=previous_answer,
                )
            except ModelError as error:
                self.error = f"round {round_}: planning failed: {error}"
                return None
            if plan is None:
                return None
        self.plans.append(plan)
        if plan.reused_from is not None:
            return plan  # another run's conductor calls: not counted again
        totals = self.totals
        for attempt in plan.attempts:
            totals.tokens_in += attempt.tokens_in
            totals.tokens_out += attempt.tokens_out
            totals.cost += attempt.cost
            totals.model_calls += 1
        return plan

    def _records(self, round_: int, workflow: Workflow) -> list[StepRecord]:
        """Step records for the round: a resumed record where one succeeded with the same spec."""
        done = self.resume.steps
        workers = self.workers
        totals = self.totals
        records = []
        for index, spec in enumerate(workflow.steps):
            record = done.get((round_, index))
            if record is not None and record.status == "succeeded" and record.spec == spec:
                if record.reused_from is not None:
                    records.append(record)  # another run's result: its usage is not counted
                    continue
                totals.tokens_in += record.tokens_in
                totals.tokens_out += record.tokens_out
                totals.cost += record.cost
                totals.model_calls += record.attempts
            else:
                worker = workers[spec.worker]
                record = StepRecord(
                    round=round_,
                    index=index,
                    spec=spec,
                    worker_name=worker.name,
                    model=worker.model,
                    reads=workflow.reads(index),
                )
            records.append(record)
        return records

    def over_budget(self) -> str:
        """Why no further model call may start, or "" while both budgets allow it."""
        settings = self.settings
        totals = self.totals
        if settings.token_budget is not None:
            used = totals.tokens_in + totals.tokens_out
            if used >= settings.token_budget:
                return f"token budget exhausted: {used} of {settings.token_budget} tokens used"
        if settings.cost_budget is not None and totals.cost >= settings.cost_budget:
            return f"cost budget exhausted: ${totals.cost:.4f} of ${settings.cost_budget:.4f} used"
        return ""


def _workflow_problem(workflow: Workflow, pool_size: int) -> str:
    """What would make this workflow impossible to run, or "". Parsed plans never have one;
    fixed strategies and stored plans are checked here because a bad worker option lands here."""
    for index, spec in enumerate(workflow.steps):
        if not 0 <= spec.worker < pool_size:
            return f"step {index} names worker {spec.worker}, but the pool has {pool_size} workers"
        if spec.access != "all":
            for read in spec.access:
                if not 0 <= read < index:
                    return f"step {index} reads step {read}, which is not an earlier step"
    return ""


class _RoundExecution:
    """Runs the steps of one round as asyncio tasks, each started when its reads are done."""

    def __init__(self, run: _Run, workflow: Workflow, records: list[StepRecord]) -> None:
        self.run = run
        self.workflow = workflow
        self.records = records
        self.responses: dict[int, str] = {}
        self.waiting_on: list[int] = []
        self.readers: list[list[int]] = [[] for _ in records]
        self.tasks: set[asyncio.Task[None]] = set()
        self.bug: BaseException | None = None
        self.all_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def execute(self) -> None:
        records = self.records
        ready = []
        for index, record in enumerate(records):
            if record.status == "succeeded":
                self.responses[index] = record.response
        for index, record in enumerate(records):
            unfinished = 0
            if record.status != "succeeded":
                for read in set(record.reads):
                    if read not in self.responses:
                        self.readers[read].append(index)
                        unfinished += 1
                if unfinished == 0:
                    ready.append(index)
            self.waiting_on.append(unfinished)
        for index in ready:
            self._start(index)
        if not self.tasks:
            return
        try:
            await self.all_done
        except BaseException:
            await self._cancel_all()
            raise
        if self.bug is not None:
            await self._cancel_all()
            raise self.bug

    def _start(self, index: int) -> None:
        run = self.run
        if run.error or self.bug is not None:
            return
        over = run.over_budget()
        if over:
            run.error = over
            return
        task = asyncio.create_task(self._step(index))
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self.bug is None:
            self.bug = task.exception()
        if (not self.tasks or self.bug is not None) and not self.all_done.done():
            self.all_done.set_result(None)

    async def _cancel_all(self) -> None:
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _step(self, index: int) -> None:
        run = self.run
        record = self.records[index]
        worker = run.workers[record.spec.worker]
        record.messages = context.build_messages(
            question=run.question,
            workflow=self.workflow,
            index=index,
            responses=self.responses,
            worker=worker,
            settings=run.settings,
        )
        record.status = "running"
        await run.observer.step_started(record)
        outcome = await call_with_retries(
            worker.client,
            record.messages,
            settings=run.settings,
            sleep=run.sleep,
            slots=worker.slots,
        )
        record.queued = outcome.queued
        record.attempts = outcome.attempts
        record.error = outcome.error
        record.attempt_log = outcome.log
        totals = run.totals
        totals.model_calls += outcome.attempts
        completion = outcome.completion
        if completion is None:
            record.status = "failed"
            if not run.error:
                run.error = (
                    f"step {record.round}.{index} ({record.worker_name}) failed: {outcome.error}"
                )
            await run.observer.step_failed(record)
            return
        record.status = "succeeded"
        record.response = completion.text
        record.tokens_in = completion.tokens_in
        record.tokens_out = completion.tokens_out
        record.cost = completion.cost
        record.latency = outcome.latency
        totals.tokens_in += completion.tokens_in
        totals.tokens_out += completion.tokens_out
        totals.cost += completion.cost
        self.responses[index] = completion.text
        await run.observer.step_finished(record)
        waiting_on = self.waiting_on
        for reader in self.readers[index]:
            waiting_on[reader] -= 1
            if waiting_on[reader] == 0:
                self._start(reader)
