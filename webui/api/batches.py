"""Batch replay endpoints: list and create, detail. A batch replays every run a filter of the runs
list matches with one override; the rules live in ``orchestrator/services/batches.py``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors, wire
from orchestrator.services.batches import (
    BATCH_STATUSES,
    MATCH_KINDS,
    MAX_BATCH_RUNS,
    MAX_NAME_CHARS,
    MAX_PATTERN_CHARS,
    MAX_REPLACEMENT_CHARS,
    OVERRIDE_INSTRUCTION,
    OVERRIDE_WORKER,
    batch_create,
)
from webui.api.inputs import InputSerializer, RunFilterInputSerializer
from webui.api.lookups import batch_or_404, project_or_400
from webui.api.pagination import MAX_PAGE, PagePagination
from webui.api.serializers import TextField, WholeNumberField, follows
from webui.converters import MAX_ID


class OverrideInputSerializer(InputSerializer):
    """One override for every run of the batch. ``worker``: every step that ran on the worker
    named ``from`` gets the enabled worker named ``to`` of its run's pool. ``instruction``: in
    every step's instruction, each occurrence of ``pattern`` (``match`` ``literal``: a
    case-sensitive substring; ``regex``: a regular expression that cannot match empty text,
    searched for at most 50 ms per instruction) is replaced by ``replacement``, taken
    literally."""

    kind = serializers.ChoiceField(choices=[OVERRIDE_WORKER, OVERRIDE_INSTRUCTION])
    to = TextField(
        required=False, max_length=MAX_NAME_CHARS, help_text="worker: the new worker's name."
    )
    match = serializers.ChoiceField(choices=list(MATCH_KINDS), required=False)
    pattern = TextField(
        required=False,
        max_length=MAX_PATTERN_CHARS,
        trim_whitespace=False,
        help_text="instruction: the text (or expression) to replace.",
    )
    replacement = TextField(
        required=False,
        allow_blank=True,
        max_length=MAX_REPLACEMENT_CHARS,
        trim_whitespace=False,
        help_text="instruction: what replaces each occurrence (may be empty).",
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # "from" is a Python keyword, so it cannot be declared as a class attribute.
        fields["from"] = TextField(
            required=False,
            max_length=MAX_NAME_CHARS,
            help_text="worker: the name of the worker to replace.",
        )
        return fields


class BatchRunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    outcome = serializers.ChoiceField(choices=list(wire.BATCH_OUTCOMES))
    score = serializers.FloatField(allow_null=True)
    tokens = serializers.IntegerField()
    cost = serializers.FloatField()
    wall_time = serializers.FloatField(allow_null=True)


follows(wire.BatchRun)(BatchRunOutputSerializer)


@follows(wire.BatchProgress)
class BatchProgressOutputSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    replayed = serializers.IntegerField()
    not_replayed = serializers.IntegerField()
    finished = serializers.IntegerField(help_text="Replays finished.")
    done = serializers.IntegerField(help_text="Replays finished plus items not replayed.")
    fraction = serializers.FloatField(help_text="done / total, 0 to 1.")


@follows(wire.BatchItemData)
class BatchItemOutputSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    input = serializers.CharField(help_text="The start of the source's input.")
    source = BatchRunOutputSerializer()
    replay = BatchRunOutputSerializer(allow_null=True)
    error = serializers.CharField(help_text="Why no replay was made; empty when one was.")
    compare_url = serializers.CharField(allow_null=True)


@follows(wire.BatchAggregate)
class BatchAggregateOutputSerializer(serializers.Serializer):
    compared = serializers.IntegerField()
    fixed = serializers.IntegerField()
    broken = serializers.IntegerField()
    still_right = serializers.IntegerField()
    still_wrong = serializers.IntegerField()
    unscored = serializers.IntegerField()
    before = serializers.DictField(child=serializers.IntegerField())
    after = serializers.DictField(child=serializers.IntegerField())
    tokens_before = serializers.IntegerField()
    tokens_after = serializers.IntegerField()
    cost_before = serializers.FloatField()
    cost_after = serializers.FloatField()
    wall_time_before = serializers.FloatField()
    wall_time_after = serializers.FloatField()


class _BatchEntryFields(serializers.Serializer):
    id = serializers.IntegerField()
    project = serializers.IntegerField()
    created_by = serializers.CharField(allow_null=True)
    created_at = serializers.CharField(allow_null=True)
    filters = serializers.DictField()
    override = serializers.DictField()
    status = serializers.ChoiceField(choices=list(BATCH_STATUSES))
    progress = BatchProgressOutputSerializer()


@follows(wire.BatchEntry)
class BatchEntryOutputSerializer(_BatchEntryFields):
    """A batch as lists show it."""


@follows(wire.BatchSummary)
class BatchOutputSerializer(_BatchEntryFields):
    """A batch with its aggregate before and after and every item."""

    aggregate = BatchAggregateOutputSerializer()
    items = BatchItemOutputSerializer(many=True)


class BatchListCreateApi(APIView):
    """``GET``: the batches of the user's projects, newest first. ``POST``: replay every run of a
    project that ``filters`` matches (at most MAX_BATCH_RUNS) with ``override``, in the
    background (admins of the project)."""

    class BatchCreateInputSerializer(InputSerializer):
        project = WholeNumberField(min_value=1, max_value=MAX_ID, help_text="Id of the project.")
        filters = RunFilterInputSerializer(
            required=False,
            help_text="The runs list's filters (GET /api/runs/ parameters); none: every run.",
        )
        override = OverrideInputSerializer()

    pagination_class = PagePagination

    @extend_schema(
        operation_id="batches_list",
        parameters=[
            OpenApiParameter(parameter["name"], parameter["schema"], description=text)
            for parameter, text in zip(
                PagePagination().get_schema_operation_parameters(None),
                (f"Page number, from 1 to {MAX_PAGE}.", "Batches per page (at most 200)."),
                strict=True,
            )
        ],
        responses=BatchEntryOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(selectors.batch_list(user=request.user), request, self)
        data = [selectors.batch_entry(batch=batch) for batch in page]
        return paginator.get_paginated_response(BatchEntryOutputSerializer(data, many=True).data)

    @extend_schema(
        operation_id="batches_create",
        description=f"At most {MAX_BATCH_RUNS} runs; 400 names the field of any bad input "
        "and nothing is created; 403 for members who are not admins of the project.",
        request=BatchCreateInputSerializer,
        responses={201: BatchOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = self.BatchCreateInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data: dict[str, Any] = payload.validated_data
        batch = batch_create(
            project=project_or_400(request, data["project"]),
            actor=request.user,
            filters=data.get("filters") or {},
            override=data["override"],
        )
        batch = batch_or_404(request=request, batch_id=batch.pk)
        output = BatchOutputSerializer(selectors.batch_summary(batch=batch))
        return Response(output.data, status=status.HTTP_201_CREATED)


class BatchDetailApi(APIView):
    """One batch: progress, the aggregate before and after, and every item with its compare
    link. Any member of the project may look at it."""

    @extend_schema(operation_id="batches_retrieve", responses=BatchOutputSerializer)
    def get(self, request: Request, batch_id: int) -> Response:
        batch = batch_or_404(request=request, batch_id=batch_id)
        return Response(BatchOutputSerializer(selectors.batch_summary(batch=batch)).data)
