"""The prompted conductor: a chat model asked, in our own prompt, to write the three-list workflow.

Any model behind a ModelClient can serve: a general chat model, a fine-tuned conductor behind an
OpenAI-compatible server, or the offline simulated conductor. Output that cannot be used is shown
back to the model with the error, a bounded number of times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from orchestrator.engine import prompts
from orchestrator.engine.plan import WorkflowError, parse_workflow
from orchestrator.engine.scheduler import Sleep, call_with_retries
from orchestrator.engine.types import (
    Message,
    ModelClient,
    PlanAttempt,
    PlanRecord,
    RunSettings,
    StepSpec,
    WorkerInfo,
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
        self, client: ModelClient, *, name: str = "conductor", sleep: Sleep = asyncio.sleep
    ) -> None:
        self.client = client
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

        def record_failed_call(error: str, seconds: float) -> None:
            record.attempts.append(PlanAttempt(raw="", error=error, latency=seconds))

        for _ in range(settings.max_parse_retries + 1):
            record.messages = messages
            outcome = await call_with_retries(
                self.client,
                messages,
                settings=settings,
                sleep=self.sleep,
                on_failed_attempt=record_failed_call,
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
            )
            record.attempts.append(attempt)
            try:
                workflow = parse_workflow(
                    completion.text,
                    pool_size=len(workers),
                    max_steps=settings.max_steps,
                    access_mode=settings.access_mode,
                )
                if workflow.accepts and round == 0:
                    raise WorkflowError(NOTHING_TO_ACCEPT)
            except WorkflowError as error:
                attempt.error = record.error = str(error)
                messages = [
                    *messages,
                    {"role": "assistant", "content": completion.text},
                    prompts.repair_message(str(error)),
                ]
                continue
            record.workflow = workflow
            record.error = ""
            return record
        return record
