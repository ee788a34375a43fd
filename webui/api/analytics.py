"""``GET /api/analytics/``: usage over time (tokens, cost, calls, latency p50/p95, error rate)
for one project, per worker, pool or strategy, per hour or day; every point links to the runs
behind it on the runs list."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import analytics
from webui.api.inputs import ProjectField
from webui.api.lookups import project_or_400

# The window shown when none is asked for: two weeks of days, two days of hours.
DEFAULT_SPAN = {"day": dt.timedelta(days=14), "hour": dt.timedelta(hours=48)}


class AnalyticsQuerySerializer(serializers.Serializer):
    project = ProjectField(help_text="One of your projects, by id or slug.")
    group = serializers.ChoiceField(choices=analytics.GROUPS, default="pool")
    interval = serializers.ChoiceField(choices=analytics.INTERVALS, default="day")
    since = serializers.DateTimeField(
        required=False, help_text="Start of the window (default: two weeks, or 48 hours, back)."
    )
    until = serializers.DateTimeField(required=False, help_text="End of the window (default: now).")

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        interval = data["interval"]
        until = (
            data.get("until")
            or analytics.bucket_start(timezone.now(), interval) + analytics.STEP[interval]
        )
        since = data.get("since") or until - DEFAULT_SPAN[interval]
        problem = analytics.window_problem(interval=interval, since=since, until=until)
        if problem:
            raise serializers.ValidationError({"since": [problem]})
        return {**data, "since": since, "until": until}


class PointSerializer(serializers.Serializer):
    bucket = serializers.CharField()
    runs = serializers.IntegerField()
    calls = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost = serializers.FloatField()
    latency_p50 = serializers.FloatField(allow_null=True)
    latency_p95 = serializers.FloatField(allow_null=True)
    error_rate = serializers.FloatField(allow_null=True)
    errors = serializers.IntegerField()
    finished = serializers.IntegerField()
    runs_url = serializers.CharField(allow_null=True, help_text="The runs behind the point.")


class SeriesSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    points = PointSerializer(many=True)


class UsageOutputSerializer(serializers.Serializer):
    project = serializers.IntegerField()
    group = serializers.CharField()
    interval = serializers.CharField()
    since = serializers.CharField()
    until = serializers.CharField()
    buckets = serializers.ListField(child=serializers.CharField())
    series = SeriesSerializer(many=True)
    totals = serializers.DictField()


def usage_with_links(*, request: Request | Any, query: dict[str, Any]) -> dict[str, Any]:
    """The usage the validated ``query`` asks for, each point with ``runs_url``: the runs list
    filtered to the point's group and bucket (none for the summed "other" series)."""
    project = project_or_400(request, query["project"])
    usage = analytics.usage_over_time(
        user=request.user,
        project=project,
        group=query["group"],
        interval=query["interval"],
        since=query["since"],
        until=query["until"],
    )
    step = analytics.STEP[query["interval"]]
    runs_page = reverse("runs")
    filter_name = {"worker": "worker", "pool": "pool", "strategy": "strategy"}[query["group"]]
    for series in usage["series"]:
        for point in series["points"]:
            if series["key"] == "other" or not point["runs"]:
                point["runs_url"] = None  # type: ignore[typeddict-unknown-key]
                continue
            start = dt.datetime.fromisoformat(point["bucket"].replace("Z", "+00:00"))
            end = start + step - dt.timedelta(microseconds=1)
            filters = {
                "project": project.pk,
                filter_name: series["key"],
                "created_after": start.isoformat(),
                "created_before": end.isoformat(),
            }
            point["runs_url"] = f"{runs_page}?{urlencode(filters)}"  # type: ignore[typeddict-unknown-key]
    return dict(usage)


class AnalyticsApi(APIView):
    """Usage of one project's runs over time: per ``group`` (worker, pool, strategy) and
    ``interval`` (hour, day), each point's runs, model calls, tokens in and out, cost, latency
    p50 and p95 (seconds: a run's wall time, or for workers a step's call) and error rate (failed
    over finished), with a link to the runs behind it. The groups with the most calls are drawn
    as series of their own, the rest summed as "other"."""

    @extend_schema(
        operation_id="analytics_usage",
        parameters=[AnalyticsQuerySerializer],
        responses=UsageOutputSerializer,
    )
    def get(self, request: Request) -> Response:
        query = AnalyticsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        usage = usage_with_links(request=request, query=query.validated_data)
        return Response(UsageOutputSerializer(usage).data)
