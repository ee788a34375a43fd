"""Run endpoints: list and create, detail, graph, cancel. Views validate, call one service or
selector, and serialize; the rules live in orchestrator.services and orchestrator.selectors."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors
from orchestrator.services.runs import run_cancel, run_create
from webui.api.inputs import CHOICES, InputSerializer, RunFilterSerializer, refuse_body
from webui.api.lookups import visible_run_detail_or_404, visible_run_or_404
from webui.api.pagination import MAX_PAGE, PagePagination
from webui.api.serializers import (
    RUN_SUMMARY_COLUMNS,
    RunDetailOutputSerializer,
    RunSummaryOutputSerializer,
    TextField,
    WholeNumberField,
)
from webui.converters import MAX_ID


class RunListCreateApi(APIView):
    """``GET``: the runs of the user's projects, newest first, filtered. ``POST``: start a run."""

    FilterSerializer = RunFilterSerializer

    class CreateInputSerializer(InputSerializer):
        input = TextField(
            help_text="The question; at most CONDUCTOR_MAX_TEXT_BYTES (100 KB) in UTF-8."
        )
        pool = WholeNumberField(
            min_value=1, max_value=MAX_ID, help_text="Id of a pool of one of your projects."
        )
        strategy = serializers.ChoiceField(choices=CHOICES.strategies, default="conductor")
        strategy_options = serializers.DictField(
            required=False,
            default=dict,
            help_text=(
                f"single: worker (0-{CHOICES.max_worker_index}). reflection: worker, rounds "
                f"(1-{CHOICES.max_reflection_rounds}). moa: proposers (a list of at most "
                f"{CHOICES.max_proposers} workers), aggregator. The steps a strategy runs must fit the pool's "
                "max_steps × max_rounds."
            ),
        )
        reference = TextField(
            required=False,
            allow_blank=True,
            default="",
            help_text="The expected answer; at most CONDUCTOR_MAX_TEXT_BYTES (100 KB) in UTF-8.",
        )
        grader = serializers.ChoiceField(
            choices=["", *CHOICES.graders],
            required=False,
            allow_blank=True,
            default="",
            help_text="How the answer is checked; chosen from the reference's form when empty.",
        )

    pagination_class = PagePagination

    @extend_schema(
        operation_id="runs_list",
        parameters=[
            FilterSerializer,
            *[
                OpenApiParameter(parameter["name"], parameter["schema"], description=text)
                for parameter, text in zip(
                    PagePagination().get_schema_operation_parameters(None),
                    (f"Page number, from 1 to {MAX_PAGE}.", "Runs per page (at most 200)."),
                    strict=True,
                )
            ],
        ],
        responses=RunSummaryOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        runs = selectors.run_list(user=request.user, **filters.validated_data)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(runs.values(*RUN_SUMMARY_COLUMNS), request, view=self)
        data = RunSummaryOutputSerializer(context={"request": request}).summaries(page)
        return paginator.get_paginated_response(data)

    @extend_schema(
        operation_id="runs_create",
        request=CreateInputSerializer,
        responses={201: RunSummaryOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = self.CreateInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data: dict[str, Any] = payload.validated_data
        pool = selectors.user_pool(user=request.user, pool_id=data["pool"])
        if pool is None:
            raise ValidationError({"pool": ["No such pool in your projects."]})
        run = run_create(
            pool=pool,
            input=data["input"],
            strategy=data["strategy"],
            strategy_options=data["strategy_options"],
            reference=data["reference"],
            grader=data["grader"],
            created_by=request.user,
        )
        output = RunSummaryOutputSerializer(run, context={"request": request})
        return Response(output.data, status=status.HTTP_201_CREATED)


class RunDetailApi(APIView):
    """One run with its plans and its steps (responses included, messages on the step endpoint)."""

    @extend_schema(operation_id="runs_retrieve", responses=RunDetailOutputSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = visible_run_detail_or_404(request=request, run_id=run_id)
        return Response(RunDetailOutputSerializer(run, context={"request": request}).data)


class RunGraphApi(APIView):
    """The run as a graph with server-computed positions: nodes, edges, groups (rounds)."""

    class QuerySerializer(serializers.Serializer):
        round = WholeNumberField(
            required=False,
            min_value=0,
            max_value=32767,
            help_text="One round expanded (for a collapsed group).",
        )

    @extend_schema(
        operation_id="runs_graph",
        parameters=[QuerySerializer],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, run_id: int) -> Response:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        run = visible_run_or_404(request=request, run_id=run_id)
        return Response(selectors.run_graph(run=run, round=query.validated_data.get("round")))


class RunStepsApi(APIView):
    """A run's steps (without messages and responses, as its page holds them), one round's with
    ``round``, and the seq they are current to at least; with ``graph`` that round laid out too:
    the run page opens a folded round with them."""

    class QuerySerializer(serializers.Serializer):
        round = WholeNumberField(
            required=False,
            min_value=0,
            max_value=32767,
            help_text="Only this round's steps.",
        )
        graph = serializers.BooleanField(
            required=False,
            default=False,
            help_text="With round: that round laid out as the run page draws it.",
        )

    @extend_schema(
        operation_id="runs_steps",
        parameters=[QuerySerializer],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, run_id: int) -> Response:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        run = visible_run_or_404(request=request, run_id=run_id)
        return Response(
            selectors.run_round_steps(
                run=run,
                round=query.validated_data.get("round"),
                graph=query.validated_data["graph"],
            )
        )


class RunCancelApi(APIView):
    """Cancel a run that has not finished (admins and reviewers of its project).

    200: the run as it is now (cancelled, or finished before). 202: the database was busy, the
    cancel is queued and the run ends cancelled shortly (its live events say when)."""

    @extend_schema(
        operation_id="runs_cancel",
        request=None,
        responses={200: RunSummaryOutputSerializer, 202: RunSummaryOutputSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        if not selectors.user_can_run(user=request.user, project=run.project_id):
            self.permission_denied(request, message="Only admins and reviewers may cancel runs.")
        refuse_body(request)
        run = run_cancel(run_id=run.pk)
        run = selectors.run_get(user=request.user, run_id=run.pk)
        data = RunSummaryOutputSerializer(run, context={"request": request}).data
        code = status.HTTP_200_OK if run.is_finished else status.HTTP_202_ACCEPTED
        return Response(data, status=code)


class RunListChangesApi(APIView):
    """What changed in the runs list since an event id: runs created or whose status changed
    (those matching the filters, newest first, and the ids of those that no longer match), and
    the cursor to ask from next. A client polls it to keep a list live; start from ``after=0``
    or the ``cursor`` of a first call with a large ``after``."""

    class QuerySerializer(RunFilterSerializer):
        after = WholeNumberField(
            min_value=0, max_value=2**63 - 1, help_text="The cursor of the previous call."
        )

    class OutputSerializer(serializers.Serializer):
        cursor = serializers.IntegerField()
        changed = serializers.ListField(child=serializers.IntegerField())
        gone = serializers.ListField(child=serializers.IntegerField())
        runs = RunSummaryOutputSerializer(many=True)

    @extend_schema(
        operation_id="runs_changes", parameters=[QuerySerializer], responses=OutputSerializer
    )
    def get(self, request: Request) -> Response:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = dict(query.validated_data)
        after = filters.pop("after")
        changes = selectors.run_list_changes(user=request.user, after=after, **filters)
        return Response(self.OutputSerializer(changes, context={"request": request}).data)
