"""Reads: runs, steps and pools as a user may see them.

Every selector that takes a user restricts to the projects the user is a member of (superusers
see everything). List selectors return lazy querysets ordered newest first, with what list pages
show already joined, so a page costs a constant number of queries however many runs exist.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet, Sum

from orchestrator import wire
from orchestrator.engine import strategies
from orchestrator.engine.grading import GRADER_KINDS
from orchestrator.models import (
    ApiKey,
    AuditEntry,
    Membership,
    Plan,
    Pool,
    Project,
    Run,
    RunEvent,
    Step,
    Worker,
)

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
) -> QuerySet[Run]:
    """The runs a user may see, newest first, filtered.

    ``worker`` is a worker name used by any step of the run. ``q`` is free text over the input and
    the final answer (case-insensitive substring). Dates bound ``created_at`` (inclusive).
    ``project`` narrows to one of the user's projects. The pool and the creator come joined;
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
        runs = runs.filter(Exists(Step.objects.filter(run_id=OuterRef("pk"), worker_name=worker)))
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
    """A run with its plans and steps prefetched (two more queries), or None."""
    return (
        _visible_runs(user)
        .select_related("pool", "created_by", "project")
        .prefetch_related(
            Prefetch("plans", queryset=Plan.objects.order_by("round")),
            Prefetch("steps", queryset=Step.objects.order_by("round", "index")),
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


def pools_runnable_by(*, user: Any) -> QuerySet[Pool]:
    """The pools a user may start runs on (admin or reviewer of their project)."""
    if getattr(user, "is_superuser", False):
        return pools_for(user=user)
    return pools_for(user=user).filter(
        project_id__in=Membership.objects.filter(user_id=user.pk, role__in=ROLES_THAT_RUN).values(
            "project_id"
        )
    )


def run_graph(*, run: Run, round: int | None = None) -> wire.Graph:
    """The graph of a run (nodes, edges, groups with positions) as ``orchestrator.graph`` builds
    it; ``round`` asks for one round expanded."""
    from orchestrator.graph import build_graph

    plans = [
        wire.plan_data(plan)
        for plan in Plan.objects.filter(run_id=run.pk).defer("messages").order_by("round")
    ]
    # Only what the graph draws, as tuples: building 5,000 model instances (or full step_data
    # dicts) cost more than the layout itself.
    keys = tuple(wire.GraphStep.__annotations__)
    steps: list[Any] = [
        dict(zip(keys, row, strict=True))
        for row in Step.objects.filter(run_id=run.pk)
        .order_by("round", "index")
        .values_list(*wire.GRAPH_STEP_COLUMNS)
    ]
    return build_graph(plans=plans, steps=steps, round=round)


def run_snapshot(*, run: Run) -> wire.RunState:
    """Everything a page needs to draw a run as it is now (one query per table)."""
    return {
        "run": wire.run_data(run),
        "plans": [wire.plan_data(plan) for plan in run.plans.all()],
        # step_data leaves out messages and responses: do not load them (large runs).
        "steps": wire.step_rows_data(
            Step.objects.filter(run_id=run.pk)
            .order_by("round", "index")
            .values_list(*wire.STEP_DATA_COLUMNS)
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


def run_page_state(*, run: Run) -> wire.PageState:
    """What the run page draws, read once: the run's snapshot, the seq it is current to (the
    page's socket then asks for the events after it), and its graph laid out from that same
    snapshot, with the layout's measures so the page can lay out a round again as it grows.

    ``run`` must be freshly read: its ``last_seq`` is read no later than the steps and plans, so
    an event that lands meanwhile is at worst applied twice (each event carries whole objects),
    never missed.
    """
    from orchestrator.graph import build_graph, geometry

    state = run_snapshot(run=run)
    return {
        "seq": run.last_seq,
        "state": state,
        "graph": build_graph(plans=state["plans"], steps=state["steps"]),
        "geometry": geometry(),
    }


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


def project_for(*, user: Any, slug: str) -> Project | None:
    """The project with ``slug`` if the user is a member (or a superuser), with ``role`` set."""
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        return None
    project.role = user_role(user=user, project=project)
    return project if project.role is not None else None


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
