"""Pages: the runs list and the run page. Thin: validate the query, call selectors, render."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from orchestrator import comparing, selectors, verdicts, wire
from orchestrator.models import Pool, Run
from orchestrator.services.review import failure_kinds_ensure
from webui.api.compare import CompareQuerySerializer, runs_to_compare
from webui.api.pagination import MAX_PAGE
from webui.projects import chosen_project_id

PAGE_SIZE = 50
LINE_LIMIT = 160


class DayOrMomentField(forms.Field):
    """A whole day (``2026-12-07``) or a moment (ISO 8601 with a time, as the analytics page's
    points link to an hour's runs); a moment without a zone is UTC."""

    def to_python(self, value: Any) -> dt.date | dt.datetime | None:
        text = (value or "").strip()
        if not text:
            return None
        try:
            if len(text) == 10:
                return dt.date.fromisoformat(text)
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise forms.ValidationError("Give a date (YYYY-MM-DD) or a date and time.") from None
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


class RunFilterForm(forms.Form):
    """The runs list's filters, as they arrive in the query string. Every field is optional."""

    project = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Run.Status.choices])
    pool = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    strategy = forms.ChoiceField(required=False)
    worker = forms.CharField(required=False, max_length=100, strip=True)
    created_after = DayOrMomentField(required=False, label="From")
    created_before = DayOrMomentField(required=False, label="To")
    score_min = forms.FloatField(required=False, label="Score ≥")
    score_max = forms.FloatField(required=False, label="Score ≤")
    q = forms.CharField(required=False, max_length=200, strip=True, label="Text")
    verdict = forms.ChoiceField(
        required=False, choices=[("", "Any result"), *((v, v) for v in verdicts.VERDICTS)]
    )
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
        names = (
            "project", "status", "pool", "strategy", "worker", "q", "score_min", "score_max",
            "verdict",
        )  # fmt: skip
        for name in names:
            value = data.get(name)
            if value not in (None, ""):
                filters[name] = value
        # Dates are whole days in the site's time zone: "To" includes the day it names.
        after, before = data.get("created_after"), data.get("created_before")
        # A moment bounds the list as it is; a day is the whole day.
        if isinstance(after, dt.datetime):
            filters["created_after"] = after
        elif after:
            filters["created_after"] = _start_of_day(after)
        # The last day a date can name (9999-12-31) has no day after it: no upper bound then.
        if isinstance(before, dt.datetime):
            filters["created_before"] = before
        elif before and before < dt.date.max:
            filters["created_before"] = _start_of_day(before + dt.timedelta(days=1))
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


FULL_RESPONSE_CHARS = 4000


def decorate_list_row(run: Run, pools: dict[int, Pool]) -> None:
    """What a row of the runs list shows of a run, ready for the template; ``pools`` by id,
    with their enabled workers (``selectors.pools_for``)."""
    run.input_line = first_line(run.input)
    run.answer_text = wire.answer_shown(run.answer, run.grader)
    run.full_response = run.answer[:FULL_RESPONSE_CHARS]
    run.response_cut = len(run.answer) > FULL_RESPONSE_CHARS
    run.error_line = "" if run.answer else first_line(run.error)
    run.verdict = verdicts.verdict(run.status, run.score)
    run.duration_text = duration_text(run.wall_time)
    run.cost_text = cost_text(run.cost)
    run.tokens_total = run.tokens_in + run.tokens_out
    run.simulated_text = simulated_text(pools.get(run.pool_id, run.pool))


def simulated_text(pool: Pool) -> str:
    """Which parts of a pool are simulated ("" when none is): its conductor, its workers."""
    workers = selectors.pool_enabled_workers(pool=pool)
    simulated = sum(1 for worker in workers if worker.is_simulated)
    parts = []
    if pool.is_simulated:
        parts.append("conductor")
    if simulated and simulated == len(workers):
        parts.append("all workers" if len(workers) > 1 else "its worker")
    elif simulated:
        parts.append(f"{simulated} of {len(workers)} workers")
    if not parts:
        return ""
    if pool.is_simulated and simulated == len(workers):
        return "Simulated pool"
    return "Simulated: " + " and ".join(parts)


@login_required
def runs_list(request: HttpRequest) -> HttpResponse:
    """``/``: the user's runs, newest first, filtered and paginated, plus the new-run form."""
    pools = list(selectors.pools_for(user=request.user))
    form = RunFilterForm(request.GET, pools=pools, strategies=selectors.run_choices().strategies)
    form.is_valid()  # Invalid fields are reported next to the filter and left out.
    page = form.page_number()
    offset = (page - 1) * PAGE_SIZE

    filters = form.selector_filters()
    if "project" not in request.GET and chosen_project_id(request) is not None:
        # A user who switched project sees its runs; the filter can still ask for any project.
        filters["project"] = chosen_project_id(request)
    runs_query = selectors.run_list(user=request.user, **filters)
    project_ids = {p.project_id for p in pools}
    # One query for the page: fetch one extra row to know whether a next page exists,
    # instead of counting every matching run.
    runs = list(runs_query[offset : offset + PAGE_SIZE + 1])
    has_next = len(runs) > PAGE_SIZE
    runs = runs[:PAGE_SIZE]
    pools_by_id = {pool.pk: pool for pool in pools}
    for run in runs:
        decorate_list_row(run, pools_by_id)

    worker_names = sorted({w.name for p in pools for w in p.enabled_workers})
    roles = selectors.user_roles(user=request.user)
    runnable_pools = [p for p in pools if roles.get(p.project_id) in selectors.ROLES_THAT_RUN]
    for pool in runnable_pools:
        pool.simulated_text = simulated_text(pool)
    default_pool = _default_pool(runnable_pools)
    context = {
        "runs": runs,
        "filter_form": form,
        "several_projects": len(project_ids) > 1,
        "status_filter": form.cleaned_data.get("status", ""),
        "verdict_filter": form.cleaned_data.get("verdict", ""),
        "graders": selectors.run_choices().graders,
        "page": page,
        "previous_page": page - 1 if page > 1 else None,
        "next_page": page + 1 if has_next else None,
        "pools": runnable_pools,
        "default_pool_id": default_pool.pk if default_pool else None,
        "strategies": selectors.run_choices().strategies,
        "worker_names": worker_names,
        "compare_max_runs": comparing.MAX_RUNS,
        "list_state": {
            "cursor": selectors.run_events_cursor(),
            "first_page": page == 1,
            "changes_url": reverse("runs-changes"),
        },
        # Batch replay (webui/batches.py) is for admins of a project.
        "can_batch": "admin" in roles.values(),
        # The export takes the API's filters: the same runs as the list shows, whole days and
        # the chosen project included.
        "export_query": urlencode(
            {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in filters.items()}
        ),
    }
    return render(request, "runs/list.html", context)


@login_required
def runs_list_changes(request: HttpRequest) -> HttpResponse:
    """``/runs/changes/?after=<event id>&<the list's filters>``: what the open runs list must
    redraw (``selectors.run_list_changes``), with the rows as the list draws them."""
    try:
        after = int(request.GET.get("after", ""))
    except ValueError:
        return JsonResponse(
            {"after": ["Give the event id to follow from (an integer)."]}, status=400
        )
    if not 0 <= after <= 2**63 - 1:
        return JsonResponse({"after": ["Out of range."]}, status=400)
    pools = list(selectors.pools_for(user=request.user))
    form = RunFilterForm(request.GET, pools=pools, strategies=selectors.run_choices().strategies)
    form.is_valid()
    changes = selectors.run_list_changes(user=request.user, after=after, **form.selector_filters())
    runs = changes["runs"]
    pools_by_id = {pool.pk: pool for pool in pools}
    for run in runs:
        decorate_list_row(run, pools_by_id)
    return JsonResponse(
        {
            "cursor": changes["cursor"],
            "changed": changes["changed"],
            "gone": changes["gone"],
            "rows": render_to_string("runs/_rows.html", {"runs": runs}, request=request),
        }
    )


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """``/runs/<id>/``: one run, drawn from the state embedded in the page (its snapshot, seq and
    laid-out graph) and kept live over its websocket with the events after that seq."""
    run = selectors.run_get(user=request.user, run_id=run_id)
    if run is None:
        raise Http404(f"No run {run_id} in your projects.")
    match = selectors.reference_for_question(question=run.input) if run.reference else None
    context = {
        "run": run,
        "reference_source": match.source if match and match.reference == run.reference else "",
        "page_state": selectors.run_page_state(run=run),
        "ws_path": f"/ws/runs/{run.pk}/",
        "statuses": wire.page_constants(),
        # Who may start runs may cancel them: the API's rule (RunCancelApi).
        "can_cancel": selectors.user_can_run(user=request.user, project=run.project_id),
        "pools": _runnable_pools(request.user),
        "strategies": selectors.run_choices().strategies,
        "replay_context": selectors.run_replay_context(run=run, user=request.user),
        "review_state": _review_state(run, request.user),
    }
    return render(request, "runs/detail.html", context)


@login_required
def run_family(request: HttpRequest, run_id: int) -> HttpResponse:
    """``/runs/<id>/family/``: the run's source, its replays and theirs, with their edits,
    status, score, tokens and cost (``GET /api/runs/{id}/family/`` gives the same)."""
    run = selectors.run_get(user=request.user, run_id=run_id)
    if run is None:
        raise Http404(f"No run {run_id} in your projects.")
    family = selectors.run_family(run=run)
    runs = [
        {
            **member,
            "tokens": member["totals"]["tokens_in"] + member["totals"]["tokens_out"],
            "cost_text": cost_text(member["totals"]["cost"]),
            "wall_time_text": duration_text(member["totals"]["wall_time"]),
        }
        for member in family["runs"]
    ]
    return render(
        request, "runs/family.html", {"run": run, "root": family["root"], "members": runs}
    )


@login_required
def runs_compare(request: HttpRequest) -> HttpResponse:
    """``/compare/?runs=A,B[,C...]``: the runs' graphs side by side, their steps aligned and
    marked against the first run with word diffs, and their outcomes in one table. The same
    query and rules as ``GET /api/compare/`` (a run the user cannot see: 404); the runs list's
    Compare form sends ``runs`` once per selected run, which counts as the same list."""
    query = CompareQuerySerializer(data={"runs": ",".join(request.GET.getlist("runs"))})
    try:
        query.is_valid(raise_exception=True)
        runs = runs_to_compare(user=request.user, query=query.validated_data)
    except ValidationError as error:
        detail = error.detail if isinstance(error.detail, dict) else {"runs": error.detail}
        context = {"problems": [str(problem) for problem in detail.get("runs", [])]}
        return render(request, "runs/compare.html", context, status=400)
    context = {
        "runs": runs,
        "compare_state": selectors.compare_page_state(runs=runs),
        "statuses": wire.page_constants(),
        "change_kinds": wire.CHANGE_KINDS,
    }
    return render(request, "runs/compare.html", context)


def _review_state(run: Run, user) -> wire.ReviewPageState:
    failure_kinds_ensure(project=run.project_id)
    return selectors.run_review_state(run=run, user=user)
