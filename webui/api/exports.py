"""Exports of the runs a filter selects: the runs themselves (CSV or JSON Lines) and the
conductor's decisions as training data (JSON Lines)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from orchestrator import selectors
from orchestrator.models import ApiKey
from orchestrator.run_export import csv_lines, export_rows, jsonl_lines
from orchestrator.trajectories import trajectory_lines
from webui.api.authentication import ApiKeyAuthentication
from webui.api.inputs import RunFilterSerializer
from webui.streaming import batched


class TrajectoryExportApi(APIView):
    """One JSON line per conductor decision of the runs that match the runs list's filters:
    ``prompt`` (chat messages) and ``completion`` (the conductor's raw output) as TRL's
    prompt/completion datasets expect, the parsed ``workflow`` or the ``parse_error``, the run's
    ``answer``, ``reference`` and ``score``, and a ``reward`` (0 when the output did not parse,
    else ``partial_credit + (1 - partial_credit) * score``). Streamed: any number of runs.
    Also takes a /v1 API key as ``Authorization: Bearer <key>``: then only its project's runs."""

    authentication_classes = [*api_settings.DEFAULT_AUTHENTICATION_CLASSES, ApiKeyAuthentication]

    class QuerySerializer(RunFilterSerializer):
        project = serializers.IntegerField(required=False, min_value=1)
        partial_credit = serializers.FloatField(
            required=False,
            min_value=0.0,
            max_value=1.0,
            help_text="Reward of a parsed workflow whose answer scored 0 (default from settings).",
        )

    @extend_schema(
        operation_id="export_trajectories",
        parameters=[QuerySerializer],
        responses={
            (200, "application/jsonl"): OpenApiResponse(
                OpenApiTypes.STR, description="JSON Lines, one conductor decision per line."
            )
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = dict(query.validated_data)
        partial_credit = filters.pop("partial_credit", settings.CONDUCTOR_EXPORT_PARTIAL_CREDIT)
        if isinstance(request.auth, ApiKey):
            wanted = filters.get("project", request.auth.project_id)
            # A key reaches its own project only; asking for another finds nothing.
            filters["project"] = wanted if wanted == request.auth.project_id else -1
        runs = selectors.run_list(user=request.user, **filters)
        lines = trajectory_lines(runs=runs, partial_credit=partial_credit)
        response = StreamingHttpResponse(
            batched(lines), content_type="application/jsonl; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="trajectories.jsonl"'
        return response


class RunExportApi(APIView):
    """The runs that match the runs list's filters (its query parameters, and ``project``), one
    row each, newest first. Each row: id, created/started/finished (ISO 8601, UTC), status,
    verdict, strategy, pool, input, the answer as the list shows it and in full, reference,
    grader, score, tokens, cost, model calls, wall time, steps, error, the run it replays and
    who started it. Streamed in constant memory: any number of runs. Also takes a /v1 API key as
    ``Authorization: Bearer <key>``: then only its project's runs. Each format is a view of its
    own below."""

    authentication_classes = [*api_settings.DEFAULT_AUTHENTICATION_CLASSES, ApiKeyAuthentication]
    kind = ""
    content_type = ""

    class QuerySerializer(RunFilterSerializer):
        project = serializers.IntegerField(required=False, min_value=1)

    def lines(self, rows: Iterator[dict[str, Any]]) -> Iterator[str]:
        raise NotImplementedError

    def get(self, request: Request) -> StreamingHttpResponse:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = dict(query.validated_data)
        if isinstance(request.auth, ApiKey):
            wanted = filters.get("project", request.auth.project_id)
            filters["project"] = wanted if wanted == request.auth.project_id else -1
        runs = selectors.run_list(user=request.user, **filters)
        response = StreamingHttpResponse(
            batched(self.lines(export_rows(runs=runs))), content_type=self.content_type
        )
        response["Content-Disposition"] = f'attachment; filename="runs.{self.kind}"'
        return response


class RunCsvExportApi(RunExportApi):
    """``/api/runs/export.csv``: a header row, then a run a row; cells that a spreadsheet would
    run as formulas start with an apostrophe."""

    kind = "csv"
    content_type = "text/csv; charset=utf-8"

    def lines(self, rows: Iterator[dict[str, Any]]) -> Iterator[str]:
        return csv_lines(rows)

    @extend_schema(
        operation_id="runs_export_csv",
        parameters=[RunExportApi.QuerySerializer],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV, a run a row.")
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        return super().get(request)


class RunJsonlExportApi(RunExportApi):
    """``/api/runs/export.jsonl``: a run a line, as a JSON object."""

    kind = "jsonl"
    content_type = "application/jsonl; charset=utf-8"

    def lines(self, rows: Iterator[dict[str, Any]]) -> Iterator[str]:
        return jsonl_lines(rows)

    @extend_schema(
        operation_id="runs_export_jsonl",
        parameters=[RunExportApi.QuerySerializer],
        responses={
            (200, "application/jsonl"): OpenApiResponse(
                OpenApiTypes.STR, description="JSON Lines, a run a line."
            )
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        return super().get(request)
