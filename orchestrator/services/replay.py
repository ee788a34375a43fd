"""Replays: a stored run executed again with edits, reusing every step the edits do not reach.

``replay_create`` validates the edits, stores the new run (same pool and project, ``replay_of``
its source, ``edits`` as structured data) and enqueues it like any run. When it executes,
``replay_execution_state`` gives ``run_execute_async`` the state it resumes from: the source's
rounds with the edits applied, its unaffected succeeded steps reused (``engine/replay.py`` says
which), merged with what the replay itself already stored (a replay resumed after a crash).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from orchestrator import events, wire
from orchestrator.engine.conductor import PromptedConductor
from orchestrator.engine.replay import Continuing, ReplayState, StepEdit, replay_state
from orchestrator.engine.types import ALL, Strategy
from orchestrator.models import Membership, Plan, Run, Step, Worker
from orchestrator.records import (
    access_from_data,
    resume_state_from_rows,
    source_rounds_from_rows,
)
from orchestrator.selectors import user_role
from orchestrator.services.audit import audit_record

MAX_EDITS: Final = 200
"""The most edits one replay may carry (a run holds at most 20 steps × 10 rounds)."""
EDIT_FIELDS: Final = ("instruction", "worker", "access")
FRESH: Final = "fresh"
REPLAN_FROM: Final = "replan_from"


def replay_create(
    *,
    source: Run,
    actor: Any,
    edits: Sequence[Mapping[str, Any]] = (),
    replan_from: int | None = None,
    fresh: bool = False,
    enqueue: bool = True,
) -> Run:
    """Create a replay of the finished run ``source`` with ``edits`` and, once committed, start it.

    Each edit is ``{"step": STEP_ID, "instruction"?, "worker"?: WORKER_ID, "access"?: "all" |
    [INDEX, ...]}``; an empty list replays unchanged. ``replan_from`` (a step id of a conductor
    run): the conductor writes that step's round again from it, given the steps before it; if
    that step is edited too, it is kept with its edit and the conductor writes what follows it.
    ``fresh``: every step runs again. Only admins of the source's project may replay
    (PermissionDenied). Bad input raises ValidationError keyed by field (``edits[0].worker``,
    ``replan_from``, ...) and creates nothing. Stores the edits that change something, each as
    ``{step, round, index, field, before, after, who, when}`` (``fresh`` and ``replan_from`` as
    edits of their own), records ``replay.create`` in the audit log and publishes ``run.status``
    queued.
    """
    if user_role(user=actor, project=source.project_id) != Membership.Role.ADMIN:
        raise PermissionDenied("Only admins of the project may replay its runs.")
    if not source.is_finished:
        raise ValidationError({"run": ["Only a finished run can be replayed; this one is not."]})
    steps = {step.pk: step for step in Step.objects.filter(run_id=source.pk)}
    workers = list(Worker.objects.filter(pool_id=source.pool_id, enabled=True))
    worker_by_id = {worker.pk: worker for worker in workers}
    errors: dict[str, list[str]] = {}
    changes = _checked_edits(edits, steps=steps, workers=worker_by_id, source=source, errors=errors)
    replanned = _checked_replan_from(replan_from, steps=steps, source=source, errors=errors)
    if replanned is not None:
        for position, (step, _) in enumerate(changes):
            if step.round == replanned.round and step.index > replanned.index:
                errors[f"edits[{position}].step"] = [
                    f"Step {step.round}.{step.index} is after replan_from "
                    f"({replanned.round}.{replanned.index}): the conductor writes it again."
                ]
    if not workers:
        errors["pool"] = [f'Pool "{source.pool.name}" has no enabled worker.']
    edited_workers = {step.pk for step, fields in changes if "worker" in fields}
    for step in sorted(steps.values(), key=lambda row: (row.round, row.index)):
        if step.pk not in edited_workers and step.worker_id not in worker_by_id:
            errors.setdefault("edits", []).append(
                f"Step {step.round}.{step.index} ran on {step.worker_name}, which is no longer "
                "an enabled worker of the pool: give it another worker."
            )
    if errors:
        raise ValidationError(errors)

    when = timezone.now().isoformat()
    who = actor.get_username() if getattr(actor, "is_authenticated", False) else ""
    stored: list[dict[str, Any]] = []
    for step, fields in changes:
        for field, (before, after) in fields.items():
            stored.append(_edit(step, field, before, after, who=who, when=when))
    if replanned is not None:
        stored.append(_edit(replanned, REPLAN_FROM, None, True, who=who, when=when))
    if fresh:
        stored.append(_edit(None, FRESH, False, True, who=who, when=when))

    with transaction.atomic():
        run = Run.objects.create(
            project_id=source.project_id,
            pool_id=source.pool_id,
            strategy=source.strategy,
            strategy_options=source.strategy_options,
            input=source.input,
            reference=source.reference,
            grader=source.grader,
            worker_params=source.worker_params,
            depth=source.depth,  # a run started through /v1 keeps its place in the recursion
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
            replay_of=source,
            edits=stored,
        )
        audit_record(
            project=source.project_id,
            actor=actor,
            action="replay.create",
            target=run,
            before={"run": source.pk},
            after={"run": run.pk, "edits": stored},
        )
        events.publish(run.pk, wire.RUN_STATUS, {"status": Run.Status.QUEUED.value})
        if enqueue:
            from orchestrator.services.execution import run_enqueue

            run_id = run.pk
            transaction.on_commit(lambda: run_enqueue(run_id=run_id), robust=True)
        run.refresh_from_db(fields=["last_seq"])
    return run


def _edit(
    step: Step | None, field: str, before: Any, after: Any, *, who: str, when: str
) -> dict[str, Any]:
    return {
        "step": step.pk if step else None,
        "round": step.round if step else None,
        "index": step.index if step else None,
        "field": field,
        "before": before,
        "after": after,
        "who": who,
        "when": when,
    }


def _checked_edits(
    edits: Sequence[Mapping[str, Any]],
    *,
    steps: dict[int, Step],
    workers: dict[int, Worker],
    source: Run,
    errors: dict[str, list[str]],
) -> list[tuple[Step, dict[str, tuple[Any, Any]]]]:
    """The edits that change something, as (step, {field: (before, after)}); problems go to
    ``errors`` keyed ``edits[i].field``."""
    if not isinstance(edits, Sequence) or isinstance(edits, str):
        errors["edits"] = ["Give a list of edits."]
        return []
    if len(edits) > MAX_EDITS:
        errors["edits"] = [f"At most {MAX_EDITS} edits; {len(edits)} were given."]
        return []
    from orchestrator.services.runs import text_size_problem

    binary = source.pool.access_mode == "binary"
    seen: set[int] = set()
    changes = []
    for position, edit in enumerate(edits):
        key = f"edits[{position}]"
        if not isinstance(edit, Mapping):
            errors[key] = ['Give an object: {"step": id, "instruction" | "worker" | "access"}.']
            continue
        unknown = sorted(str(name) for name in edit if name not in ("step", *EDIT_FIELDS))
        if unknown:
            errors[key] = [
                f"Unknown field {unknown[0][:40]!r}: edit instruction, worker or access."
            ]
            continue
        step = steps.get(edit.get("step")) if _is_id(edit.get("step")) else None
        if step is None:
            errors[f"{key}.step"] = [f"No step {str(edit.get('step'))[:40]} in run {source.pk}."]
            continue
        if step.pk in seen:
            errors[f"{key}.step"] = [f"Step {step.pk} is edited twice: give one edit per step."]
            continue
        seen.add(step.pk)
        if not any(name in edit for name in EDIT_FIELDS):
            errors[key] = ["Name at least one of instruction, worker, access."]
            continue
        fields: dict[str, tuple[Any, Any]] = {}
        if "instruction" in edit:
            text = edit["instruction"]
            problem = "" if isinstance(text, str) else "Give the instruction as text."
            if not problem and not text.strip():
                problem = "Give an instruction: it may not be empty."
            problem = problem or text_size_problem(text)
            if problem:
                errors[f"{key}.instruction"] = [problem]
            elif text.strip() != step.instruction:
                fields["instruction"] = (step.instruction, text.strip())
        if "worker" in edit:
            worker = workers.get(edit["worker"]) if _is_id(edit["worker"]) else None
            if worker is None:
                errors[f"{key}.worker"] = [
                    f"No enabled worker {str(edit['worker'])[:40]} in pool "
                    f'"{source.pool.name}": choose one of its enabled workers.'
                ]
            elif worker.pk != step.worker_id:
                fields["worker"] = (
                    {"id": step.worker_id, "name": step.worker_name},
                    {"id": worker.pk, "name": worker.name},
                )
        if "access" in edit:
            access, problem = _checked_access(edit["access"], index=step.index, binary=binary)
            if problem:
                errors[f"{key}.access"] = [f"Step {step.round}.{step.index}: {problem}"]
            elif _reads(access, step.index) != _reads(step.access, step.index):
                fields["access"] = (step.access, access)
        if fields:
            changes.append((step, fields))
    return changes


def _checked_access(value: Any, *, index: int, binary: bool) -> tuple[Any, str]:
    """``"all"`` or a sorted list of earlier indices, and "" ; or a problem."""
    if value == ALL:
        return ALL, ""
    if not isinstance(value, list) or not all(_is_index(item) for item in value):
        return None, 'give "all" or a list of earlier step indices of its round.'
    if len(set(value)) != len(value):
        return None, "an index is listed twice."
    for item in value:
        if item >= index:
            what = "itself" if item == index else "a later step"
            return None, (
                f"it may read only earlier steps of its round (0 to {index - 1}); {item} is {what}."
                if index
                else f"the first step of a round reads nothing; {item} is {what}."
            )
    if binary and value and len(value) != index:
        return None, 'the pool gives binary access: "all" or [] only.'
    return sorted(value), ""


def _reads(access: Any, index: int) -> list[int]:
    """The earlier indices an access list reads: ``"all"`` is every one of them, so an edit
    between the two spellings of the same list changes nothing."""
    return list(range(index)) if access == ALL else sorted(access)


def _checked_replan_from(
    value: Any, *, steps: dict[int, Step], source: Run, errors: dict[str, list[str]]
) -> Step | None:
    if value is None:
        return None
    step = steps.get(value) if _is_id(value) else None
    if step is None:
        errors[REPLAN_FROM] = [f"No step {str(value)[:40]} in run {source.pk}."]
        return None
    if source.strategy != "conductor":
        errors[REPLAN_FROM] = [
            f'Only a conductor run can be planned again; this run used "{source.strategy}".'
        ]
        return None
    return step


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**15


# Executing ---------------------------------------------------------------------------------------


def replay_execution_state(
    *, run: Run, plans: list[Plan], steps: list[Step], workers: list[Worker]
) -> ReplayState:
    """What the replay ``run`` resumes from: its source's rounds with its edits applied (see
    ``engine/replay.py``), and over them every round it already stored itself.

    ``workers`` are the pool's enabled workers in order (the engine's indices)."""
    positions = {worker.pk: index for index, worker in enumerate(workers)}
    source_plans = list(Plan.objects.filter(run_id=run.replay_of_id).order_by("round"))
    source_steps = list(Step.objects.filter(run_id=run.replay_of_id).order_by("round", "index"))
    by_step: dict[int, dict[str, Any]] = {}
    fresh = False
    replan_from = None
    replanned_step = None
    for edit in run.edits or []:
        field = edit.get("field")
        if field == FRESH:
            fresh = True
        elif field == REPLAN_FROM:
            replan_from = (int(edit["round"]), int(edit["index"]))
            replanned_step = int(edit["step"])
        elif field in EDIT_FIELDS:
            fields = by_step.setdefault(int(edit["step"]), {"key": (edit["round"], edit["index"])})
            after = edit["after"]
            if field == "worker":
                after = positions.get(after["id"], -1)
            elif field == "access":
                after = access_from_data(after)
            fields[field] = after
    if replan_from is not None and replanned_step in by_step:
        # The re-planned step was edited as well: it is kept as edited, the rest written after it.
        replan_from = (replan_from[0], replan_from[1] + 1)
    edits = [
        StepEdit(
            round=int(fields["key"][0]),
            index=int(fields["key"][1]),
            worker=fields.get("worker"),
            instruction=fields.get("instruction"),
            access=fields.get("access"),
        )
        for fields in by_step.values()
    ]
    state = replay_state(
        rounds=source_rounds_from_rows(source_plans, source_steps, worker_positions=positions),
        edits=edits,
        fresh=fresh,
        replan_from=replan_from,
    )
    if plans:
        # Resumed after a crash: the rounds it stored are its own; the source's count after them.
        own = resume_state_from_rows(plans, steps)
        last = max(own.plans)
        resume = state.resume
        resume.plans.update(own.plans)
        resume.unrecorded -= set(own.plans)
        resume.steps = {
            key: step for key, step in resume.steps.items() if key[0] not in own.plans
        } | own.steps
        resume.kept_if = {r: text for r, text in resume.kept_if.items() if r >= last}
    return state


def replay_strategy(strategy: Strategy, state: ReplayState) -> Strategy:
    """The strategy a replay executes with: the conductor asked to write one round again after
    its first steps (``replan_from``), else ``strategy`` itself."""
    if state.replan is None or not isinstance(strategy, PromptedConductor):
        return strategy
    round_, kept = state.replan
    return Continuing(strategy, round=round_, kept=kept)


__all__ = ["MAX_EDITS", "replay_create", "replay_execution_state", "replay_strategy"]
