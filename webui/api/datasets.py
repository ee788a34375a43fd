"""Dataset endpoints: list and import, detail with items, export, the bundled suite, and an item
added from a run. Views validate, call one service or selector, and serialize."""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors
from orchestrator.scoreboard import dataset_export_lines
from orchestrator.services.datasets import (
    FORMATS,
    MAX_NAME_LENGTH,
    dataset_ensure_suite,
    dataset_import,
    dataset_item_add_from_run,
    format_for_filename,
)
from webui.api.inputs import InputSerializer
from webui.api.lookups import project_or_400, run_or_400, visible_dataset_or_404
from webui.api.parsers import BoundedJSONParser
from webui.api.serializers import TagListField, TextField, WholeNumberField
from webui.converters import MAX_ID

ITEMS_SHOWN = 200


class DatasetOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    project = serializers.IntegerField(source="project_id")
    builtin = serializers.CharField(help_text='"suite" for the bundled suite; else empty.')
    item_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class DatasetItemOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    position = serializers.IntegerField()
    input = serializers.CharField()
    reference = serializers.CharField()
    grader = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    source_run = serializers.IntegerField(source="source_run_id", allow_null=True)


class DatasetDetailOutputSerializer(DatasetOutputSerializer):
    items = serializers.SerializerMethodField(help_text=f"The first {ITEMS_SHOWN} items.")

    @extend_schema_field(DatasetItemOutputSerializer(many=True))
    def get_items(self, dataset) -> list[dict[str, Any]]:
        items = selectors.dataset_items(dataset=dataset, limit=ITEMS_SHOWN)
        return DatasetItemOutputSerializer(items, many=True).data


class DatasetListCreateApi(APIView):
    """``GET``: the datasets of the user's projects. ``POST``: import one from a JSONL or CSV file
    (multipart ``file``, or its text as ``content``): every bad line is listed in the 400 under
    ``file``, and nothing is stored unless every line is good."""

    parser_classes = [MultiPartParser, BoundedJSONParser]

    class DatasetCreateInputSerializer(InputSerializer):
        project = WholeNumberField(min_value=1, max_value=MAX_ID, help_text="Id of your project.")
        name = TextField(max_length=MAX_NAME_LENGTH)
        format = serializers.ChoiceField(
            choices=FORMATS, required=False, help_text="From the file's name when not given."
        )
        file = serializers.FileField(required=False, help_text="A JSONL or CSV file.")
        content = TextField(
            required=False, help_text="The file's text, instead of a file (JSON requests)."
        )
        description = TextField(required=False, allow_blank=True, default="", max_length=2000)

    @extend_schema(operation_id="datasets_list", responses=DatasetOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        datasets = selectors.dataset_list(user=request.user)[:1000]
        return Response(DatasetOutputSerializer(datasets, many=True).data)

    @extend_schema(
        operation_id="datasets_create",
        request={
            "multipart/form-data": DatasetCreateInputSerializer,
            "application/json": DatasetCreateInputSerializer,
        },
        responses={201: DatasetOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = self.DatasetCreateInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data: dict[str, Any] = payload.validated_data
        upload = data.get("file")
        if (upload is None) == ("content" not in data):
            raise ValidationError({"file": ["Give a file, or its text as content (not both)."]})
        format = data.get("format") or (format_for_filename(upload.name) if upload else None)
        if format is None:
            raise ValidationError({"format": ["Say jsonl or csv (the file's name does not)."]})
        if upload is not None:
            from orchestrator.services.datasets import dataset_max_bytes

            if upload.size > dataset_max_bytes():
                raise ValidationError(
                    {
                        "file": [
                            f"Too large: {upload.size:,} bytes; the limit is "
                            f"{dataset_max_bytes():,} bytes (CONDUCTOR_DATASET_MAX_BYTES)."
                        ]
                    }
                )
            content = upload.read()
        else:
            content = data["content"].encode("utf-8", "surrogatepass")
        dataset = dataset_import(
            project=project_or_400(request, data["project"]),
            name=data["name"],
            content=content,
            format=format,
            created_by=request.user,
            description=data["description"],
        )
        return Response(DatasetOutputSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetSuiteApi(APIView):
    """The project's built-in dataset of the bundled suite (made on first use)."""

    class SuiteInputSerializer(InputSerializer):
        project = WholeNumberField(min_value=1, max_value=MAX_ID, help_text="Id of your project.")

    @extend_schema(
        operation_id="datasets_suite",
        request=SuiteInputSerializer,
        responses={200: DatasetOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = self.SuiteInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        project = project_or_400(request, payload.validated_data["project"])
        dataset = dataset_ensure_suite(project=project, created_by=request.user)
        return Response(DatasetOutputSerializer(dataset).data)


class DatasetDetailApi(APIView):
    """One dataset with its first items."""

    @extend_schema(operation_id="datasets_retrieve", responses=DatasetDetailOutputSerializer)
    def get(self, request: Request, dataset_id: int) -> Response:
        dataset = visible_dataset_or_404(request=request, dataset_id=dataset_id)
        return Response(DatasetDetailOutputSerializer(dataset).data)


class DatasetExportApi(APIView):
    """Every item of a dataset as JSONL or CSV, in the form import reads."""

    class QuerySerializer(serializers.Serializer):
        # Not "format": DRF reads that one to choose a renderer.
        kind = serializers.ChoiceField(choices=FORMATS, default="jsonl", help_text="jsonl or csv.")

    @extend_schema(
        operation_id="datasets_export",
        parameters=[QuerySerializer],
        responses={
            (200, "application/jsonl"): OpenApiResponse(OpenApiTypes.STR),
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR),
        },
    )
    def get(self, request: Request, dataset_id: int) -> StreamingHttpResponse:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        dataset = visible_dataset_or_404(request=request, dataset_id=dataset_id)
        format = query.validated_data["kind"]
        items = selectors.dataset_items(dataset=dataset).iterator(chunk_size=1000)
        content_type = "application/jsonl" if format == "jsonl" else "text/csv"
        response = StreamingHttpResponse(
            dataset_export_lines(items=items, format=format),
            content_type=f"{content_type}; charset=utf-8",
        )
        response["Content-Disposition"] = f'attachment; filename="dataset-{dataset.pk}.{format}"'
        return response


class DatasetItemFromRunApi(APIView):
    """Add a run's question to a dataset of its project, with the run's reference or, with
    ``answer_as_reference`` (you mark the answer right), the run's answer as reference."""

    class ItemFromRunInputSerializer(InputSerializer):
        run = WholeNumberField(min_value=1, max_value=MAX_ID)
        answer_as_reference = serializers.BooleanField(default=False)
        tags = TagListField(required=False, default=list, max_length=20)

    @extend_schema(
        operation_id="datasets_add_item",
        request=ItemFromRunInputSerializer,
        responses={201: DatasetItemOutputSerializer},
    )
    def post(self, request: Request, dataset_id: int) -> Response:
        payload = self.ItemFromRunInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        dataset = visible_dataset_or_404(request=request, dataset_id=dataset_id)
        item = dataset_item_add_from_run(
            dataset=dataset,
            run=run_or_400(request=request, run_id=data["run"]),
            user=request.user,
            answer_as_reference=data["answer_as_reference"],
            tags=data["tags"],
        )
        return Response(DatasetItemOutputSerializer(item).data, status=status.HTTP_201_CREATED)
