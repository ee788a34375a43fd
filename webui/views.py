"""Pages: the runs list and the run page. Thin: validate the query, call selectors, render."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from orchestrator import selectors, wire
from orchestrator.models import Pool, Run
from webui.api.pagination import MAX_PAGE

PAGE_SIZE = 50
LINE_LIMIT = 160


class RunFilterForm(forms.Form):
    """The runs list's filters, as they arrive in the query string. Every field is optional."""

    project = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Run.Status.choices])
    pool = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    strategy = forms.ChoiceField(required=False)
    worker = forms.CharField(required=False, max_length=100, strip=True)
    created_after = forms.DateField(required=False, label="From")
    created_before = forms.DateField(required=False, label="To")
    score_min = forms.FloatField(required=False, label="Score ≥")
    score_max = forms.FloatField(required=False, label="Score ≤")
    q = forms.CharField(required=False, max_length=200, strip=True, label="Text")
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)

    def __init__(self, data: Any, *, pools: list[Pool], strategies: tuple[str, ...]):
        super().__init__(data)
        projects = {p.project_id: p.project.name for p in pools}
        self.fields["project"].choices = [("", "Any project"), *sorted(projects.items())]
        self.fields["pool"].choices = [("", "Any pool"), *((p.pk, p.name) for p in pools)]
        self.fields["strategy"].choices = [("", "Any strategy"), *((s, s) for s in strategies)]

    def selector_filters(self) -> dict[str, Any]:
        """The valid filters as ``selectors.run_list`` keywords; invalid ones are left out."""
        data = self.cleaned_data
        filters: dict[str, Any] = {}
        names = ("project", "status", "pool", "strategy", "worker", "q", "score_min", "score_max")
        for name in names:
            value = data.get(name)
            if value not in (None, ""):
                filters[name] = value
        # Dates are whole days in the site's time zone: "To" includes the day it names.
        if data.get("created_after"):
            filters["created_after"] = _start_of_day(data["created_after"])
        # The last day a date can name (9999-12-31) has no day after it: no upper bound then.
        if data.get("created_before") and data["created_before"] < dt.date.max:
            filters["created_before"] = _start_of_day(data["created_before"] + dt.timedelta(days=1))
        return filters

    def page_number(self) -> int:
        return self.cleaned_data.get("page") or 1


def _start_of_day(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def first_line(text: str, limit: int = LINE_LIMIT) -> str:
    """The first non-empty line of a text, cut to ``limit`` characters."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def cost_text(dollars: float) -> str:
    if dollars >= 0.01:
        return f"${dollars:,.2f}"
    if dollars >= 0.0001:
        return f"${dollars:.4f}"
    return "<$0.0001" if dollars > 0 else "$0"


def _runnable_pools(user) -> list[Pool]:
    return list(selectors.pools_runnable_by(user=user))


def _default_pool(pools: list[Pool]) -> Pool | None:
    # The embedded demo's simulated pool works with no keys, so it is the safe default.
    return next((p for p in pools if p.is_simulated), pools[0] if pools else None)


@login_required
def runs_list(request: HttpRequest) -> HttpResponse:
    """``/``: the user's runs, newest first, filtered and paginated, plus the new-run form."""
    pools = list(selectors.pools_for(user=request.user))
    form = RunFilterForm(request.GET, pools=pools, strategies=selectors.run_choices().strategies)
    form.is_valid()  # Invalid fields are reported next to the filter and left out.
    page = form.page_number()
    offset = (page - 1) * PAGE_SIZE

    runs_query = selectors.run_list(user=request.user, **form.selector_filters())
    project_ids = {p.project_id for p in pools}
    # One query for the page: fetch one extra row to know whether a next page exists,
    # instead of counting every matching run.
    runs = list(runs_query[offset : offset + PAGE_SIZE + 1])
    has_next = len(runs) > PAGE_SIZE
    runs = runs[:PAGE_SIZE]
    for run in runs:
        run.input_line = first_line(run.input)
        run.answer_line = first_line(run.answer)
        run.error_line = "" if run.answer else first_line(run.error)
        run.duration_text = duration_text(run.wall_time)
        run.cost_text = cost_text(run.cost)
        run.tokens_total = run.tokens_in + run.tokens_out

    worker_names = sorted({w.name for p in pools for w in p.enabled_workers})
    runnable_pools = pools if request.user.is_superuser else _runnable_pools(request.user)
    default_pool = _default_pool(runnable_pools)
    context = {
        "runs": runs,
        "filter_form": form,
        "several_projects": len(project_ids) > 1,
        "status_filter": form.cleaned_data.get("status", ""),
        "page": page,
        "previous_page": page - 1 if page > 1 else None,
        "next_page": page + 1 if has_next else None,
        "pools": runnable_pools,
        "default_pool_id": default_pool.pk if default_pool else None,
        "strategies": selectors.run_choices().strategies,
        "worker_names": worker_names,
        # Batch replay (webui/batches.py) is for admins of a project.
        "can_batch": "admin" in selectors.user_roles(user=request.user).values(),
    }
    return render(request, "runs/list.html", context)


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """``/runs/<id>/``: one run, drawn from the state embedded in the page (its snapshot, seq and
    laid-out graph) and kept live over its websocket with the events after that seq."""
    run = selectors.run_get(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    context = {
        "run": run,
        "page_state": selectors.run_page_state(run=run),
        "ws_path": f"/ws/runs/{run.pk}/",
        "statuses": wire.page_constants(),
        # Who may start runs may cancel them: the API's rule (RunCancelApi).
        "can_cancel": selectors.user_can_run(user=request.user, project=run.project_id),
        "pools": _runnable_pools(request.user),
        "strategies": selectors.run_choices().strategies,
    }
    return render(request, "runs/detail.html", context)
