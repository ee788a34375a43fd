"""The analytics page (``/analytics/``): usage over time as charts whose points open the runs
behind them. Thin: the query is the API's (``webui/api/analytics.py``), and so is the data the
page draws."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.exceptions import ValidationError

from orchestrator import analytics, selectors
from webui.api.analytics import AnalyticsQuerySerializer, usage_with_links
from webui.projects import chosen_project_id


@login_required
def analytics_page(request: HttpRequest) -> HttpResponse:
    """``/analytics/?project=&group=&interval=&from=&to=``: one project's usage (the chosen
    project by default); ``from`` and ``to`` are whole days, both included."""
    projects = list(selectors.user_projects(user=request.user))
    wanted: dict[str, Any] = {
        "project": request.GET.get("project") or chosen_project_id(request)
        or (projects[0].pk if projects else None),
        "group": request.GET.get("group") or "pool",
        "interval": request.GET.get("interval") or "day",
    }  # fmt: skip
    errors: dict[str, Any] = {}
    for name, bound in (("from", "since"), ("to", "until")):
        day = request.GET.get(name) or ""
        if not day:
            continue
        try:
            moment = dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), tzinfo=dt.UTC)
        except ValueError:
            errors[name] = ["Give a date as YYYY-MM-DD."]
            continue
        wanted[bound] = moment + (dt.timedelta(days=1) if bound == "until" else dt.timedelta())
    usage = None
    if wanted["project"] is not None and not errors:
        query = AnalyticsQuerySerializer(data=wanted)
        if query.is_valid():
            try:
                usage = usage_with_links(request=request, query=query.validated_data)
            except ValidationError as error:
                errors = dict(error.detail)  # type: ignore[arg-type]
        else:
            errors = dict(query.errors)
    context = {
        "projects": projects,
        "project_id": int(usage["project"]) if usage else None,
        "groups": analytics.GROUPS,
        "intervals": analytics.INTERVALS,
        "group": wanted["group"],
        "interval": wanted["interval"],
        "day_from": request.GET.get("from", ""),
        "day_to": request.GET.get("to", ""),
        "usage": usage,
        "errors": errors,
    }
    return render(request, "analytics.html", context)
