"""Review pages: the queue (``/review/``) and its insight (``/review/insights/``). Thin: validate
the query, call selectors, render; changes go through the API from the page's script."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from orchestrator import selectors
from orchestrator.models import Pool, Project
from orchestrator.services.review import failure_kinds_ensure
from webui.api.review import MAX_INSIGHT_DAYS, insights_since
from webui.views import PAGE_SIZE, RunFilterForm, cost_text, duration_text, first_line

STATE_CHOICES = [("open", "Open"), ("resolved", "Resolved"), ("all", "Open and resolved")]


class QueueFilterForm(RunFilterForm):
    """The runs list's filters and the queue's own: failure kind, assignee, state, threshold."""

    kind = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label="Label")
    assignee = forms.CharField(required=False, max_length=150, strip=True)
    state = forms.ChoiceField(required=False, choices=STATE_CHOICES)
    threshold = forms.FloatField(
        required=False, min_value=0.0, max_value=1.0, label="Wrong below score"
    )

    def __init__(self, data: Any, *, pools: list[Pool], strategies: tuple[str, ...], kinds):
        super().__init__(data, pools=pools, strategies=strategies)
        several = len({kind.project_id for kind in kinds}) > 1
        self.fields["kind"].choices = [
            ("", "Any label"),
            *(
                (kind.pk, f"{kind.project.name}: {kind.name}" if several else kind.name)
                for kind in kinds
            ),
        ]

    def queue_filters(self) -> dict[str, Any]:
        filters = self.selector_filters()
        data = self.cleaned_data
        for name in ("kind", "assignee"):
            if data.get(name) not in (None, ""):
                filters[name] = data[name]
        filters["state"] = data.get("state") or "open"
        threshold = data.get("threshold")
        filters["threshold"] = selectors.REVIEW_SCORE_THRESHOLD if threshold is None else threshold
        return filters


def _kinds_of(projects: list[Project]) -> list[Any]:
    kinds = []
    for project in projects:
        for kind in failure_kinds_ensure(project=project):
            kind.project = project
            kinds.append(kind)
    return kinds


def _user_projects(user: Any) -> list[Project]:
    return selectors.projects_with_role(user=user)


@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    """``/review/``: runs that want review, newest first, filtered like the runs list."""
    pools = list(selectors.pools_for(user=request.user))
    projects = _user_projects(request.user)
    kinds = _kinds_of(projects)
    form = QueueFilterForm(
        request.GET, pools=pools, strategies=selectors.run_choices().strategies, kinds=kinds
    )
    form.is_valid()  # Invalid fields are reported next to the filter and left out.
    page = form.page_number()
    offset = (page - 1) * PAGE_SIZE
    runs = list(
        selectors.review_queue(user=request.user, **form.queue_filters())[
            offset : offset + PAGE_SIZE + 1
        ]
    )
    has_next = len(runs) > PAGE_SIZE
    runs = runs[:PAGE_SIZE]
    for run in runs:
        run.input_line = first_line(run.input)
        run.answer_line = first_line(run.answer)
        run.error_line = "" if run.answer else first_line(run.error)
        run.duration_text = duration_text(run.wall_time)
        run.cost_text = cost_text(run.cost)
        review = getattr(run, "review", None)
        run.assignee_name = review.assignee.get_username() if review and review.assignee else ""
        run.human_score = review.human_score if review else None
        run.flagged = bool(review and review.flagged)
        run.resolved = bool(review and review.resolved_at)
        run.label_ids = [label.kind_id for label in run.labels.all()]
        run.label_names = [label.kind.name for label in run.labels.all()]
    roles = selectors.user_roles(user=request.user)
    review_roles = {str(role) for role in selectors.ROLES_THAT_RUN}
    page_data = {
        "user": request.user.get_username(),
        # The label keys (1-9) toggle the project's first failure kinds on the selected run.
        "kinds": {
            str(project.pk): [
                {"id": kind.pk, "name": kind.name}
                for kind in kinds
                if kind.project_id == project.pk
            ][:9]
            for project in projects
        },
        "can_review": [pk for pk, role in roles.items() if role in review_roles],
    }
    single = projects[0] if len(projects) == 1 else None
    # Admins configure their projects' failure kinds here.
    kind_admin = [
        (project, [kind for kind in kinds if kind.project_id == project.pk])
        for project in projects
        if roles.get(project.pk) == "admin"
    ]
    context = {
        "runs": runs,
        "filter_form": form,
        "several_projects": len(projects) > 1,
        "state": form.cleaned_data.get("state") or "open",
        "assignee_filter": form.cleaned_data.get("assignee") or "",
        "page": page,
        "previous_page": page - 1 if page > 1 else None,
        "next_page": page + 1 if has_next else None,
        "worker_names": sorted({w.name for p in pools for w in p.enabled_workers}),
        "assignees": sorted(
            {name for p in projects for name in selectors.review_assignees(project=p)}
        ),
        "key_kinds": page_data["kinds"][str(single.pk)] if single else [],
        "page_data": page_data,
        "kind_admin": kind_admin,
    }
    return render(request, "review/queue.html", context)


class InsightsForm(forms.Form):
    project = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    days = forms.IntegerField(required=False, min_value=1, max_value=MAX_INSIGHT_DAYS)


@login_required
def review_insights(request: HttpRequest) -> HttpResponse:
    """``/review/insights/``: counts of the runs that want review in one project, by label, by
    worker and by strategy per day, drawn as charts whose bars open the runs behind them."""
    projects = _user_projects(request.user)
    form = InsightsForm(request.GET)
    form.fields["project"].choices = [(p.pk, p.name) for p in projects]
    form.is_valid()
    project = next(
        (p for p in projects if p.pk == form.cleaned_data.get("project")),
        projects[0] if projects else None,
    )
    days = form.cleaned_data.get("days") or 30
    since = insights_since(days)
    counts: dict[str, Any] = {"by_kind": [], "by_worker": [], "by_day": []}
    if project is not None:
        failure_kinds_ensure(project=project)
        counts = selectors.review_insights(
            user=request.user,
            project=project,
            threshold=selectors.REVIEW_SCORE_THRESHOLD,
            since=since,
        )
    _link_counts(counts, project=project, since=since.date().isoformat())
    context = {
        "form": form,
        "projects": projects,
        "project": project,
        "days": days,
        "since": since,
        "insights": counts,
    }
    return render(request, "review/insights.html", context)


def _link_counts(counts: dict[str, Any], *, project: Project | None, since: str) -> None:
    """Give each count the address of the runs behind it: the queue, filtered (every state)."""
    queue = reverse("review-queue")

    def link(**filters: Any) -> str:
        base = {"project": project.pk if project else "", "state": "all", "created_after": since}
        return f"{queue}?{urlencode({**base, **filters})}"

    for row in counts["by_kind"]:
        row["url"] = link(kind=row["kind"])
    for row in counts["by_worker"]:
        row["url"] = link(worker=row["worker"])
    for row in counts["by_day"]:
        row["url"] = link(
            strategy=row["strategy"], created_after=row["day"], created_before=row["day"]
        )
