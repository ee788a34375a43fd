"""The prompted conductor: a chat model asked, in our own prompt, to write the workflow.

Any model behind a ModelClient can serve: a general chat model, a fine-tuned conductor behind an
OpenAI-compatible server, or the offline simulated conductor. It writes the three lists
(``conductor_output`` "text") or one JSON object of steps, asked of the server as output
constrained to ``plan.plan_schema`` ("json"). Output that cannot be used is shown back to the
model with the error, a bounded number of times; then the pool's ``plan_fallback`` fails the
run or stands in (the first worker answers alone), marked as a fallback on the plan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from orchestrator.engine import prompts
from orchestrator.engine.plan import WorkflowError, parse_plan, plan_schema
from orchestrator.engine.scheduler import Sleep, call_with_retries
from orchestrator.engine.types import (
    Message,
    ModelClient,
    PlanAttempt,
    PlanRecord,
    RunSettings,
    Slots,
    StepSpec,
    WorkerInfo,
    Workflow,
)

NOTHING_TO_ACCEPT = (
    "nothing to accept yet: this is the first round, so write at least one step "
    "(three empty lists only accept an answer from an earlier round)"
)


class PromptedConductor:
    """A Strategy that asks a chat model for each round's workflow and parses its answer.

    Every call is recorded as a PlanAttempt (raw output, why it could not be used, usage); the
    scheduler adds their usage to the run totals. Calls use the same timeout and retry policy as
    steps. After ``settings.max_parse_retries`` repairs without a usable workflow the plan has
    ``workflow=None`` and the last error.
    """

    def __init__(
        self,
        client: ModelClient,
        *,
        name: str = "conductor",
        sleep: Sleep = asyncio.sleep,
        slots: Slots | None = None,
    ) -> None:
        self.client = client
        self.slots = slots
        self.name = name
        self.max_rounds: int | None = None
        self.sleep = sleep

    async def plan(
        self,
        *,
        round: int,
        question: str,
        workers: Sequence[WorkerInfo],
        settings: RunSettings,
        previous_answer: str | None,
        kept: Sequence[StepSpec] = (),
    ) -> PlanRecord:
        """The workflow of ``round``; with ``kept``, written again after those first steps
        (see ``prompts.conductor_messages``)."""
        record = PlanRecord(round=round, strategy=self.name)
        messages: list[Message] = list(
            prompts.conductor_messages(
                question=question,
                workers=workers,
                settings=settings,
                round=round,
                previous_answer=previous_answer,
                kept=kept,
            )
        )

        def record_failed_call(error: str, seconds: float, queued: float) -> None:
            record.attempts.append(PlanAttempt(raw="", error=error, latency=seconds, queued=queued))

        schema = None
        if settings.conductor_output == "json" and workers:
            schema = plan_schema(
                pool_size=len(workers),
                max_steps=settings.max_steps,
                access_mode=settings.access_mode,
                first_round=round == 0,
            )
        for _ in range(settings.max_parse_retries + 1):
            record.messages = messages
            outcome = await call_with_retries(
                self.client,
                messages,
                settings=settings,
                sleep=self.sleep,
                on_failed_attempt=record_failed_call,
                schema=schema,
                slots=self.slots,
            )
            completion = outcome.completion
            if completion is None:
                record.error = f"the conductor could not be reached: {outcome.error}"
                return record
            attempt = PlanAttempt(
                raw=completion.text,
                tokens_in=completion.tokens_in,
                tokens_out=completion.tokens_out,
                cost=completion.cost,
                latency=outcome.latency,
                queued=outcome.last_queued,
            )
            record.attempts.append(attempt)
            record.constrained = completion.constrained
            try:
                parsed = parse_plan(
                    completion.text,
                    pool_size=len(workers),
                    max_steps=settings.max_steps,
                    access_mode=settings.access_mode,
                )
                if parsed.workflow.accepts and round == 0:
                    raise WorkflowError(NOTHING_TO_ACCEPT)
            except WorkflowError as error:
                attempt.error = record.error = str(error)
                messages = [
                    *messages,
                    {"role": "assistant", "content": completion.text},
                    prompts.repair_message(str(error), settings),
                ]
                continue
            record.workflow = parsed.workflow
            record.form = parsed.form
            record.error = ""
            return record
        return fall_back(record, settings=settings, previous_answer=previous_answer)


def fall_back(
    record: PlanRecord, *, settings: RunSettings, previous_answer: str | None
) -> PlanRecord:
    """``record`` (no usable workflow after the repairs) as the pool's ``plan_fallback`` has
    it: unchanged with "fail" (the run fails with its error); with "single", the first worker
    answering the question alone (``fallback`` "single"), or in a later round the answer the
    round before gave, kept (``fallback`` "kept"). The error stays: why the conductor's plan
    could not be used."""
    if settings.plan_fallback != "single" or record.workflow is not None:
        return record
    if previous_answer is None:
        record.workflow = Workflow((StepSpec(0, prompts.SOLVE, ()),))
        record.fallback = "single"
    else:
        record.workflow = Workflow(())
        record.fallback = "kept"
    return record
