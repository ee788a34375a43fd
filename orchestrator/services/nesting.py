"""Which step is calling its worker, for calls that start a nested run on a Conductor Studio
server: the nested run is linked from that step (see ``orchestrator.providers.calls``)."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.engine.types import NullObserver, PlanRecord, StepRecord
from orchestrator.providers.calls import calling_step
from orchestrator.services.recording import RecordingObserver


class CallingStepObserver(NullObserver):
    """Sets ``calling_step`` to the stored step's id when a step starts.

    The scheduler awaits ``step_started`` in the step's own task, right before it calls the
    worker, so the value holds for that call and no other step's. Placed after the recorder,
    which has stored the step's row by then.
    """

    def __init__(self, recorder: RecordingObserver) -> None:
        self.recorder = recorder

    async def planning(self, round: int) -> None:
        calling_step.set(None)

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        calling_step.set(None)

    async def step_started(self, step: StepRecord) -> None:
        row = self.recorder.recorder.steps.get(step.key)
        calling_step.set(row.pk if row is not None else None)
