"""The API's lookups, for every view: a row the user may see by its id in the path, or a 404;
a project named in a body or query, or a 400 naming the field; an admin's project or pool, or
a 403 for a member who only reads.

What a user may not see is a 404, never a 403 (docs/ARCHITECTURE.md, Access); the reads
themselves are selectors."""

from __future__ import annotations

from django.http import Http404
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request

from orchestrator import selectors
from orchestrator.models import (
    Batch,
    Comment,
    Dataset,
    Experiment,
    FailureKind,
    Membership,
    Pool,
    Project,
    Run,
    Step,
    Worker,
)


def visible_run_or_404(*, request: Request, run_id: int) -> Run:
    run = selectors.run_get(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    return run


def visible_run_detail_or_404(*, request: Request, run_id: int) -> Run:
    """The run with its plans and steps (``selectors.run_detail``)."""
    run = selectors.run_detail(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    return run


def step_or_404(*, request: Request, step_id: int) -> Step:
    step = selectors.step_get(user=request.user, step_id=step_id)
    if step is None:
        raise Http404("No such step.")
    return step


def run_or_400(*, request: Request, run_id: int, field: str = "run") -> Run:
    """A run named in the input (not the path): one the user cannot see is a 400 naming the
    field."""
    run = selectors.run_get(user=request.user, run_id=run_id)
    if run is None:
        raise ValidationError({field: ["No such run of yours."]})
    return run


def visible_dataset_or_404(*, request: Request, dataset_id: int) -> Dataset:
    dataset = selectors.dataset_get(user=request.user, dataset_id=dataset_id)
    if dataset is None:
        raise Http404("No such dataset.")
    return dataset


def visible_experiment_or_404(*, request: Request, experiment_id: int) -> Experiment:
    experiment = selectors.experiment_get(user=request.user, experiment_id=experiment_id)
    if experiment is None:
        raise Http404("No such experiment.")
    return experiment


def batch_or_404(*, request: Request, batch_id: int) -> Batch:
    batch = selectors.batch_get(user=request.user, batch_id=batch_id)
    if batch is None:
        raise Http404("No such batch.")
    return batch


def comment_or_404(*, request: Request, comment_id: int) -> Comment:
    comment = selectors.comment_get(user=request.user, comment_id=comment_id)
    if comment is None:
        raise Http404("No such comment.")
    return comment


def failure_kind_or_404(*, request: Request, kind_id: int) -> FailureKind:
    kind = selectors.failure_kind_get(user=request.user, kind_id=kind_id)
    if kind is None:
        raise Http404("No such failure kind.")
    return kind


def pool_or_404(request: Request, pool_id: int) -> Pool:
    pool = selectors.pool_get(user=request.user, pool_id=pool_id)
    if pool is None:
        raise Http404("No such pool.")
    return pool


def admin_pool_or_403(request: Request, pool_id: int) -> Pool:
    """The pool if the user is an admin of its project: 404 if they cannot see it, 403 if they
    only read it."""
    pool = pool_or_404(request, pool_id)
    if pool.role != Membership.Role.ADMIN:
        raise PermissionDenied("Only the project's admins may change its pools.")
    return pool


def worker_or_404(pool: Pool, worker_id: int) -> Worker:
    worker = next((w for w in pool.all_workers if w.pk == worker_id), None)
    if worker is None:
        raise Http404("No such worker in this pool.")
    return worker


def project_or_404(request: Request, project: str | int) -> Project:
    """A project of the user's named in the path, by id or slug, with ``role`` set."""
    found = selectors.project_for(user=request.user, project=project)
    if found is None:
        raise Http404("No such project.")
    return found


def admin_project_or_403(request: Request, project: str | int) -> Project:
    found = project_or_404(request, project)
    if found.role != Membership.Role.ADMIN:
        raise PermissionDenied("Only the project's admins may do this.")
    return found


def project_or_400(request: Request, project: str | int, *, field: str = "project") -> Project:
    """A project of the user's named in the input, by id or slug, with ``role`` set; any other
    is a 400 naming the field."""
    found = selectors.project_for(user=request.user, project=project)
    if found is None:
        raise ValidationError({field: ["No such project of yours."]})
    return found


def membership_or_404(project: Project, membership_id: int) -> Membership:
    membership = selectors.membership_get(project=project, membership_id=membership_id)
    if membership is None:
        raise Http404("No such member of this project.")
    return membership
