"""The shapes that leave the server, defined once: live events, the snapshot, the graph, and the
pieces they share (step, plan, totals, run summary).

Each shape is a ``TypedDict``; the builders here are the only code that makes one from stored
rows. ``orchestrator.events`` publishes them, the consumer sends them, the API serializers are
checked against them at import (``webui/api/serializers.py``), the graph selector returns
``Graph``, ``conduct --json`` prints ``RunSummary`` fields, and the page takes the event type
names and statuses from ``page_constants()``. ``check(value, Shape)`` says how a value differs
from a shape; the test suite runs it on every event any test publishes (``tests/conftest.py``).

Every event is ``{"type", "run", "seq", ...}``, ``seq`` increasing by one per run:

``run.status``     ``status``: the run's new status (queued, planning, running, ...).
``plan.created``   ``plan``: Plan (the conductor's output for a round).
``step.created``   ``step``: Step, status pending (or succeeded, with ``reused_from``: a step a
                   replay reuses from its source).
``step.started``   ``step``: Step, status running.
``step.finished``  ``step``: Step, status succeeded; ``totals``: Totals of the run so far.
``step.failed``    ``step``: Step, status failed (``error`` says why); ``totals``: Totals.
``run.finished``   ``status``, ``answer``, ``score``, ``error``, ``totals``: Totals,
                   ``finished_at``, ``closed_steps``: which steps the run's end closed,
                   ``{"cancelled" | "skipped": {"ids": [step ids], "error": why}}`` (a step still
                   running ended cancelled, one never started skipped; their ``finished_at`` is
                   the run's). Always the run's last event: nothing is published after it.

On connect the consumer first sends a ``snapshot`` (``SnapshotMessage``: ``seq`` is the run's
last, ``state`` is ``RunState``); a client that reconnects with ``?after=<seq>`` is sent the
stored events after that seq instead, then live events. Clients ignore events whose seq they
have seen.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, TypedDict, Union

from orchestrator.models import Plan as PlanRow
from orchestrator.models import Run as RunRow
from orchestrator.models import Step as StepRow

# Event types -------------------------------------------------------------------------------------

RUN_STATUS: Final = "run.status"
PLAN_CREATED: Final = "plan.created"
STEP_CREATED: Final = "step.created"
STEP_STARTED: Final = "step.started"
STEP_FINISHED: Final = "step.finished"
STEP_FAILED: Final = "step.failed"
RUN_FINISHED: Final = "run.finished"
SNAPSHOT: Final = "snapshot"

# Shapes ------------------------------------------------------------------------------------------


class Totals(TypedDict):
    """Sums over every model call of a run, the conductor's included."""

    tokens_in: int
    tokens_out: int
    cost: float
    model_calls: int
    wall_time: float | None
    step_count: int


class Step(TypedDict):
    """A step as pages and clients see it live. Messages and response are fetched on demand."""

    id: int
    round: int
    index: int
    worker: str
    worker_index: int
    model: str
    instruction: str
    access: str | list[int]
    reads: list[int]
    status: str
    tokens_in: int
    tokens_out: int
    cost: float
    latency: float | None
    attempts: int
    error: str
    reused_from: int | None
    started_at: str | None
    finished_at: str | None


class Plan(TypedDict):
    """How one round's workflow came to be, in brief (``GET /api/runs/{id}/`` has it all)."""

    id: int
    round: int
    strategy: str
    attempts: int
    error: str
    accepts: bool
    step_count: int


class RunSummary(TypedDict):
    """A run as the run page draws its header."""

    id: int
    status: str
    strategy: str
    pool: int
    input: str
    reference: str
    answer: str
    score: float | None
    error: str
    replay_of: int | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    totals: Totals


class RunState(TypedDict):
    """Everything a page needs to draw a run as it is now."""

    run: RunSummary
    plans: list[Plan]
    steps: list[Step]


class ClosedSteps(TypedDict):
    """Steps one status of a run's end closed, and why."""

    ids: list[int]
    error: str


class Event(TypedDict):
    """What every event carries."""

    type: str
    run: int
    seq: int


class RunStatusEvent(Event):
    status: str


class PlanCreatedEvent(Event):
    plan: Plan


class StepEvent(Event):
    """``step.created`` and ``step.started``."""

    step: Step


class StepResultEvent(Event):
    """``step.finished`` and ``step.failed``."""

    step: Step
    totals: Totals


class RunFinished(TypedDict):
    """The ``run.finished`` payload: one shape however the run ended (engine, cancel, failure)."""

    status: str
    answer: str
    score: float | None
    error: str
    totals: Totals
    finished_at: str | None
    closed_steps: dict[str, ClosedSteps]


class RunFinishedEvent(Event, RunFinished):
    pass


class SnapshotMessage(Event):
    """The consumer's first message: the run's state and the seq it is current to."""

    state: RunState


EVENT_SHAPES: Final[dict[str, type]] = {
    RUN_STATUS: RunStatusEvent,
    PLAN_CREATED: PlanCreatedEvent,
    STEP_CREATED: StepEvent,
    STEP_STARTED: StepEvent,
    STEP_FINISHED: StepResultEvent,
    STEP_FAILED: StepResultEvent,
    RUN_FINISHED: RunFinishedEvent,
}
EVENT_TYPES: Final = tuple(EVENT_SHAPES)


class GraphStep(TypedDict):
    """What the graph layout reads of a step (``selectors.run_graph`` reads only these columns)."""

    id: int
    round: int
    index: int
    worker: str
    instruction: str
    status: str
    tokens_in: int
    tokens_out: int
    latency: float | None
    reads: list[int]


# The Step columns behind GraphStep, in its key order.
GRAPH_STEP_COLUMNS: Final = (
    "id", "round", "index", "worker_name", "instruction", "status", "tokens_in", "tokens_out",
    "latency", "reads",
)  # fmt: skip


class PlanNode(TypedDict):
    id: str
    kind: Literal["plan"]
    plan: int
    round: int
    label: str
    status: str
    attempts: int
    x: float
    y: float
    group: str


class StepNode(TypedDict):
    id: str
    kind: Literal["step"]
    step: int
    round: int
    index: int
    worker: str
    label: str
    status: str
    tokens: int
    latency: float | None
    x: float
    y: float
    group: str


class GraphEdge(TypedDict):
    id: str
    source: str
    target: str
    kind: Literal["reads", "plan", "next"]


class GraphGroup(TypedDict):
    """A round's box; with ``collapsed`` it stands for the round's steps (counts by status)."""

    id: str
    round: int
    plan: int | None
    step_count: int
    statuses: dict[str, int]
    collapsed: bool
    x: float
    y: float
    width: float
    height: float


class Graph(TypedDict):
    """A run's graph, laid out on the server (``graph.build_graph``, ``selectors.run_graph``)."""

    nodes: list[PlanNode | StepNode]
    edges: list[GraphEdge]
    groups: list[GraphGroup]
    collapsed: bool
    step_count: int


class PageState(TypedDict):
    """What the run page embeds, read once (``selectors.run_page_state``): the run's state, the
    seq it is current to, its graph laid out from that state, and the layout's measures."""

    seq: int
    state: RunState
    graph: Graph
    geometry: dict[str, Any]


class CommandStep(TypedDict):
    """A step as ``conduct --json`` prints it (with its response)."""

    round: int
    index: int
    worker: str
    instruction: str
    access: str | list[int]
    status: str
    response: str
    tokens_in: int
    tokens_out: int
    latency: float | None
    attempts: int
    error: str


class CommandRun(TypedDict):
    """What ``conduct --json`` prints: one run, its totals and its steps."""

    id: int
    url: str
    status: str
    strategy: str
    pool: str
    input: str
    answer: str
    reference: str
    score: float | None
    error: str
    totals: Totals
    steps: list[CommandStep]


# Builders ----------------------------------------------------------------------------------------


def iso(value: Any) -> str | None:
    return value.isoformat() if value else None


TOTAL_FIELDS: Final = tuple(Totals.__annotations__)


def totals_data(run: RunRow) -> Totals:
    return {
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "cost": run.cost,
        "model_calls": run.model_calls,
        "wall_time": run.wall_time,
        "step_count": run.step_count,
    }


def step_data(step: StepRow) -> Step:
    """A step as pages and clients see it live (one row)."""
    return {
        "id": step.pk,
        "round": step.round,
        "index": step.index,
        "worker": step.worker_name,
        "worker_index": step.worker_index,
        "model": step.model,
        "instruction": step.instruction,
        "access": step.access,
        "reads": step.reads,
        "status": step.status,
        "tokens_in": step.tokens_in,
        "tokens_out": step.tokens_out,
        "cost": step.cost,
        "latency": step.latency,
        "attempts": step.attempts,
        "error": step.error,
        "reused_from": step.reused_from_id,
        "started_at": iso(step.started_at),
        "finished_at": iso(step.finished_at),
    }


# The columns step_data reads, in the order step_rows_data takes them from ``values_list``.
STEP_DATA_COLUMNS: Final = (
    "id", "round", "index", "worker_name", "worker_index", "model", "instruction", "access",
    "reads", "status", "tokens_in", "tokens_out", "cost", "latency", "attempts", "error",
    "reused_from_id", "started_at", "finished_at",
)  # fmt: skip
_STEP_KEYS: Final = tuple(Step.__annotations__)
_STEP_TIMES: Final = ("started_at", "finished_at")


def step_rows_data(rows: Iterable[Sequence[Any]]) -> list[Step]:
    """``step_data`` of many steps read as ``values_list(*STEP_DATA_COLUMNS)``: the same dicts,
    without building a model instance per step (five times faster on runs of thousands)."""
    steps: list[Any] = []
    for row in rows:
        step = dict(zip(_STEP_KEYS, row, strict=True))
        for key in _STEP_TIMES:
            step[key] = iso(step[key])
        steps.append(step)
    return steps


def plan_data(plan: PlanRow) -> Plan:
    return {
        "id": plan.pk,
        "round": plan.round,
        "strategy": plan.strategy,
        "attempts": len(plan.attempts),
        "error": plan.error,
        "accepts": plan.workflow == [],
        "step_count": len(plan.workflow or []),
    }


def run_data(run: RunRow) -> RunSummary:
    return {
        "id": run.pk,
        "status": run.status,
        "strategy": run.strategy,
        "pool": run.pool_id,
        "input": run.input,
        "reference": run.reference,
        "answer": run.answer,
        "score": run.score,
        "error": run.error,
        "replay_of": run.replay_of_id,
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "totals": totals_data(run),
    }


def finished_data(
    *,
    status: str,
    answer: str,
    score: float | None,
    error: str,
    totals: Totals,
    finished_at: Any,
    closed_steps: dict[str, ClosedSteps],
) -> RunFinished:
    """The ``run.finished`` payload."""
    return {
        "status": str(status),
        "answer": answer,
        "score": score,
        "error": error,
        "totals": totals,
        "finished_at": iso(finished_at),
        "closed_steps": closed_steps,
    }


def finished_data_of(
    run: RunRow, closed_steps: dict[str, ClosedSteps] | None = None
) -> RunFinished:
    """The ``run.finished`` payload of a run as stored; ``closed_steps`` as the run's end
    returned them when it was just ended."""
    return finished_data(
        status=run.status,
        answer=run.answer,
        score=run.score,
        error=run.error,
        totals=totals_data(run),
        finished_at=run.finished_at,
        closed_steps=closed_steps or {},
    )


def command_run_data(run: RunRow, *, url: str, steps: Iterable[StepRow]) -> CommandRun:
    """What ``conduct --json`` prints of a finished run."""
    return {
        "id": run.pk,
        "url": url,
        "status": run.status,
        "strategy": run.strategy,
        "pool": run.pool.name,
        "input": run.input,
        "answer": run.answer,
        "reference": run.reference,
        "score": run.score,
        "error": run.error,
        "totals": totals_data(run),
        "steps": [
            {
                "round": step.round,
                "index": step.index,
                "worker": step.worker_name,
                "instruction": step.instruction,
                "access": step.access,
                "status": step.status,
                "response": step.response,
                "tokens_in": step.tokens_in,
                "tokens_out": step.tokens_out,
                "latency": step.latency,
                "attempts": step.attempts,
                "error": step.error,
            }
            for step in steps
        ],
    }


def page_constants() -> dict[str, Any]:
    """What the run page needs from here instead of repeating it: statuses (from the models)
    and event type names. Served as the page's ``status-constants`` data block."""
    return {
        "run": [str(status) for status in RunRow.Status],
        "run_finished": [str(status) for status in RunRow.FINISHED],
        "step": [str(status) for status in StepRow.Status],
        "step_finished": [str(status) for status in StepRow.FINISHED],
        "events": {
            "run_status": RUN_STATUS,
            "plan_created": PLAN_CREATED,
            "step_created": STEP_CREATED,
            "step_started": STEP_STARTED,
            "step_finished": STEP_FINISHED,
            "step_failed": STEP_FAILED,
            "run_finished": RUN_FINISHED,
            "snapshot": SNAPSHOT,
        },
    }


# Checking ----------------------------------------------------------------------------------------


def check(value: Any, shape: Any, path: str = "$") -> list[str]:
    """How ``value`` differs from ``shape`` (a TypedDict or a type expression): one line per
    difference, empty when it conforms. Keys a TypedDict does not declare are differences."""
    if shape is Any:
        return []
    if isinstance(shape, type) and typing.is_typeddict(shape):
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        hints = _hints(shape)
        problems = [f"{path}: missing {key!r}" for key in hints if key not in value]
        problems += [f"{path}: unexpected {key!r}" for key in value if key not in hints]
        for key, hint in hints.items():
            if key in value:
                problems += check(value[key], hint, f"{path}.{key}")
        return problems
    origin = typing.get_origin(shape)
    args = typing.get_args(shape)
    if origin in (Union, types.UnionType):
        for option in args:
            if not check(value, option, path):
                return []
        return [f"{path}: {value!r} is none of {shape}"]
    if origin is Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {type(value).__name__}"]
        return [p for i, item in enumerate(value) for p in check(item, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        return [
            p
            for key, item in value.items()
            for p in check(key, args[0], f"{path} key") + check(item, args[1], f"{path}[{key!r}]")
        ]
    if shape is type(None):
        return [] if value is None else [f"{path}: expected null, got {value!r}"]
    if shape is float:  # JSON numbers: an int is a valid float
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif shape is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, shape)
    return [] if ok else [f"{path}: expected {shape.__name__}, got {value!r}"]


_hint_cache: dict[type, dict[str, Any]] = {}


def _hints(shape: type) -> dict[str, Any]:
    hints = _hint_cache.get(shape)
    if hints is None:
        hints = _hint_cache[shape] = typing.get_type_hints(shape)
    return hints


def check_event(event: dict[str, Any]) -> list[str]:
    """How an event differs from its type's shape (an unknown type is a difference)."""
    shape = EVENT_SHAPES.get(event.get("type"))  # type: ignore[arg-type]
    if shape is None:
        return [f"unknown event type {event.get('type')!r}"]
    return check(event, shape)


# Replays -----------------------------------------------------------------------------------------


class Edit(TypedDict):
    """One change a replay made to its source (``Run.edits``): a step's ``instruction``,
    ``worker`` (``{"id", "name"}``) or ``access``, before and after; or ``replan_from`` (the
    conductor wrote that step's round again from it) or ``fresh`` (every step ran again), which
    name no field values. ``who`` made it and ``when`` (ISO 8601)."""

    step: int | None
    round: int | None
    index: int | None
    field: str
    before: Any
    after: Any
    who: str
    when: str


class FamilyRun(TypedDict):
    """A run of a family (a source and every replay made from it or from its replays)."""

    id: int
    replay_of: int | None
    status: str
    strategy: str
    answer: str
    score: float | None
    error: str
    edits: list[Edit]
    totals: Totals
    created_by: str | None
    created_at: str | None


class Family(TypedDict):
    """``GET /api/runs/{id}/family/``: the root source and all its replays, oldest first."""

    root: int
    runs: list[FamilyRun]


def family_run_data(run: RunRow) -> FamilyRun:
    return {
        "id": run.pk,
        "replay_of": run.replay_of_id,
        "status": run.status,
        "strategy": run.strategy,
        "answer": run.answer,
        "score": run.score,
        "error": run.error,
        "edits": list(run.edits or []),
        "totals": totals_data(run),
        "created_by": run.created_by.get_username() if run.created_by_id else None,
        "created_at": iso(run.created_at),
    }


# Batch replays -----------------------------------------------------------------------------------

BATCH_OUTCOMES: Final = ("right", "wrong", "failed", "unscored", "pending")
"""How a run ended, for a batch's before and after: ``right`` (succeeded with a full score),
``wrong`` (succeeded, lower score), ``failed`` (failed or cancelled), ``unscored`` (succeeded,
no reference to score it against), ``pending`` (not finished)."""


class BatchRun(TypedDict):
    """A source or a replay as a batch page lists it."""

    id: int
    status: str
    outcome: str
    score: float | None
    tokens: int
    cost: float
    wall_time: float | None


class BatchItemData(TypedDict):
    """One source run of a batch: its replay (null when none was made: ``error`` says why) and
    the compare view of the two."""

    position: int
    input: str
    source: BatchRun
    replay: BatchRun | None
    error: str
    compare_url: str | None


class BatchProgress(TypedDict):
    """``done`` of ``total`` items: replays finished plus items not replayed."""

    total: int
    replayed: int
    not_replayed: int
    finished: int
    done: int
    fraction: float


class BatchAggregate(TypedDict):
    """Before and after over the pairs whose replay finished (``compared``): outcome counts,
    ``fixed`` (failed or wrong → right), ``broken`` (right → failed or wrong), ``still_right``,
    ``still_wrong``, ``unscored`` (either side), and sums of tokens (in + out), cost and wall
    time. A replay counts only the tokens and cost of the steps it ran again."""

    compared: int
    fixed: int
    broken: int
    still_right: int
    still_wrong: int
    unscored: int
    before: dict[str, int]
    after: dict[str, int]
    tokens_before: int
    tokens_after: int
    cost_before: float
    cost_after: float
    wall_time_before: float
    wall_time_after: float


class BatchEntry(TypedDict):
    """A batch as lists show it. ``status``: ``creating`` (replays being made), ``running``
    (all made, some not finished), ``finished``."""

    id: int
    project: int
    created_by: str | None
    created_at: str | None
    filters: dict[str, Any]
    override: dict[str, Any]
    status: str
    progress: BatchProgress


class BatchSummary(BatchEntry):
    """``GET /api/batches/{id}/`` and the batch page's state: the entry, the aggregate and
    every item."""

    aggregate: BatchAggregate
    items: list[BatchItemData]


def batch_outcome(status: str, score: float | None) -> str:
    if status not in RunRow.FINISHED:
        return "pending"
    if status != RunRow.Status.SUCCEEDED:
        return "failed"
    if score is None:
        return "unscored"
    return "right" if score >= 1.0 else "wrong"


def batch_run_data(run: RunRow) -> BatchRun:
    return {
        "id": run.pk,
        "status": run.status,
        "outcome": batch_outcome(run.status, run.score),
        "score": run.score,
        "tokens": run.tokens_in + run.tokens_out,
        "cost": run.cost,
        "wall_time": run.wall_time,
    }
