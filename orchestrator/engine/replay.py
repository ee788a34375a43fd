"""Replay: what of a stored run runs again after edits, and what is reused as it was.

A replay is the source run resumed with a different set of stored results, not a second
scheduler: ``replay_state`` turns the source's rounds and the edits into a ``ResumeState`` that
``execute_run`` takes as it takes a crashed run's. The dirty steps are the edited ones and every
step that reads one of them, directly or through others (access lists are the edges; ``"all"``
reads every earlier step of its round); every other step that succeeded is reused
(``reused_from``: its usage is not counted again). The rounds after round r are kept only if
round r's final response comes out byte-identical to the source's (``ResumeState.kept_if``);
otherwise the strategy plans them again. ``fresh`` marks every step dirty.

``replan_from`` (round r, step i): the conductor writes round r again given its first i steps
(``Continuing``): they are shown in its prompt as done, and any of them it keeps unchanged is
reused; the steps it writes after them run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from orchestrator.engine.conductor import PromptedConductor
from orchestrator.engine.types import (
    Access,
    PlanRecord,
    ResumeState,
    RunSettings,
    StepRecord,
    StepSpec,
    WorkerInfo,
    Workflow,
)

StepKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class StepEdit:
    """A change to one step of the source: a new worker, instruction or access list (None:
    unchanged)."""

    round: int
    index: int
    worker: int | None = None
    instruction: str | None = None
    access: Access | None = None

    def apply(self, spec: StepSpec) -> StepSpec:
        return StepSpec(
            worker=spec.worker if self.worker is None else self.worker,
            instruction=spec.instruction if self.instruction is None else self.instruction,
            access=spec.access if self.access is None else self.access,
        )


@dataclass(frozen=True, slots=True)
class SourceRound:
    """One round of the source as stored: its plan, and its steps in order (each with the spec
    it ran with, workers numbered as in the pool now, and ``reused_from`` its stored id)."""

    plan: PlanRecord
    steps: tuple[StepRecord, ...]


@dataclass(slots=True)
class ReplayState:
    """What a replay resumes from (``resume``), the steps of the source's rounds that run again
    (``dirty``), and the round the conductor writes again after its first steps (``replan``)."""

    resume: ResumeState
    dirty: set[StepKey] = field(default_factory=set)
    replan: tuple[int, tuple[StepSpec, ...]] | None = None


def replay_state(
    *,
    rounds: Sequence[SourceRound],
    edits: Sequence[StepEdit] = (),
    fresh: bool = False,
    replan_from: StepKey | None = None,
) -> ReplayState:
    """The resume state of a replay of ``rounds`` (the source's, in order) with ``edits``."""
    by_key = {(edit.round, edit.index): edit for edit in edits}
    state = ReplayState(resume=ResumeState())
    resume = state.resume
    for source in rounds:
        plan = source.plan
        number = plan.round
        if plan.workflow is None:
            break  # the source's conductor failed here: the replay asks it again
        specs = []
        for step in source.steps:
            edit = by_key.get(step.key)
            specs.append(edit.apply(step.spec) if edit else step.spec)
        workflow = Workflow(tuple(specs))
        replanned = replan_from is not None and replan_from[0] == number
        kept = replan_from[1] if replan_from is not None and replanned else len(specs)
        if replanned:
            state.replan = (number, tuple(specs[:kept]))
        else:
            resume.plans[number] = replace(plan, workflow=workflow)
            resume.unrecorded.add(number)
        dirty: set[int] = set(range(kept, len(specs)))
        for index in range(kept):
            step = source.steps[index]
            reads = workflow.reads(index)
            if (
                fresh
                or step.key in by_key
                or step.status != "succeeded"
                or any(read in dirty for read in reads)
            ):
                dirty.add(index)
                continue
            resume.steps[step.key] = replace(step, spec=specs[index], reads=reads)
        state.dirty.update((number, index) for index in dirty)
        if not specs:
            break  # an accepting plan ends the run
        final = source.steps[-1] if source.steps else None
        if final is None or final.status != "succeeded":
            break  # the source ended in this round: there is nothing after it to keep
        # Trivially true when the final step is reused; checked when it runs again.
        resume.kept_if[number] = final.response
    return state


class Continuing:
    """A Strategy: the conductor, asked to write round ``round`` again after the steps ``kept``
    (a replay's ``replan_from``); every other round it plans as usual."""

    def __init__(self, conductor: PromptedConductor, *, round: int, kept: Sequence[StepSpec]):
        self.conductor = conductor
        self.name = conductor.name
        self.round = round
        self.kept = tuple(kept)

    @property
    def max_rounds(self) -> int | None:
        return self.conductor.max_rounds

    async def plan(
        self,
        *,
        round: int,
        question: str,
        workers: Sequence[WorkerInfo],
        settings: RunSettings,
        previous_answer: str | None,
    ) -> PlanRecord:
        return await self.conductor.plan(
            round=round,
            question=question,
            workers=workers,
            settings=settings,
            previous_answer=previous_answer,
            kept=self.kept if round == self.round else (),
        )
