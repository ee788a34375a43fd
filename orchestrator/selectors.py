"""Reads: runs, steps and pools as a user may see them.

Every selector that takes a user restricts to the projects the user is a member of (superusers
see everything). List selectors return lazy querysets ordered newest first, with what list pages
show already joined, so a page costs a constant number of queries however many runs exist.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet, Sum, TextField
from django.db.models.expressions import Col
from django.db.models.functions import Cast, Coalesce, Substr, TruncDate

from orchestrator import wire
from orchestrator.engine import strategies
from orchestrator.engine.grading import GRADER_KINDS
from orchestrator.models import (
    ApiKey,
    AuditEntry,
    Batch,
    BatchItem,
    Comment,
    Dataset,
    DatasetItem,
    Experiment,
    ExperimentArm,
    FailureKind,
    Membership,
    Plan,
    Pool,
    Project,
    Run,
    RunEvent,
    RunLabel,
    RunReview,
    Step,
    Worker,
)
from orchestrator.verdicts import RIGHT_SCORE, verdict_filter

ROLES_THAT_RUN = (Membership.Role.ADMIN, Membership.Role.REVIEWER)

# What a runs list shows of a run; the long fields (answer, input) are cut by the page.
RUN_LIST_DEFERRED = ("strategy_options", "edits", "reference")


@dataclass(frozen=True, slots=True)
class RunChoices:
    """What a new run may ask for: the forms, the API and its schema offer these."""

    strategies: tuple[str, ...]
    graders: tuple[str, ...]
    max_worker_index: int
    max_reflection_rounds: int
    max_proposers: int


def run_choices() -> RunChoices:
    """The strategies and graders a run may use, and the bounds of the strategies' options."""
    return RunChoices(
        strategies=tuple(strategies.STRATEGIES),
        graders=tuple(GRADER_KINDS),
        max_worker_index=strategies.MAX_WORKER_INDEX,
        max_reflection_rounds=strategies.MAX_REFLECTION_ROUNDS,
        max_proposers=strategies.MAX_PROPOSERS,
    )


def user_project_ids(user: Any) -> QuerySet[Membership] | None:
    """A subquery of the project ids ``user`` belongs to; None means every project (superuser)."""
    if getattr(user, "is_superuser", False):
        return None
    return Membership.objects.filter(user_id=user.pk).values("project_id")


def user_role(*, user: Any, project: Project | int) -> str | None:
    """The user's role in a project ("admin", "reviewer", "viewer"), "admin" for superusers,
    None for anyone else."""
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return Membership.Role.ADMIN
    project_id = project if isinstance(project, int) else project.pk
    return (
        Membership.objects.filter(user_id=user.pk, project_id=project_id)
        .values_list("role", flat=True)
        .first()
    )


def user_roles(*, user: Any) -> dict[int, str]:
    """The user's role in each of their projects, by project id (superusers: admin everywhere)."""
    if not getattr(user, "is_authenticated", False):
        return {}
    if user.is_superuser:
        return dict.fromkeys(Project.objects.values_list("pk", flat=True), Membership.Role.ADMIN)
    return dict(Membership.objects.filter(user_id=user.pk).values_list("project_id", "role"))


def user_can_run(*, user: Any, project: Project | int) -> bool:
    """Whether a user may start and cancel runs in a project (admins and reviewers)."""
    return user_role(user=user, project=project) in ROLES_THAT_RUN


def user_can_view(*, user: Any, run: Run) -> bool:
    """Whether a user may see a run: a member of its project, or a superuser."""
    return user_role(user=user, project=run.project_id) is not None


def viewable_pairs(pairs: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which (user id, run id) pairs still hold: the run exists and the user is active and a
    member of its project, or a superuser. Four small queries however many pairs (the live
    sockets' periodic access check)."""
    pairs = set(pairs)
    user_ids = {user_id for user_id, _ in pairs}
    users = dict(
        get_user_model()
        .objects.filter(pk__in=user_ids, is_active=True)
        .values_list("pk", "is_superuser")
    )
    run_projects = dict(
        Run.objects.filter(pk__in={run_id for _, run_id in pairs}).values_list("pk", "project_id")
    )
    members = set(
        Membership.objects.filter(
            user_id__in=users, project_id__in=set(run_projects.values())
        ).values_list("user_id", "project_id")
    )
    return {
        (user_id, run_id)
        for user_id, run_id in pairs
        if user_id in users
        and run_id in run_projects
        and (users[user_id] or (user_id, run_projects[run_id]) in members)
    }


def viewable_run_seq(*, user_id: int, run_id: int) -> tuple[int, datetime] | None:
    """The run's ``(last_seq, created_at)`` if the user may see it now (the rule of
    ``viewable_pairs``: the run exists, the user is active and a member of its project, or a
    superuser), else None. One query: what a socket checks as it opens.

    Its SQL is written once per process (``_viewable_run_seq_sql``): building the two
    ``Exists`` subqueries through the ORM cost more than the query itself, on every socket."""
    sql, converters = _viewable_run_seq_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, [run_id, user_id, user_id])
        row = cursor.fetchone()
    if row is None:
        return None
    created_at = row[1]
    for converter in converters:
        created_at = converter(created_at, None, connection)
    return row[0], created_at


@functools.cache
def _viewable_run_seq_sql() -> tuple[str, list[Any]]:
    """The query of ``viewable_run_seq`` (parameters: run, user, user) and the converters the
    database backend applies to ``created_at`` (SQLite returns text)."""
    user_model = get_user_model()
    users = user_model._meta
    runs = Run._meta
    members = Membership._meta
    qn = connection.ops.quote_name

    def column(meta: Any, name: str) -> str:
        return qn(meta.get_field(name).column)

    created_at = runs.get_field("created_at")
    converters = connection.ops.get_db_converters(
        Col(runs.db_table, created_at)
    ) + created_at.get_db_converters(connection)
    sql = (
        f"SELECT r.{column(runs, 'last_seq')}, r.{column(runs, 'created_at')}"
        f" FROM {qn(runs.db_table)} r WHERE r.{column(runs, 'id')} = %s AND ("
        f"EXISTS (SELECT 1 FROM {qn(users.db_table)} u WHERE u.{qn(users.pk.column)} = %s"
        f" AND u.{column(users, 'is_active')} AND u.{column(users, 'is_superuser')})"
        f" OR EXISTS (SELECT 1 FROM {qn(members.db_table)} m"
        f" JOIN {qn(users.db_table)} u ON u.{qn(users.pk.column)} = m.{column(members, 'user')}"
        f" WHERE m.{column(members, 'user')} = %s AND u.{column(users, 'is_active')}"
        f" AND m.{column(members, 'project')} = r.{column(runs, 'project')}))"
    )
    return sql, converters


def _visible_runs(user: Any, project: Project | int | None = None) -> QuerySet[Run]:
    """Runs of the user's projects (of ``project`` alone when given).

    The project ids are read first (one small query) so that the runs query names them as
    constants: with one project, the database walks the (project, created_at) index and stops
    after a page instead of sorting every run it holds.
    """
    if not getattr(user, "is_authenticated", False):
        return Run.objects.none()
    project_id = project.pk if isinstance(project, Project) else project
    if user.is_superuser:
        return (
            Run.objects.all() if project_id is None else Run.objects.filter(project_id=project_id)
        )
    project_ids = list(
        Membership.objects.filter(user_id=user.pk).values_list("project_id", flat=True)
    )
    if project_id is not None:
        project_ids = [project_id] if project_id in project_ids else []
    if not project_ids:
        return Run.objects.none()
    if len(project_ids) == 1:
        return Run.objects.filter(project_id=project_ids[0])
    return Run.objects.filter(project_id__in=project_ids)


def run_list(
    *,
    user: Any,
    project: Project | int | None = None,
    status: str | None = None,
    pool: Pool | int | None = None,
    strategy: str | None = None,
    worker: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    score_min: float | None = None,
    score_max: float | None = None,
    q: str | None = None,
    verdict: str | None = None,
) -> QuerySet[Run]:
    """The runs a user may see, newest first, filtered.

    ``worker`` is text in the name or the model string of a worker used by any step of the run
    (case-insensitive substring). ``verdict`` is one of ``verdicts.VERDICTS``. ``q`` is free text over the input and
    the final answer (case-insensitive substring). Dates bound ``created_at`` (inclusive).
    ``project`` narrows to one of the user's projects. Each run has ``fell_back``
    (``run_fell_back``). The pool and the creator come joined;
    slicing the result is cheap on the list indexes (no COUNT is needed to show a page).
    """
    runs = _visible_runs(user, project)
    if status:
        runs = runs.filter(status=status)
    if pool:
        runs = runs.filter(pool_id=pool if isinstance(pool, int) else pool.pk)
    if strategy:
        runs = runs.filter(strategy=strategy)
    if worker:
        used = Q(worker_name__icontains=worker) | Q(model__icontains=worker)
        runs = runs.filter(Exists(Step.objects.filter(used, run_id=OuterRef("pk"))))
    if verdict:
        runs = runs.filter(verdict_filter(verdict))
    if created_after is not None:
        runs = runs.filter(created_at__gte=created_after)
    if created_before is not None:
        runs = runs.filter(created_at__lte=created_before)
    if score_min is not None:
        runs = runs.filter(score__gte=score_min)
    if score_max is not None:
        runs = runs.filter(score__lte=score_max)
    if q:
        runs = runs.filter(Q(input__icontains=q) | Q(answer__icontains=q))
    return (
        runs.select_related("pool", "created_by")
        .annotate(fell_back=run_fell_back())
        .only(
            *(f.name for f in Run._meta.concrete_fields if f.name not in RUN_LIST_DEFERRED),
            "pool__id",
            "pool__name",
            "pool__conductor_model",
            "created_by__id",
            "created_by__username",
        )
        .order_by("-created_at", "-id")
    )


def run_has_fallback(*, run: Run) -> bool:
    """Whether a run's plan of some round is its pool's fallback (``fell_back`` when the run
    came annotated by ``run_list``; its prefetched plans, or one query, otherwise)."""
    fell_back = getattr(run, "fell_back", None)
    if fell_back is not None:
        return bool(fell_back)
    if "plans" in getattr(run, "_prefetched_objects_cache", {}):
        return any(plan.fallback for plan in run.plans.all())
    return run.pk is not None and run.plans.exclude(fallback="").exists()


def run_fell_back() -> Exists:
    """Whether a run's plan of some round is its pool's fallback, not the conductor's (an
    annotation: no column stores it)."""
    return Exists(Plan.objects.filter(run_id=OuterRef("pk")).exclude(fallback=""))


def run_get(*, user: Any, run_id: int) -> Run | None:
    """One run the user may see, with its pool and creator; None if it is not there for them."""
    return (
        _visible_runs(user)
        .select_related("pool", "created_by", "project")
        .filter(pk=run_id)
        .first()
    )


def run_ids_queued_before(before: datetime, *, limit: int) -> list[int]:
    """Ids of runs created before ``before`` and still queued, oldest first (for the sweep)."""
    return list(
        Run.objects.filter(status=Run.Status.QUEUED, created_at__lt=before)
        .order_by("created_at", "id")
        .values_list("pk", flat=True)[:limit]
    )


def run_detail(*, user: Any, run_id: int) -> Run | None:
    """A run with its plans and steps prefetched (two more queries), or None. The steps come
    without the messages they were sent (the step's own endpoint has them)."""
    return (
        _visible_runs(user)
        .select_related("pool", "created_by", "project")
        .prefetch_related(
            Prefetch("plans", queryset=Plan.objects.order_by("round")),
            Prefetch("steps", queryset=Step.objects.order_by("round", "index").defer("messages")),
        )
        .filter(pk=run_id)
        .first()
    )


def run_ids_unheld(*, now: datetime, queued_for: timedelta, limit: int = 100) -> list[int]:
    """Unfinished runs that no live execution holds, oldest first: their executor's lease
    lapsed (its process died), or none ever held them (a stopped process let go, or a run
    queued longer than ``queued_for`` was never started)."""
    nobody = Q(executor="") & (~Q(status=Run.Status.QUEUED) | Q(created_at__lt=now - queued_for))
    return list(
        Run.objects.exclude(status__in=Run.FINISHED)
        .filter(Q(lease_expires_at__lt=now) | nobody)
        .order_by("created_at", "id")
        .values_list("pk", flat=True)[:limit]
    )


def step_get(*, user: Any, step_id: int) -> Step | None:
    """One step, with its run, if the user may see the run; None otherwise."""
    if not getattr(user, "is_authenticated", False):
        return None
    steps = Step.objects.select_related("run", "run__pool")
    projects = user_project_ids(user)
    if projects is not None:
        steps = steps.filter(run__project_id__in=projects)
    return steps.filter(pk=step_id).first()


def _enabled_workers() -> Prefetch:
    """A pool's enabled workers, in order, as ``pool.enabled_workers``."""
    return Prefetch(
        "workers",
        queryset=Worker.objects.filter(enabled=True).order_by("position", "id"),
        to_attr="enabled_workers",
    )


def pools_for(*, user: Any) -> QuerySet[Pool]:
    """The pools of the user's projects, by name, with their enabled workers in order."""
    if not getattr(user, "is_authenticated", False):
        return Pool.objects.none()
    projects = user_project_ids(user)
    pools = Pool.objects.all() if projects is None else Pool.objects.filter(project_id__in=projects)
    return (
        pools.select_related("project").prefetch_related(_enabled_workers()).order_by("name", "id")
    )


def enabled_worker_names(*, projects: Sequence[Project | int]) -> list[str]:
    """The names of the enabled workers of the projects' pools, sorted, each once."""
    workers = Worker.objects.filter(pool__project__in=projects, enabled=True)
    return sorted(set(workers.values_list("name", flat=True)))


def pool_enabled_workers(*, pool: Pool) -> list[Worker]:
    """A pool's enabled workers in order (``pools_for`` prefetches them as ``enabled_workers``)."""
    workers = getattr(pool, "enabled_workers", None)
    if workers is not None:
        return list(workers)
    return list(Worker.objects.filter(pool=pool, enabled=True).order_by("position", "id"))


def user_pool(*, user: Any, pool_id: int) -> Pool | None:
    """One pool of the user's projects as ``pools_for`` gives it; None if it is not theirs."""
    return pools_for(user=user).filter(pk=pool_id).first()


def pools_runnable_by(*, user: Any) -> QuerySet[Pool]:
    """The pools a user may start runs on (admin or reviewer of their project)."""
    if getattr(user, "is_superuser", False):
        return pools_for(user=user)
    return pools_for(user=user).filter(
        project_id__in=Membership.objects.filter(user_id=user.pk, role__in=ROLES_THAT_RUN).values(
            "project_id"
        )
    )


_STEP_JSON_COLUMNS = ("access", "reads", "attempt_log")


def _step_values(steps: QuerySet[Step], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """``steps.values_list(*columns)``, with the JSON columns read as text and decoded in one
    ``json.loads`` for all rows: decoding them one value at a time (Django's JSONField) took
    more than the rest of the read on runs of thousands of steps."""
    positions = [i for i, column in enumerate(columns) if column in _STEP_JSON_COLUMNS]
    if not positions:
        return list(steps.values_list(*columns))
    texts = {f"{column}_text": Cast(column, TextField()) for column in _STEP_JSON_COLUMNS}
    names = [f"{column}_text" if column in _STEP_JSON_COLUMNS else column for column in columns]
    rows = [list(row) for row in steps.annotate(**texts).values_list(*names)]
    if not rows:
        return []
    encoded = ",".join(row[i] or "null" for row in rows for i in positions)
    decoded = iter(json.loads(f"[{encoded}]"))
    for row in rows:
        for i in positions:
            row[i] = next(decoded)
    return [tuple(row) for row in rows]


def run_graph(*, run: Run, round: int | None = None) -> wire.Graph:
    """The graph of a run (nodes, edges, groups with positions) as ``orchestrator.graph`` builds
    it; ``round`` asks for one round expanded."""
    from orchestrator.graph import build_graph

    plans = [
        wire.plan_data(plan)
        for plan in Plan.objects.filter(run_id=run.pk).defer("messages").order_by("round")
    ]
    if round is None:
        return build_graph(plans=plans, steps=_graph_steps(run), round=round)
    steps = _steps_placing(run, round)
    steps.extend(_graph_steps(run, round=round))
    steps.sort(key=lambda step: step["round"])  # stable: each round's steps stay in order
    return build_graph(plans=plans, steps=steps, round=round)


_BOX_COLUMNS: Final = ("id", "round", "index", "status", "reads")
"""What the layout needs of a step whose round it only places (a folded round's box)."""


def _graph_steps(
    run: Run, *, round: int | None = None, before: int | None = None, boxes_only: bool = False
) -> list[Any]:
    """A run's steps (one round's with ``round``, the rounds before one with ``before``) as the
    layout reads them, in order: every ``wire.GraphStep`` column, or with ``boxes_only`` what a
    round's box needs. Only what the graph draws, as tuples: building 5,000 model instances (or
    full step_data dicts) cost more than the layout itself."""
    columns = _BOX_COLUMNS if boxes_only else wire.GRAPH_STEP_COLUMNS
    keys = _BOX_COLUMNS if boxes_only else tuple(wire.GraphStep.__annotations__)
    steps = Step.objects.filter(run_id=run.pk)
    if round is not None:
        steps = steps.filter(round=round)
    if before is not None:
        steps = steps.filter(round__lt=before)
    return [
        dict(zip(keys, row, strict=True))
        for row in _step_values(steps.order_by("round", "index"), columns)
    ]


def run_snapshot(*, run: Run) -> wire.RunState:
    """Everything a page needs to draw a run as it is now (one query per table)."""
    return {
        "run": wire.run_data(run),
        "plans": [wire.plan_data(plan) for plan in run.plans.all()],
        # step_data leaves out messages and responses: do not load them (large runs).
        "steps": wire.step_rows_data(
            _step_values(
                Step.objects.filter(run_id=run.pk).order_by("round", "index"),
                wire.STEP_DATA_COLUMNS,
            )
        ),
    }


def run_snapshot_message(*, run_id: int) -> wire.SnapshotMessage:
    """What the websocket sends first: the run's state and the seq it is current to."""
    run = Run.objects.get(pk=run_id)
    return {
        "type": wire.SNAPSHOT,
        "run": run_id,
        "seq": run.last_seq,
        "state": run_snapshot(run=run),
    }


def run_events_after(*, run_id: int, seq: int) -> list[dict[str, Any]]:
    """The stored events of a run after ``seq``, in order: what a reconnecting client missed."""
    return list(
        RunEvent.objects.filter(run_id=run_id, seq__gt=seq)
        .order_by("seq")
        .values_list("data", flat=True)
    )


def run_progress(*, run_id: int) -> tuple[int, str, str] | None:
    """A run's last seq, status and executor (None once it is deleted): what a socket whose
    channel layer cannot reach the executing process reads to tell whether there is more."""
    return Run.objects.filter(pk=run_id).values_list("last_seq", "status", "executor").first()


def run_page_state(*, run: Run) -> wire.PageState:
    """What the run page draws, read once: the run's snapshot, the seq it is current to (the
    page's socket then asks for the events after it), and its graph laid out from that same
    snapshot, with the layout's measures so the page can lay out a round again as it grows.

    ``run`` must be freshly read: its ``last_seq`` is read no later than the steps and plans, so
    an event that lands meanwhile is at worst applied twice (each event carries whole objects),
    never missed.
    """
    from orchestrator.graph import COLLAPSE_ABOVE, build_graph, geometry

    seq = run.last_seq
    if run.step_count > COLLAPSE_ABOVE:
        # Likely folded: lay out from the graph's columns alone, and embed the steps of the
        # rounds still open only (a finished round's steps come when it is opened: a folded run
        # of 50,000 steps embedded them all, 22 MB of page).
        plans = [wire.plan_data(plan) for plan in run.plans.all()]
        graph_steps = _graph_steps(run, boxes_only=True)
        graph = build_graph(plans=plans, steps=graph_steps, collapse_above=COLLAPSE_ABOVE)
        # (Not folded after all, with fewer steps than the run row counts: read in full below.)
        if graph["collapsed"]:
            folded = _folded_rounds(run, plans, graph_steps)
            folded_numbers = {entry["round"] for entry in folded}
            open_rounds = {step["round"] for step in graph_steps} - folded_numbers
            steps = wire.step_rows_data(
                _step_values(
                    Step.objects.filter(run_id=run.pk, round__in=open_rounds).order_by(
                        "round", "index"
                    ),
                    wire.STEP_DATA_COLUMNS,
                )
            )
            state: wire.RunState = {"run": wire.run_data(run), "plans": plans, "steps": steps}
            return {
                "seq": seq,
                "state": wire.page_run_state(state),
                "graph": wire.page_graph(graph),
                "geometry": geometry(),
                "folded": folded,
            }
    state = run_snapshot(run=run)
    return {
        "seq": seq,
        "state": wire.page_run_state(state),
        "graph": wire.page_graph(build_graph(plans=state["plans"], steps=state["steps"])),
        "geometry": geometry(),
        "folded": [],
    }


def _folded_rounds(run: Run, plans: list[wire.Plan], steps: list[Any]) -> list[wire.FoldedRound]:
    """The rounds of a folded graph that the run page need not embed: those whose steps have all
    finished and that can gain no step (a later round exists, or the run has finished)."""
    by_round: dict[int, list[Any]] = {}
    for step in steps:
        by_round.setdefault(step["round"], []).append(step)
    last = max([*by_round, *(plan["round"] for plan in plans)], default=-1)
    finished = set(Step.FINISHED)
    folded: list[wire.FoldedRound] = []
    for number, round_steps in sorted(by_round.items()):
        if any(step["status"] not in finished for step in round_steps):
            continue
        if number == last and run.status not in Run.FINISHED:
            continue
        not_succeeded: dict[str, list[int]] = {}
        for step in round_steps:
            if step["status"] != Step.Status.SUCCEEDED:
                not_succeeded.setdefault(step["status"], []).append(step["id"])
        folded.append({"round": number, "not_succeeded": not_succeeded})
    return folded


def run_round_steps(*, run: Run, round: int | None = None, graph: bool = False) -> wire.RoundSteps:
    """The steps of one round of a run (every step with ``round`` None), in order, as a table,
    and the seq they are current to at least (read first): what the run page fetches to open a
    folded round; with ``graph`` (and ``round``) that round laid out, as
    ``run_graph(round=...)`` lays it out, in the page's form."""
    from orchestrator.graph import build_graph

    seq = Run.objects.filter(pk=run.pk).values_list("last_seq", flat=True).get()
    query = Step.objects.filter(run_id=run.pk)
    if round is not None:
        query = query.filter(round=round)
    steps = wire.step_rows_data(
        _step_values(query.order_by("round", "index"), wire.STEP_DATA_COLUMNS)
    )
    layout = None
    if graph and round is not None:
        plans = [
            wire.plan_data(plan)
            for plan in Plan.objects.filter(run_id=run.pk).defer("messages").order_by("round")
        ]
        placed = _steps_placing(run, round)
        placed.extend(steps)
        placed.sort(key=lambda step: step["round"])  # stable: a round's steps stay in order
        layout = wire.page_graph(build_graph(plans=plans, steps=placed, round=round))
    return {"seq": seq, "steps": wire.step_table(steps), "graph": layout}


def _steps_placing(run: Run, round: int) -> list[Any]:
    """The other rounds' steps as laying out ``round`` alone needs them: the earlier rounds'
    layers (their boxes place it); of the later ones only which they are (they count, and a
    read may name one)."""
    earlier = _graph_steps(run, boxes_only=True, before=round)
    later = Step.objects.filter(run_id=run.pk, round__gt=round).order_by("round", "index")
    keys = ("id", "round", "index")
    return [*earlier, *(dict(zip(keys, row, strict=True)) for row in later.values_list(*keys))]


def worker_missing_keys(*, worker: Worker) -> list[str]:
    """The environment variables this worker's key should be in that this server lacks (names,
    never values): its steps fail at once until an operator sets them."""
    from orchestrator.providers import missing_key_variables

    return missing_key_variables(
        worker.model, api_base=worker.api_base, api_key_env=worker.api_key_env
    )


def conductor_missing_keys(*, pool: Pool) -> list[str]:
    """The same for the pool's conductor."""
    from orchestrator.providers import missing_key_variables

    return missing_key_variables(
        pool.conductor_model,
        api_base=pool.conductor_api_base,
        api_key_env=pool.conductor_api_key_env,
    )


def api_pools(*, project: Project | int) -> list[Pool]:
    """The pools of one project that the OpenAI-compatible endpoint offers (those with an
    enabled worker), by name, with their enabled workers in order."""
    project_id = project if isinstance(project, int) else project.pk
    pools = (
        Pool.objects.filter(project_id=project_id)
        .prefetch_related(_enabled_workers())
        .order_by("name", "id")
    )
    return [pool for pool in pools if pool.enabled_workers]


def api_keys_of(*, user: Any) -> QuerySet[ApiKey]:
    """A user's API keys, newest first, with their project (never the key: only its prefix)."""
    return (
        ApiKey.objects.filter(user_id=user.pk)
        .select_related("project")
        .order_by("-created_at", "-id")
    )


MAX_FAMILY = 500
"""The most runs a family read returns (its root first, then replays oldest first)."""


def run_family(*, run: Run) -> wire.Family:
    """The family of ``run``: the source it was replayed from, and that one's, up to the root;
    then the root and every replay made from it or from its replays, level by level, oldest
    first. Bounded by MAX_FAMILY runs (one query per level)."""
    root = run
    seen = {run.pk}
    while root.replay_of_id is not None and len(seen) < MAX_FAMILY:
        parent = Run.objects.filter(pk=root.replay_of_id, project_id=run.project_id).first()
        if parent is None or parent.pk in seen:
            break
        seen.add(parent.pk)
        root = parent
    members = [Run.objects.select_related("created_by").get(pk=root.pk)]
    frontier = [root.pk]
    while frontier and len(members) < MAX_FAMILY:
        children = list(
            Run.objects.filter(replay_of_id__in=frontier, project_id=run.project_id)
            .select_related("created_by")
            .order_by("created_at", "id")[: MAX_FAMILY - len(members)]
        )
        members += children
        frontier = [child.pk for child in children]
    return {"root": root.pk, "runs": [wire.family_run_data(member) for member in members]}


def run_replay_context(*, run: Run, user: Any) -> dict[str, Any]:
    """What the run page needs to offer a replay: whether the user may (admins; the page offers
    it once the run has finished), the pool's enabled workers (id and name, in the engine's
    order), and the run's family."""
    can_replay = user_role(user=user, project=run.project_id) == Membership.Role.ADMIN
    workers = Worker.objects.filter(pool_id=run.pool_id, enabled=True).order_by("position", "id")
    return {
        "can_replay": can_replay,
        "workers": [{"id": w.pk, "name": w.name} for w in workers] if can_replay else [],
        "family": run_family(run=run),
    }


def runs_to_compare(*, user: Any, run_ids: Sequence[int]) -> list[Run] | None:
    """The runs named by ``run_ids``, in that order, with their pools; None unless the user may
    see every one of them (one query)."""
    found = {
        run.pk: run for run in _visible_runs(user).select_related("pool").filter(pk__in=run_ids)
    }
    if any(run_id not in found for run_id in run_ids):
        return None
    return [found[run_id] for run_id in run_ids]


def _compared_steps(runs: Sequence[Run]) -> tuple[list[list[wire.Step]], dict[int, str]]:
    """Each run's steps in order (``wire.Step``) and every step's response by id, in one query."""
    width = len(wire.STEP_DATA_COLUMNS)
    rows = _step_values(
        Step.objects.filter(run_id__in=[run.pk for run in runs]).order_by(
            "run_id", "round", "index"
        ),
        (*wire.STEP_DATA_COLUMNS, "response", "run_id"),
    )
    step_rows: dict[int, list[Any]] = {run.pk: [] for run in runs}
    responses: dict[int, str] = {}
    for row in rows:
        step_rows[row[-1]].append(row[:width])
        responses[row[0]] = row[width]
    return [wire.step_rows_data(step_rows[run.pk]) for run in runs], responses


def _comparison(
    runs: Sequence[Run],
    steps_of_runs: list[list[wire.Step]],
    responses: dict[int, str],
    *,
    word_diffs: bool = True,
) -> wire.Comparison:
    from orchestrator.comparing import compare

    return compare(
        runs=[{"run": wire.run_data(run), "pool_name": run.pool.name} for run in runs],
        steps_of_runs=steps_of_runs,
        responses=responses,
        word_diffs=word_diffs,
    )


def run_compare(*, runs: Sequence[Run]) -> wire.Comparison:
    """Runs compared step by step (aligned by round and index, each position marked against the
    first run, word diffs of what changed) and by outcome: ``orchestrator/comparing.py``. Reads
    the steps of every run, responses included, in one query."""
    return _comparison(runs, *_compared_steps(runs))


def compare_page_state(*, runs: Sequence[Run]) -> wire.ComparePage:
    """What the compare page embeds: the comparison without the steps' word diffs (rows name
    their steps by id), and each run's page state (its snapshot and graph laid out from it, as
    ``run_page_state`` gives the run page), from one read of the steps and one of the plans."""
    from orchestrator.graph import build_graph, geometry

    steps_of_runs, responses = _compared_steps(runs)
    plans: dict[int, list[wire.Plan]] = {run.pk: [] for run in runs}
    for plan in (
        Plan.objects.filter(run_id__in=[run.pk for run in runs])
        .defer("messages")
        .order_by("run_id", "round")
    ):
        plans[plan.run_id].append(wire.plan_data(plan))
    pages: list[wire.PageState] = []
    for run, steps in zip(runs, steps_of_runs, strict=True):
        state: wire.RunState = {"run": wire.run_data(run), "plans": plans[run.pk], "steps": steps}
        graph = wire.page_graph(build_graph(plans=state["plans"], steps=state["steps"]))
        pages.append(
            {
                "seq": run.last_seq,
                "state": wire.page_run_state(state),
                "graph": graph,
                "geometry": geometry(),
                "folded": [],
            }
        )
    # The steps' word diffs are left out: the page asks the API for them once its graphs are
    # drawn (they were most of the work and of the page's size for runs that differ throughout).
    comparison = _comparison(runs, steps_of_runs, responses, word_diffs=False)
    rows: list[wire.PageCompareRow] = [
        {
            "round": row["round"],
            "index": row["index"],
            "change": row["change"],
            "changes": row["changes"],
            "steps": [step["id"] if step else None for step in row["steps"]],
        }
        for row in comparison["steps"]
    ]
    return {"comparison": {**comparison, "steps": rows}, "pages": pages}


# Datasets and experiments ------------------------------------------------------------------------


def _in_user_projects(queryset: QuerySet[Any], user: Any) -> QuerySet[Any]:
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    projects = user_project_ids(user)
    return queryset if projects is None else queryset.filter(project_id__in=projects)


def dataset_list(*, user: Any) -> QuerySet[Dataset]:
    """The datasets of the user's projects, by name."""
    return _in_user_projects(Dataset.objects.select_related("project"), user).order_by("name", "id")


def dataset_get(*, user: Any, dataset_id: int) -> Dataset | None:
    return dataset_list(user=user).filter(pk=dataset_id).first()


def dataset_items(*, dataset: Dataset, limit: int | None = None) -> QuerySet[DatasetItem]:
    """A dataset's items in order (the first ``limit`` of them when given)."""
    items = DatasetItem.objects.filter(dataset=dataset).order_by("position")
    return items if limit is None else items[:limit]


def experiment_list(*, user: Any, dataset: Dataset | int | None = None) -> QuerySet[Experiment]:
    """The experiments of the user's projects (of one dataset), newest first."""
    experiments = _in_user_projects(Experiment.objects.select_related("dataset", "project"), user)
    if dataset is not None:
        experiments = experiments.filter(dataset=dataset)
    return experiments.order_by("-created_at", "-id")


def experiment_get(*, user: Any, experiment_id: int) -> Experiment | None:
    return experiment_list(user=user).filter(pk=experiment_id).first()


def experiment_arms(*, experiment: Experiment) -> list[ExperimentArm]:
    """An experiment's arms in order."""
    return list(ExperimentArm.objects.filter(experiment=experiment).order_by("position", "id"))


def experiment_arm_ids(*, experiment: Experiment) -> set[int]:
    return set(ExperimentArm.objects.filter(experiment=experiment).values_list("pk", flat=True))


# Projects, pools, members and the audit log, as a project's admins and members see them.

LATENCY_SAMPLE = 20_000


def user_projects(*, user: Any) -> list[Project]:
    """The user's projects by name, each with ``role`` set (superusers: every project, admin)."""
    if not getattr(user, "is_authenticated", False):
        return []
    if user.is_superuser:
        projects = list(Project.objects.order_by("name", "id"))
        for project in projects:
            project.role = Membership.Role.ADMIN
        return projects
    # One query: the memberships with their projects.
    memberships = Membership.objects.filter(user_id=user.pk).select_related("project")
    projects = []
    for membership in memberships.order_by("project__name", "project_id"):
        membership.project.role = membership.role
        projects.append(membership.project)
    return projects


def projects_with_role(*, user: Any, roles: Sequence[str] | None = None) -> list[Project]:
    """The user's projects by name (those where their role is one of ``roles`` when given)."""
    ids = [pk for pk, role in user_roles(user=user).items() if roles is None or role in roles]
    return list(Project.objects.filter(pk__in=ids).order_by("name", "id"))


def project_for(*, user: Any, project: str | int) -> Project | None:
    """The project named by its id or its slug (a string is the slug, or the id when no project
    has that slug), if the user is a member (or a superuser), with ``role`` set; else None."""
    found = None
    if isinstance(project, str):
        found = Project.objects.filter(slug=project).first()
        if found is None and project.isascii() and project.isdigit():
            project = int(project)
    if isinstance(project, int) and not isinstance(project, bool) and 0 < project < 2**63:
        found = Project.objects.filter(pk=project).first()
    if found is None:
        return None
    found.role = user_role(user=user, project=found)
    return found if found.role is not None else None


def membership_get(*, project: Project | int, membership_id: int) -> Membership | None:
    """One member of a project, with their user; None if it is not one of its members."""
    return project_members(project=project).filter(pk=membership_id).first()


def current_project(*, user: Any, project_id: int | None) -> Project | None:
    """The project a user works in: ``project_id`` (kept in their session) while they are a
    member of it, else their first project by name; None for a user of no project."""
    projects = user_projects(user=user)
    chosen = next((p for p in projects if p.pk == project_id), None)
    return chosen or (projects[0] if projects else None)


def project_pools(*, project: Project | int) -> QuerySet[Pool]:
    """A project's pools by name, with their workers (all of them, in order) as ``all_workers``."""
    project_id = project if isinstance(project, int) else project.pk
    return (
        Pool.objects.filter(project_id=project_id)
        .prefetch_related(
            Prefetch(
                "workers", queryset=Worker.objects.order_by("position", "id"), to_attr="all_workers"
            )
        )
        .order_by("name", "id")
    )


def pool_get(*, user: Any, pool_id: int) -> Pool | None:
    """One pool of the user's projects, with its project and every worker in order
    (``all_workers``); None if it is not there for them. ``role`` is the user's role in it."""
    if not getattr(user, "is_authenticated", False):
        return None
    pools = Pool.objects.select_related("project").prefetch_related(
        Prefetch(
            "workers", queryset=Worker.objects.order_by("position", "id"), to_attr="all_workers"
        )
    )
    projects = user_project_ids(user)
    if projects is not None:
        pools = pools.filter(project_id__in=projects)
    pool = pools.filter(pk=pool_id).first()
    if pool is not None:
        pool.role = user_role(user=user, project=pool.project_id)
    return pool


@dataclass(frozen=True, slots=True)
class WorkerUsage:
    """How a pool's worker did in the steps stored for it (reused steps left out: they made no
    call). ``success_rate`` is over finished steps; latencies over the newest
    ``LATENCY_SAMPLE`` calls of the pool."""

    worker: Worker
    runs: int
    steps: int
    success_rate: float | None
    tokens_in: int
    tokens_out: int
    cost: float
    latency_p50: float | None
    latency_p95: float | None


def _percentile(ordered: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return None
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def pool_usage(*, pool: Pool | int) -> list[WorkerUsage]:
    """Each worker of a pool (in order, disabled ones too) with its usage: three queries
    however many workers and steps (the workers, one aggregate, one latency sample)."""
    pool_id = pool if isinstance(pool, int) else pool.pk
    workers = list(Worker.objects.filter(pool_id=pool_id).order_by("position", "id"))
    calls = Step.objects.filter(worker__pool_id=pool_id, reused_from__isnull=True)
    finished = Q(status__in=[Step.Status.SUCCEEDED, Step.Status.FAILED])
    totals = {
        row["worker_id"]: row
        for row in calls.values("worker_id").annotate(
            runs=Count("run_id", distinct=True),
            steps=Count("id"),
            succeeded=Count("id", filter=Q(status=Step.Status.SUCCEEDED)),
            finished=Count("id", filter=finished),
            tokens_in_sum=Sum("tokens_in"),
            tokens_out_sum=Sum("tokens_out"),
            cost_sum=Sum("cost"),
        )
    }
    latencies: dict[int, list[float]] = {}
    for worker_id, latency in (
        calls.filter(latency__isnull=False)
        .order_by("-id")
        .values_list("worker_id", "latency")[:LATENCY_SAMPLE]
    ):
        latencies.setdefault(worker_id, []).append(latency)
    usage = []
    for worker in workers:
        row = totals.get(worker.pk, {})
        ordered = sorted(latencies.get(worker.pk, []))
        done = row.get("finished", 0)
        usage.append(
            WorkerUsage(
                worker=worker,
                runs=row.get("runs", 0),
                steps=row.get("steps", 0),
                success_rate=row["succeeded"] / done if done else None,
                tokens_in=row.get("tokens_in_sum") or 0,
                tokens_out=row.get("tokens_out_sum") or 0,
                cost=row.get("cost_sum") or 0.0,
                latency_p50=_percentile(ordered, 0.5),
                latency_p95=_percentile(ordered, 0.95),
            )
        )
    return usage


def project_members(*, project: Project | int) -> QuerySet[Membership]:
    """A project's members by username, with their users."""
    project_id = project if isinstance(project, int) else project.pk
    return (
        Membership.objects.filter(project_id=project_id)
        .select_related("user")
        .order_by("user__username", "id")
    )


def audit_entries(
    *,
    project: Project | int,
    action: str | None = None,
    actor: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
) -> QuerySet[AuditEntry]:
    """A project's audit entries, newest first; ``actor`` is a username, dates bound
    ``created_at`` (``created_before`` exclusive)."""
    project_id = project if isinstance(project, int) else project.pk
    entries = AuditEntry.objects.filter(project_id=project_id)
    if action:
        entries = entries.filter(action=action)
    if actor:
        entries = entries.filter(actor_name=actor)
    if created_after is not None:
        entries = entries.filter(created_at__gte=created_after)
    if created_before is not None:
        entries = entries.filter(created_at__lt=created_before)
    return entries.order_by("-created_at", "-id")


def audit_choices(*, project: Project | int) -> tuple[list[str], list[str]]:
    """The actions and actor names that occur in a project's audit log (for its filters)."""
    project_id = project if isinstance(project, int) else project.pk
    entries = AuditEntry.objects.filter(project_id=project_id).order_by()
    actions = sorted(set(entries.values_list("action", flat=True).distinct()))
    actors = sorted(
        set(entries.exclude(actor_name="").values_list("actor_name", flat=True).distinct())
    )
    return actions, actors


# Review ------------------------------------------------------------------------------------------

REVIEW_STATES = ("open", "resolved", "all")
# A run "gives a wrong answer" below this score (its human score where set, else the grader's):
# by default what a wrong verdict means.
REVIEW_SCORE_THRESHOLD = RIGHT_SCORE


def run_review(*, run_id: int) -> tuple[RunReview | None, list[RunLabel]]:
    """A run's review row (None before any review action) and its labels, with their kinds
    and whoever the review names (two queries)."""
    review = (
        RunReview.objects.select_related("assignee", "resolved_by").filter(run_id=run_id).first()
    )
    labels = list(
        RunLabel.objects.filter(run_id=run_id)
        .select_related("kind")
        .order_by("kind__position", "kind_id")
    )
    return review, labels


def failure_kinds(*, project: Project | int) -> list[FailureKind]:
    """A project's failure kinds, in order (``services.review.failure_kinds_ensure`` makes the
    defaults of a project that has none yet)."""
    project_id = project if isinstance(project, int) else project.pk
    return list(FailureKind.objects.filter(project_id=project_id).order_by("position", "id"))


def review_assignees(*, project: Project | int) -> list[str]:
    """The usernames a run of the project may be assigned to: its active reviewers and admins."""
    project_id = project if isinstance(project, int) else project.pk
    return list(
        Membership.objects.filter(
            project_id=project_id, role__in=ROLES_THAT_RUN, user__is_active=True
        )
        .order_by("user__username")
        .values_list("user__username", flat=True)
    )


def run_review_state(*, run: Run, user: Any) -> wire.ReviewPageState:
    """What the run page's review controls start from: the review, every comment (oldest
    first), the project's failure kinds, possible assignees, whether ``user`` may review, and
    whether they may delete anyone's comment (admins)."""
    review, labels = run_review(run_id=run.pk)
    comments = (
        Comment.objects.filter(run_id=run.pk).select_related("author").order_by("created_at", "id")
    )
    role = user_role(user=user, project=run.project_id)
    return {
        "review": wire.review_data(review, labels),
        "comments": [wire.comment_data(comment) for comment in comments],
        "kinds": [
            {"id": kind.pk, "name": kind.name} for kind in failure_kinds(project=run.project_id)
        ],
        "assignees": review_assignees(project=run.project_id),
        "can_review": role in ROLES_THAT_RUN,
        "can_moderate": role == Membership.Role.ADMIN,
        "user": user.get_username(),
    }


def comment_get(*, user: Any, comment_id: int) -> Comment | None:
    """One comment, with its run, if the user may see the run; None otherwise."""
    if not getattr(user, "is_authenticated", False):
        return None
    comments = Comment.objects.select_related("run", "author")
    projects = user_project_ids(user)
    if projects is not None:
        comments = comments.filter(run__project_id__in=projects)
    return comments.filter(pk=comment_id).first()


def comment_list(*, run: Run) -> QuerySet[Comment]:
    """A run's comments, oldest first, with their authors."""
    return (
        Comment.objects.filter(run_id=run.pk).select_related("author").order_by("created_at", "id")
    )


def step_nested_runs(*, step: Step) -> list[dict[str, Any]]:
    """The runs a step's worker started through /v1, oldest first: their id and status."""
    return list(Run.objects.filter(called_from=step).order_by("id").values("id", "status"))


def run_finished_row(*, run_id: int) -> Run:
    """A run as stored, without checking who may see it (the caller has): /v1 reads the run it
    made once it has finished."""
    return Run.objects.get(pk=run_id)


def run_step(*, run: Run, step_id: int) -> Step | None:
    """One step of ``run``; None if it is not one of its steps."""
    return Step.objects.filter(run=run, pk=step_id).first()


def user_by_username(*, username: str) -> Any:
    """The user of that username, or None."""
    return get_user_model().objects.filter(username=username).first()


def failure_kind_get(*, user: Any, kind_id: int) -> FailureKind | None:
    """One failure kind of a project the user belongs to; None otherwise."""
    if not getattr(user, "is_authenticated", False):
        return None
    kinds = FailureKind.objects.all()
    projects = user_project_ids(user)
    if projects is not None:
        kinds = kinds.filter(project_id__in=projects)
    return kinds.filter(pk=kind_id).first()


def _queue_runs(
    *,
    user: Any,
    threshold: float,
    kind: int | None = None,
    assignee: str | None = None,
    state: str = "open",
    **filters: Any,
) -> QuerySet[Run]:
    """``run_list`` narrowed to runs that want review: failed, a wrong answer (the human score,
    or else the grader's, below ``threshold``), flagged, or labelled with a failure kind."""
    labelled = Exists(RunLabel.objects.filter(run_id=OuterRef("pk")))
    runs = (
        run_list(user=user, **filters)
        .alias(effective_score=Coalesce("review__human_score", "score"), labelled=labelled)
        .filter(
            Q(status=Run.Status.FAILED)
            | Q(effective_score__lt=threshold)
            | Q(review__flagged=True)
            | Q(labelled=True)
        )
    )
    if state == "open":
        runs = runs.filter(review__resolved_at__isnull=True)
    elif state == "resolved":
        runs = runs.filter(review__resolved_at__isnull=False)
    if kind is not None:
        runs = runs.filter(Exists(RunLabel.objects.filter(run_id=OuterRef("pk"), kind_id=kind)))
    if assignee:
        runs = runs.filter(review__assignee__username=assignee)
    return runs


def review_queue(**arguments: Any) -> QuerySet[Run]:
    """The review queue a user sees, newest first: the runs of their projects that failed, gave
    a wrong answer (score below ``threshold``), were flagged or labelled, filtered like the runs
    list plus ``kind`` (a failure kind id), ``assignee`` (a username) and ``state`` (open, resolved,
    all). Each run comes with its review (assignee) and labels (two more queries a page)."""
    return _queue_runs(**arguments).prefetch_related(
        Prefetch("review", queryset=RunReview.objects.select_related("assignee")),
        Prefetch("labels", queryset=RunLabel.objects.select_related("kind")),
    )


MAX_INSIGHT_WORKERS = 20


def review_insights(
    *, user: Any, project: Project | int, threshold: float, since: datetime
) -> dict[str, Any]:
    """Counts over one project's runs that want review (any resolution state) created since
    ``since``: by failure kind, by worker (runs with a step of that worker; the
    ``MAX_INSIGHT_WORKERS`` most frequent), and by strategy per day."""
    runs = _queue_runs(
        user=user, project=project, threshold=threshold, state="all", created_after=since
    )
    run_ids = runs.order_by().values("pk")
    by_kind = list(
        RunLabel.objects.filter(run_id__in=run_ids)
        .values("kind_id", "kind__name", "kind__position")
        .annotate(runs=Count("run_id", distinct=True))
        .order_by("kind__position", "kind_id")
    )
    by_worker = list(
        Step.objects.filter(run_id__in=run_ids)
        .values("worker_name")
        .annotate(runs=Count("run_id", distinct=True))
        .order_by("-runs", "worker_name")[:MAX_INSIGHT_WORKERS]
    )
    by_day = list(
        runs.order_by()
        .annotate(day=TruncDate("created_at"))
        .values("day", "strategy")
        .annotate(runs=Count("id"))
        .order_by("day", "strategy")
    )
    return {
        "by_kind": [
            {"kind": row["kind_id"], "name": row["kind__name"], "runs": row["runs"]}
            for row in by_kind
        ],
        "by_worker": [{"worker": row["worker_name"], "runs": row["runs"]} for row in by_worker],
        "by_day": [
            {"day": row["day"].isoformat(), "strategy": row["strategy"], "runs": row["runs"]}
            for row in by_day
        ],
    }


# Readable runs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReferenceMatch:
    """A task whose question is the one asked: what to grade the answer against, and where the
    reference comes from (said on the run's page)."""

    reference: str
    grader: str
    source: str


def reference_for_question(*, question: str) -> ReferenceMatch | None:
    """The reference of the task whose question is exactly ``question`` (surrounding
    whitespace ignored), or None. The one place runs are matched against known tasks: the
    bundled suite today; a project's datasets plug in here."""
    from orchestrator.providers.simulator.suite import task_for_question

    task = task_for_question(question)
    if task is None:
        return None
    return ReferenceMatch(
        reference=task.reference, grader=task.grader, source=f"bundled suite, task {task.id}"
    )


# The events that change what the runs list shows of a run: its creation (queued), its status,
# its end (answer, verdict, totals).
LIST_EVENT_TYPES = (wire.RUN_STATUS, wire.RUN_FINISHED)
LIST_CHANGES_LIMIT = 500
LIST_CHANGES_LOOKBACK = 200


def run_events_cursor() -> int:
    """Where a runs list that is current now starts following changes from (the newest stored
    event's id; 0 when there is none)."""
    return RunEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def run_list_changes(
    *, user: Any, after: int, limit: int = LIST_CHANGES_LIMIT, **filters: Any
) -> wire.ListChanges:
    """What changed for a runs list since the event id ``after``: the runs created or whose
    status changed that the user may see, in two parts: those that match ``filters``
    (``run_list``'s keywords), newest first, and those that no longer do. ``cursor`` is where
    to ask from next. At most ``limit`` events are read per call (ask again from the cursor).
    """
    # The cursor is read first: every event up to it is looked at, none after it. Ids are taken
    # before their transactions commit, so one may become visible after a higher one: each call
    # looks ``LIST_CHANGES_LOOKBACK`` events behind its cursor again (a run reported twice is
    # drawn twice, the same).
    cursor = run_events_cursor()
    events = RunEvent.objects.filter(
        pk__gt=max(0, after - LIST_CHANGES_LOOKBACK), pk__lte=cursor, type__in=LIST_EVENT_TYPES
    )
    projects = user_project_ids(user)
    if projects is not None:
        events = events.filter(run__project_id__in=projects)
    rows = list(events.order_by("pk").values_list("pk", "run_id")[:limit])
    if len(rows) == limit:
        cursor = rows[-1][0]
    run_ids = {run_id for _, run_id in rows}
    matching = list(run_list(user=user, **filters).filter(pk__in=run_ids)) if run_ids else []
    return {
        "cursor": cursor,
        "changed": [run.pk for run in matching],
        "gone": sorted(run_ids - {run.pk for run in matching}),
        "runs": matching,
    }


# Batch replays -----------------------------------------------------------------------------------

COMPARE_PATH = "/compare/"
BATCH_ITEM_INPUT_CHARS = 160
_BATCH_RUN_FIELDS = ("id", "status", "score", "tokens_in", "tokens_out", "cost", "wall_time")


def _visible_batches(user: Any) -> QuerySet[Batch]:
    if not getattr(user, "is_authenticated", False):
        return Batch.objects.none()
    project_ids = user_project_ids(user)
    batches = (
        Batch.objects.all()
        if project_ids is None
        else Batch.objects.filter(project_id__in=project_ids)
    )
    return batches.select_related("created_by").annotate(
        finished_count=Count("items", filter=Q(items__replay__status__in=Run.FINISHED))
    )


def batch_get(*, user: Any, batch_id: int) -> Batch | None:
    """A batch of one of the user's projects (any member may look at it), or None."""
    return _visible_batches(user).filter(pk=batch_id).first()


def batch_list(*, user: Any, project: Project | int | None = None) -> QuerySet[Batch]:
    """The batches of the user's projects (of ``project`` alone when given), newest first,
    each with its count of finished replays (``finished_count``)."""
    batches = _visible_batches(user)
    if project is not None:
        batches = batches.filter(project_id=project if isinstance(project, int) else project.pk)
    return batches.order_by("-created_at", "-id")


def batch_entry(*, batch: Batch) -> wire.BatchEntry:
    """A batch as lists show it, with its progress (``batch`` from ``batch_get``/``batch_list``,
    which count its finished replays)."""
    finished = getattr(batch, "finished_count", None)
    if finished is None:
        finished = BatchItem.objects.filter(
            batch_id=batch.pk, replay__status__in=Run.FINISHED
        ).count()
    done = finished + batch.not_replayed
    if batch.status == Batch.Status.CREATING:
        status = "creating"
    else:
        status = "finished" if done >= batch.total else "running"
    return {
        "id": batch.pk,
        "project": batch.project_id,
        "created_by": batch.created_by.get_username() if batch.created_by_id else None,
        "created_at": wire.iso(batch.created_at),
        "filters": dict(batch.filters or {}),
        "override": dict(batch.override or {}),
        "status": status,
        "progress": {
            "total": batch.total,
            "replayed": batch.replayed,
            "not_replayed": batch.not_replayed,
            "finished": finished,
            "done": done,
            "fraction": round(done / batch.total, 4) if batch.total else 1.0,
        },
    }


def batch_summary(*, batch: Batch) -> wire.BatchSummary:
    """A batch with every item (source, replay or error, compare link) and the aggregate before
    and after over the pairs whose replay finished. Two queries however many items."""
    items = list(
        BatchItem.objects.filter(batch_id=batch.pk)
        .select_related("source", "replay")
        .only(
            "position",
            "error",
            "replay_id",
            *(f"source__{name}" for name in _BATCH_RUN_FIELDS),
            *(f"replay__{name}" for name in _BATCH_RUN_FIELDS),
        )
        .annotate(input_head=Substr("source__input", 1, BATCH_ITEM_INPUT_CHARS))
        .order_by("position")
    )
    rows: list[wire.BatchItemData] = []
    for item in items:
        source = wire.batch_run_data(item.source)
        replay = wire.batch_run_data(item.replay) if item.replay_id else None
        rows.append(
            {
                "position": item.position,
                "input": item.input_head,
                "source": source,
                "replay": replay,
                "error": item.error,
                "compare_url": f"{COMPARE_PATH}?runs={source['id']},{replay['id']}"
                if replay
                else None,
            }
        )
    entry = batch_entry(batch=batch)
    return {**entry, "aggregate": batch_aggregate(rows), "items": rows}


def batch_aggregate(items: Iterable[wire.BatchItemData]) -> wire.BatchAggregate:
    """Before and after over the items whose replay finished."""
    outcomes = [name for name in wire.BATCH_OUTCOMES if name != "pending"]
    aggregate: wire.BatchAggregate = {
        "compared": 0,
        "fixed": 0,
        "broken": 0,
        "still_right": 0,
        "still_wrong": 0,
        "unscored": 0,
        "before": dict.fromkeys(outcomes, 0),
        "after": dict.fromkeys(outcomes, 0),
        "tokens_before": 0,
        "tokens_after": 0,
        "cost_before": 0.0,
        "cost_after": 0.0,
        "wall_time_before": 0.0,
        "wall_time_after": 0.0,
    }
    for item in items:
        source, replay = item["source"], item["replay"]
        if replay is None or replay["outcome"] == "pending":
            continue
        before, after = source["outcome"], replay["outcome"]
        aggregate["compared"] += 1
        aggregate["before"][before] = aggregate["before"].get(before, 0) + 1
        aggregate["after"][after] = aggregate["after"][after] + 1
        if "unscored" in (before, after) or before == "pending":
            aggregate["unscored"] += 1
        elif after == "right":
            aggregate["still_right" if before == "right" else "fixed"] += 1
        else:
            aggregate["broken" if before == "right" else "still_wrong"] += 1
        aggregate["tokens_before"] += source["tokens"]
        aggregate["tokens_after"] += replay["tokens"]
        aggregate["cost_before"] += source["cost"]
        aggregate["cost_after"] += replay["cost"]
        aggregate["wall_time_before"] += source["wall_time"] or 0.0
        aggregate["wall_time_after"] += replay["wall_time"] or 0.0
    for key in ("cost_before", "cost_after", "wall_time_before", "wall_time_after"):
        aggregate[key] = round(aggregate[key], 6)  # type: ignore[literal-required]
    return aggregate
