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
                   Either one of a retried step has each attempt in ``step.attempt_log``
                   (StepAttempt: its error and the backoff waited after it).
``run.finished``   ``status``, ``answer``, ``answer_shown`` (the answer itself, one line),
                   ``score``, ``verdict`` (right, wrong, unscored, failed, cancelled),
                   ``error``, ``totals``: Totals,
                   ``finished_at``, ``closed_steps``: which steps the run's end closed,
                   ``{"cancelled" | "skipped": {"ids": [step ids], "error": why}}`` (a step still
                   running ended cancelled, one never started skipped; their ``finished_at`` is
                   the run's). Always the run's last execution event: only review events
                   (below) are published after it.

Review events (``orchestrator/services/review.py``), at any time, also after ``run.finished``:

``comment.created`` ``comment``: Comment (on the run, or on a step when ``step`` is set).
``comment.edited``  ``comment``: Comment, its new body and ``edited_at``.
``comment.deleted`` ``comment``: the comment's id; ``step``: its step, or null.
``review.changed``  ``review``: Review (labels, assignee, human score, flag, resolution) after
                    one change; ``change``: which; ``by``: who made it.

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

from orchestrator.engine.grading import extract_answer
from orchestrator.models import Plan as PlanRow
from orchestrator.models import Run as RunRow
from orchestrator.models import Step as StepRow
from orchestrator.verdicts import VERDICTS, verdict

# Event types -------------------------------------------------------------------------------------

RUN_STATUS: Final = "run.status"
PLAN_CREATED: Final = "plan.created"
STEP_CREATED: Final = "step.created"
STEP_STARTED: Final = "step.started"
STEP_FINISHED: Final = "step.finished"
STEP_FAILED: Final = "step.failed"
RUN_FINISHED: Final = "run.finished"
SNAPSHOT: Final = "snapshot"
# Review (orchestrator/services/review.py): they may come after run.finished.
COMMENT_CREATED: Final = "comment.created"
COMMENT_EDITED: Final = "comment.edited"
COMMENT_DELETED: Final = "comment.deleted"
REVIEW_CHANGED: Final = "review.changed"

# Shapes ------------------------------------------------------------------------------------------


class Totals(TypedDict):
    """Sums over every model call of a run, the conductor's included."""

    tokens_in: int
    tokens_out: int
    cost: float
    model_calls: int
    wall_time: float | None
    step_count: int


class StepAttempt(TypedDict):
    """One call of a retried step (``Step.attempt_log``): its number (from 1), when it started
    (``offset``, seconds after the step's first call), how long it took (``seconds``), why it
    failed (``error``, "" for the call that succeeded) and the wait before the next call
    (``backoff``, 0 when none followed). A call that waited for a slot of the worker's
    concurrency bound starts that much later: the time between one call's backoff and the next
    call (before the first call: its offset) is the wait in the queue."""

    attempt: int
    offset: float
    seconds: float
    error: str
    backoff: float


class Step(TypedDict):
    """A step as pages and clients see it live. Messages and response are fetched on demand.
    ``attempt_log`` has every call of the step when one failed, else it is empty."""

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
    queued: float
    """Seconds its calls waited for a slot of the worker's concurrency bound (not in latency)."""
    attempts: int
    error: str
    attempt_log: list[StepAttempt]
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
    latency: float | None
    finished_at: str | None
    form: str
    """What the conductor's workflow was read from: "lists", "json" or ""."""
    fallback: str
    """"single" or "kept" when the pool's plan_fallback stood in for an unusable plan."""
    queued: float
    """Seconds the conductor's calls waited for a slot of the pool's bound (not in latency)."""


class RunSummary(TypedDict):
    """A run as the run page draws its header."""

    id: int
    status: str
    strategy: str
    pool: int
    input: str
    reference: str
    answer: str
    answer_shown: str
    score: float | None
    verdict: str
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
    answer_shown: str
    score: float | None
    verdict: str
    error: str
    totals: Totals
    finished_at: str | None
    closed_steps: dict[str, ClosedSteps]


class RunFinishedEvent(Event, RunFinished):
    pass


class SnapshotMessage(Event):
    """The consumer's first message: the run's state and the seq it is current to."""

    state: RunState


# Review shapes -----------------------------------------------------------------------------------


class Comment(TypedDict):
    """A comment on a run (``step`` null) or on one of its steps; ``body`` is Markdown written
    by a user, shown as untrusted text."""

    id: int
    run: int
    step: int | None
    author: str | None
    body: str
    created_at: str | None
    edited_at: str | None


class Label(TypedDict):
    """A failure kind of the run's project, as put on a run."""

    id: int
    name: str


class Resolution(TypedDict):
    by: str | None
    at: str | None
    note: str
    fixed_by: int | None


class Review(TypedDict):
    """A run's review state: labels, assignee, human score (0 to 1), flag, resolution."""

    labels: list[Label]
    assignee: str | None
    human_score: float | None
    flagged: bool
    resolution: Resolution | None


class CommentEvent(Event):
    """``comment.created`` and ``comment.edited``."""

    comment: Comment


class CommentDeletedEvent(Event):
    comment: int
    step: int | None


class ReviewChangedEvent(Event):
    """``review.changed``: the whole review state after one change (``change`` names it:
    labels, assignee, score, flag, resolution), made by ``by``."""

    review: Review
    change: Literal["labels", "assignee", "score", "flag", "resolution"]
    by: str | None


EVENT_SHAPES: Final[dict[str, type]] = {
    RUN_STATUS: RunStatusEvent,
    PLAN_CREATED: PlanCreatedEvent,
    STEP_CREATED: StepEvent,
    STEP_STARTED: StepEvent,
    STEP_FINISHED: StepResultEvent,
    STEP_FAILED: StepResultEvent,
    RUN_FINISHED: RunFinishedEvent,
    COMMENT_CREATED: CommentEvent,
    COMMENT_EDITED: CommentEvent,
    COMMENT_DELETED: CommentDeletedEvent,
    REVIEW_CHANGED: ReviewChangedEvent,
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
    access: str | list[int]


# The Step columns behind GraphStep, in its key order.
GRAPH_STEP_COLUMNS: Final = (
    "id", "round", "index", "worker_name", "instruction", "status", "tokens_in", "tokens_out",
    "latency", "reads", "access",
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
    kind: Literal["reads", "reads_all", "plan", "next"]


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


class PageGraph(TypedDict):
    """A run's graph as pages embed it beside the run's snapshot (``page_graph``): the ``Graph``
    with each step node cut to its step id and position, ``steps`` being ``[id, x, y, id, x, y,
    ...]`` (the page has every step in the snapshot: sending it twice made the page half as
    large again), and each edge to ``[source, target, kind]`` (its id is ``source-target``)."""

    nodes: list[PlanNode]
    steps: list[float]
    edges: list[list[str]]
    groups: list[GraphGroup]
    collapsed: bool
    step_count: int


def page_graph(graph: Graph) -> PageGraph:
    """``graph`` in the embedded form (``PageGraph``)."""
    plans: list[PlanNode] = []
    steps: list[float] = []
    for node in graph["nodes"]:
        if node["kind"] == "step":
            steps += (node["step"], node["x"], node["y"])
        else:
            plans.append(node)
    return {
        "nodes": plans,
        "steps": steps,
        "edges": [[edge["source"], edge["target"], edge["kind"]] for edge in graph["edges"]],
        "groups": graph["groups"],
        "collapsed": graph["collapsed"],
        "step_count": graph["step_count"],
    }


class FoldedRound(TypedDict):
    """A folded round whose steps the run page does not embed (``PageState.folded``): the page
    fetches them when the round is opened (``RoundSteps``). ``not_succeeded`` names its steps that
    have not succeeded, by status, so that a live event on one of them moves the right count on
    the round's box; every other step of the round had succeeded."""

    round: int
    not_succeeded: dict[str, list[int]]


class StepTable(TypedDict):
    """Steps as a table: ``columns`` (the keys of ``Step``, in order) and one row of values per
    step. Pages embed their steps so: the keys repeated in every object were two fifths of a
    large run's page."""

    columns: list[str]
    rows: list[list[Any]]


class PageRunState(TypedDict):
    """A run's state as pages embed it: ``RunState`` with its steps as a ``StepTable``."""

    run: RunSummary
    plans: list[Plan]
    steps: StepTable


class PageState(TypedDict):
    """What the run page embeds, read once (``selectors.run_page_state``): the run's state (its
    steps as a table), the seq it is current to, its graph laid out from that state
    (``PageGraph``), and the layout's measures. On a folded graph the state leaves out the steps
    of the rounds in ``folded`` (finished rounds: their boxes and counts are in the graph's
    groups)."""

    seq: int
    state: PageRunState
    graph: PageGraph
    geometry: dict[str, Any]
    folded: list[FoldedRound]


class RoundSteps(TypedDict):
    """A run's steps as the run page fetches those of a folded round when it opens
    (``GET /api/runs/{id}/steps/?round=N``; every step without ``round``), as a table, with the
    seq they are current to at least (the page drops the live events up to that seq for those
    rounds) and, when asked (``graph=true``, with ``round``), that round laid out as the page
    draws it (``PageGraph``: its steps by id and position, in the run's coordinates)."""

    seq: int
    steps: StepTable
    graph: PageGraph | None


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
        "queued": step.queued,
        "attempts": step.attempts,
        "error": step.error,
        "attempt_log": step.attempt_log,
        "reused_from": step.reused_from_id,
        "started_at": iso(step.started_at),
        "finished_at": iso(step.finished_at),
    }


# The columns step_data reads, in the order step_rows_data takes them from ``values_list``.
STEP_DATA_COLUMNS: Final = (
    "id", "round", "index", "worker_name", "worker_index", "model", "instruction", "access",
    "reads", "status", "tokens_in", "tokens_out", "cost", "latency", "queued", "attempts",
    "error", "attempt_log", "reused_from_id", "started_at", "finished_at",
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


def step_table(steps: Iterable[Step]) -> StepTable:
    """``steps`` as a ``StepTable``."""
    rows = [[step[key] for key in _STEP_KEYS] for step in steps]  # type: ignore[literal-required]
    return {"columns": list(_STEP_KEYS), "rows": rows}


def page_run_state(state: RunState) -> PageRunState:
    """``state`` as pages embed it (``PageRunState``)."""
    return {"run": state["run"], "plans": state["plans"], "steps": step_table(state["steps"])}


def plan_data(plan: PlanRow) -> Plan:
    return {
        "id": plan.pk,
        "round": plan.round,
        "strategy": plan.strategy,
        "attempts": len(plan.attempts),
        "error": plan.error,
        "accepts": plan.workflow == [],
        "step_count": len(plan.workflow or []),
        # The conductor's calls took this long and ended when the plan was stored: the
        # timeline draws them before the round's steps.
        "latency": _attempts_latency(plan.attempts),
        "finished_at": iso(plan.created_at),
        "form": plan.form,
        "fallback": plan.fallback,
        "queued": _attempts_queued(plan.attempts),
    }


def _attempts_queued(attempts: Any) -> float:
    return float(
        sum(
            attempt.get("queued") or 0
            for attempt in attempts or ()
            if isinstance(attempt, dict) and isinstance(attempt.get("queued"), int | float)
        )
    )


def _attempts_latency(attempts: Any) -> float | None:
    latencies = [
        attempt.get("latency")
        for attempt in attempts or ()
        if isinstance(attempt, dict) and isinstance(attempt.get("latency"), int | float)
    ]
    return float(sum(latencies)) if latencies else None


def run_data(run: RunRow) -> RunSummary:
    return {
        "id": run.pk,
        "status": run.status,
        "strategy": run.strategy,
        "pool": run.pool_id,
        "input": run.input,
        "reference": run.reference,
        "answer": run.answer,
        "answer_shown": answer_shown(run.answer, run.grader),
        "score": run.score,
        "verdict": verdict(run.status, run.score),
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
    grader: str = "",
) -> RunFinished:
    """The ``run.finished`` payload (``grader``: the run's, for the answer shown)."""
    return {
        "status": str(status),
        "answer": answer,
        "answer_shown": answer_shown(answer, grader),
        "score": score,
        "verdict": verdict(str(status), score),
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
        grader=run.grader,
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
        "verdicts": list(VERDICTS),
        "events": {
            "run_status": RUN_STATUS,
            "plan_created": PLAN_CREATED,
            "step_created": STEP_CREATED,
            "step_started": STEP_STARTED,
            "step_finished": STEP_FINISHED,
            "step_failed": STEP_FAILED,
            "run_finished": RUN_FINISHED,
            "snapshot": SNAPSHOT,
            "comment_created": COMMENT_CREATED,
            "comment_edited": COMMENT_EDITED,
            "comment_deleted": COMMENT_DELETED,
            "review_changed": REVIEW_CHANGED,
        },
    }


# Verdicts and the answer shown (readable runs) ---------------------------------------------------

ANSWER_SHOWN_CHARS: Final = 160


def answer_shown(answer: str, grader: str = "") -> str:
    """The answer itself, as lists and headers show it: what the grader extracts (the last
    "Answer:" line; for code, the code block), its first line, cut to ``ANSWER_SHOWN_CHARS``."""
    if not answer:
        return ""
    extracted = extract_answer(answer, kind=grader or None)
    line = next((line.strip() for line in extracted.splitlines() if line.strip()), "")
    if len(line) <= ANSWER_SHOWN_CHARS:
        return line
    return line[: ANSWER_SHOWN_CHARS - 1].rstrip() + "…"


class ListChanges(TypedDict):
    """What changed for a runs list since an event id (``selectors.run_list_changes``): runs
    created or changed that match its filters (ids, newest first, and the rows), those that no
    longer match, and the event id to ask from next."""

    cursor: int
    changed: list[int]
    gone: list[int]
    runs: list[Any]


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


# Compare -----------------------------------------------------------------------------------------
# ``GET /api/compare/?runs=A,B`` and the ``/compare/`` page (``selectors.run_compare``, built by
# ``orchestrator/comparing.py``): several runs' steps aligned by (round, index), each position
# marked relative to the first run, with word diffs of what changed, and their outcomes side by
# side.

CHANGE_KINDS: Final = ("same", "changed", "added", "removed")
"""How an aligned position differs from the first run: ``added``, only in a later run;
``removed``, in the first run and not in a later one."""
DIFF_FIELDS: Final = ("instruction", "worker", "access", "response")
"""The fields of a step whose word diff a changed position carries."""
COMPARED_FIELDS: Final = (*DIFF_FIELDS, "status", "error")
"""What makes two steps at one position differ (``changed``)."""

ChangeKind = Literal["same", "changed", "added", "removed"]


class DiffPart(TypedDict):
    """One run of words of a word diff: kept (``equal``), only in the later run (``insert``) or
    only in the first (``delete``). The parts of a diff, joined, give each text back."""

    op: Literal["equal", "insert", "delete"]
    text: str


class StepDiff(TypedDict):
    """How a later run's step differs from the first run's at the same position: a word diff of
    each of ``DIFF_FIELDS`` (access as text: "all" or the indices), and which compared fields
    differ at all."""

    changed: list[str]
    instruction: list[DiffPart]
    worker: list[DiffPart]
    access: list[DiffPart]
    response: list[DiffPart]


class CompareRow(TypedDict):
    """One aligned position: each run's step there (null where it has none), how each run's
    step differs from the first run's (the first run's own entry is null), the position's kind
    overall, and for each run whose step changed, its diff."""

    round: int
    index: int
    change: ChangeKind
    changes: list[ChangeKind | None]
    steps: list[Step | None]
    diffs: list[StepDiff | None]


class OutcomeRow(TypedDict):
    """One line of the outcome table: a figure of each run, whether it differs from the first
    run's, the difference for numbers, and for the answer a word diff against the first run's."""

    key: str
    label: str
    values: list[str | float | None]
    differs: list[bool]
    deltas: list[float | None]
    diffs: list[list[DiffPart] | None]


class CompareRun(TypedDict):
    run: RunSummary
    pool_name: str


class Comparison(TypedDict):
    """Runs compared: the runs (the first is the one the others are measured against), their
    aligned steps, how many positions are of each kind, and the outcome table."""

    runs: list[CompareRun]
    steps: list[CompareRow]
    counts: dict[str, int]
    outcome: list[OutcomeRow]


class PageCompareRow(TypedDict):
    """A ``CompareRow`` as the compare page embeds it: each run's step there by id (the step is
    in that run's page state), null where it has none, and no word diffs (the page asks
    ``GET /api/compare/`` for them once its graphs are drawn)."""

    round: int
    index: int
    change: ChangeKind
    changes: list[ChangeKind | None]
    steps: list[int | None]


class PageComparison(TypedDict):
    """A ``Comparison`` with its rows as ``PageCompareRow``."""

    runs: list[CompareRun]
    steps: list[PageCompareRow]
    counts: dict[str, int]
    outcome: list[OutcomeRow]


class ComparePage(TypedDict):
    """What the compare page embeds: the comparison (steps by id: each is once in the page), and
    each run's page state (snapshot and laid-out graph, as the run page embeds it), in the same
    order as the runs."""

    comparison: PageComparison
    pages: list[PageState]


# Datasets and experiments ------------------------------------------------------------------------
# The experiment page polls ``ExperimentProgress`` (``GET /api/experiments/<id>/progress/``) and
# draws the ``Scoreboard``; the API's experiment detail carries both.


class ExperimentProgress(TypedDict):
    """Where an experiment is: its status and how many of its runs (items × arms) are done."""

    id: int
    status: str
    done: int
    total: int
    error: str


class TagScore(TypedDict):
    """Accuracy of one arm on the items of one tag, with its 95% Wilson interval."""

    runs: int
    accuracy: float | None
    low: float | None
    high: float | None


class ScoreboardArm(TypedDict):
    """One arm's row: accuracy over its graded runs (a failed run counts as wrong) with a 95%
    Wilson score interval, per tag too; means per item of tokens (all, the conductor's own, the
    workers'), model calls and cost; wall time p50/p95 in seconds (nearest rank)."""

    arm: int
    label: str
    strategy: str
    options: dict[str, Any]
    pool: int
    pool_name: str
    runs: int
    graded: int
    failed: int
    accuracy: float | None
    accuracy_low: float | None
    accuracy_high: float | None
    tags: dict[str, TagScore]
    tokens_per_item: float | None
    conductor_tokens_per_item: float | None
    worker_tokens_per_item: float | None
    calls_per_item: float | None
    cost_per_item: float | None
    wall_p50: float | None
    wall_p95: float | None


class Scoreboard(TypedDict):
    """Every arm's row, the tags seen, and for each column the arms holding its best value."""

    arms: list[ScoreboardArm]
    tags: list[str]
    best: dict[str, list[int]]
    interval: str


SCOREBOARD_COLUMNS: Final = {
    # column -> True when higher is better
    "accuracy": True,
    "tokens_per_item": False,
    "conductor_tokens_per_item": False,
    "worker_tokens_per_item": False,
    "calls_per_item": False,
    "cost_per_item": False,
    "wall_p50": False,
    "wall_p95": False,
}


def experiment_page_constants() -> dict[str, Any]:
    """What the experiment page needs from the server: statuses and the scoreboard's columns."""
    from orchestrator.models import Experiment as ExperimentRow

    return {
        "statuses": [str(status) for status in ExperimentRow.Status],
        "unfinished": [str(ExperimentRow.Status.QUEUED), str(ExperimentRow.Status.RUNNING)],
        "columns": SCOREBOARD_COLUMNS,
    }


# Review builders ---------------------------------------------------------------------------------


class ReviewPageState(TypedDict):
    """What the run page embeds for its review controls (``selectors.run_review_state``): the
    review, every comment, the project's failure kinds, whom the run may be assigned to, and
    whether the viewing user may review (reviewers and admins) and delete anyone's comment
    (admins)."""

    review: Review
    comments: list[Comment]
    kinds: list[Label]
    assignees: list[str]
    can_review: bool
    can_moderate: bool
    user: str


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


def comment_data(comment: Any) -> Comment:
    return {
        "id": comment.pk,
        "run": comment.run_id,
        "step": comment.step_id,
        "author": _username(comment.author) if comment.author_id else None,
        "body": comment.body,
        "created_at": iso(comment.created_at),
        "edited_at": iso(comment.edited_at),
    }


def review_data(review: Any, labels: Iterable[Any]) -> Review:
    """A run's review from its ``RunReview`` row (None before any review action) and its
    ``RunLabel`` rows (with their kinds)."""
    resolution: Resolution | None = None
    if review is not None and review.resolved_at is not None:
        resolution = {
            "by": _username(review.resolved_by) if review.resolved_by_id else None,
            "at": iso(review.resolved_at),
            "note": review.resolution_note,
            "fixed_by": review.fixed_by_id,
        }
    return {
        "labels": [{"id": label.kind_id, "name": label.kind.name} for label in labels],
        "assignee": _username(review.assignee) if review and review.assignee_id else None,
        "human_score": review.human_score if review else None,
        "flagged": bool(review and review.flagged),
        "resolution": resolution,
    }


# Batch replays -----------------------------------------------------------------------------------

BATCH_OUTCOMES: Final = VERDICTS
"""How a run ended, for a batch's before and after: its verdict (``orchestrator/verdicts.py``)."""


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


def batch_run_data(run: RunRow) -> BatchRun:
    return {
        "id": run.pk,
        "status": run.status,
        "outcome": verdict(run.status, run.score),
        "score": run.score,
        "tokens": run.tokens_in + run.tokens_out,
        "cost": run.cost,
        "wall_time": run.wall_time,
    }
