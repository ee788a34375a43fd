"""Batch replay pages: the override form (opened from the runs list with its filters) and the
batch page (progress, aggregate before and after, every item linked to its compare view)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from orchestrator import selectors
from orchestrator.models import Membership
from orchestrator.services.batches import MATCH_KINDS, MAX_BATCH_RUNS, MAX_PATTERN_CHARS
from webui.views import RunFilterForm

BATCH_POLL_MS = 1000


@login_required
def batch_new(request: HttpRequest) -> HttpResponse:
    """``/batches/new/?<runs list filters>``: how many runs the filters match and the override
    form; submitting it posts to ``/api/batches/`` and opens the batch page."""
    roles = selectors.user_roles(user=request.user)
    admin_of = [pk for pk, role in roles.items() if role == Membership.Role.ADMIN]
    pools = list(selectors.pools_for(user=request.user))
    form = RunFilterForm(request.GET, pools=pools, strategies=selectors.run_choices().strategies)
    form.is_valid()
    filters = form.selector_filters()
    project_id = filters.pop("project", None)
    projects = sorted(
        {p.project_id: p.project for p in pools if p.project_id in admin_of}.values(),
        key=lambda project: project.name,
    )
    if project_id is not None:
        projects = [project for project in projects if project.pk == project_id]
    matching = selectors.run_list(
        user=request.user, project=projects[0] if len(projects) == 1 else None, **filters
    )
    matched = matching[: MAX_BATCH_RUNS + 1].count() if projects else 0
    workers = selectors.enabled_worker_names(projects=projects)
    context = {
        "projects": projects,
        "matched": matched,
        "too_many": matched > MAX_BATCH_RUNS,
        "max_runs": MAX_BATCH_RUNS,
        "max_pattern": MAX_PATTERN_CHARS,
        "match_kinds": MATCH_KINDS,
        "worker_names": workers,
        "filter_form": form,
        "filters_shown": [
            (form.fields[name].label or name.replace("_", " ").capitalize(), _shown(value))
            for name, value in filters.items()
        ],
        "batch_filters": {name: _json_value(value) for name, value in filters.items()},
        "runs_query": request.GET.urlencode(),
    }
    return render(request, "batches/new.html", context, status=200 if projects else 403)


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


def _shown(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if isinstance(value, dt.datetime) else str(value)


BATCH_LIST_LIMIT = 100


@login_required
def batch_list(request: HttpRequest) -> HttpResponse:
    """``/batches/``: the newest batches of the user's projects with their progress."""
    batches = list(selectors.batch_list(user=request.user)[:BATCH_LIST_LIMIT])
    entries = [selectors.batch_entry(batch=batch) for batch in batches]
    return render(request, "batches/list.html", {"entries": entries, "limit": BATCH_LIST_LIMIT})


@login_required
def batch_detail(request: HttpRequest, batch_id: int) -> HttpResponse:
    """``/batches/<id>/``: drawn from the state embedded in the page, then kept current by
    polling ``GET /api/batches/<id>/`` until every replay has finished."""
    batch = selectors.batch_get(user=request.user, batch_id=batch_id)
    if batch is None:
        raise Http404(f"No batch {batch_id} in your projects.")
    context = {
        "batch": batch,
        "batch_state": selectors.batch_summary(batch=batch),
        "batch_config": {"api": f"/api/batches/{batch.pk}/", "poll_ms": BATCH_POLL_MS},
    }
    return render(request, "batches/detail.html", context)
