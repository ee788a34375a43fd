"""Experiment endpoints: list and start, detail with the scoreboard, progress (the page polls
it), cancel, resume, the runs of one scoreboard cell, and two arms head to head."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import scoreboard, selectors
from orchestrator.models import Experiment
from orchestrator.services.experiments import (
    MAX_ARMS,
    ArmSpec,
    experiment_cancel,
    experiment_create,
    experiment_resume,
)
from webui.api.inputs import CHOICES, InputSerializer, refuse_body
from webui.api.lookups import visible_experiment_or_404
from webui.api.pagination import PagePagination
from webui.api.serializers import (
    RunSummaryOutputSerializer,
    TagListField,
    TextField,
    WholeNumberField,
)
from webui.converters import MAX_ID

STATUS_HELP = "One of: " + ", ".join(str(status) for status in Experiment.Status) + "."


class ProgressOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(help_text=STATUS_HELP)
    done = serializers.IntegerField(help_text="Runs (items × arms) finished.")
    total = serializers.IntegerField()
    error = serializers.CharField()


class DoneTotalOutputSerializer(serializers.Serializer):
    done = serializers.IntegerField()
    total = serializers.IntegerField()


class ArmOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    label = serializers.CharField()
    strategy = serializers.CharField()
    options = serializers.DictField()
    pool = serializers.IntegerField(source="pool_id")


class ExperimentOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    dataset = serializers.IntegerField(source="dataset_id")
    status = serializers.CharField(help_text=STATUS_HELP)
    progress = serializers.SerializerMethodField()
    sample = serializers.IntegerField(allow_null=True)
    seed = serializers.IntegerField()
    tags = serializers.ListField(child=serializers.CharField())
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(DoneTotalOutputSerializer)
    def get_progress(self, experiment) -> dict[str, Any]:
        return {"done": experiment.done, "total": experiment.total}


class ExperimentDetailOutputSerializer(ExperimentOutputSerializer):
    arms = ArmOutputSerializer(many=True, source="arms.all")
    scoreboard = serializers.SerializerMethodField(
        help_text="One row per arm (wire.Scoreboard): accuracy with a 95% Wilson interval, per "
        "tag too, tokens per item (conductor's own, workers'), calls, cost, wall p50/p95, and "
        "the arms holding each column's best value."
    )

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_scoreboard(self, experiment) -> dict[str, Any]:
        return dict(scoreboard.experiment_scoreboard(experiment=experiment))


class ArmInputSerializer(InputSerializer):
    strategy = serializers.ChoiceField(choices=CHOICES.strategies)
    pool = WholeNumberField(min_value=1, max_value=MAX_ID)
    options = serializers.DictField(required=False, default=dict)
    label = TextField(required=False, allow_blank=True, default="", max_length=100)


class ExperimentListCreateApi(APIView):
    """``GET``: the experiments of the user's projects, newest first. ``POST``: start one (admins
    and reviewers of the dataset's project); it runs in the background."""

    class ExperimentCreateInputSerializer(InputSerializer):
        dataset = WholeNumberField(min_value=1, max_value=MAX_ID)
        arms = ArmInputSerializer(
            many=True, min_length=1, max_length=MAX_ARMS, help_text=f"1 to {MAX_ARMS} arms."
        )
        sample = WholeNumberField(
            required=False,
            allow_null=True,
            default=None,
            min_value=1,
            max_value=MAX_ID,
            help_text="A random sample of this many items (drawn with seed); null: every item.",
        )
        seed = WholeNumberField(required=False, default=0, min_value=0, max_value=2**62)
        tags = TagListField(
            required=False,
            default=list,
            max_length=20,
            help_text="Only items with one of these tags.",
        )
        name = TextField(required=False, allow_blank=True, default="", max_length=200)

    class FilterSerializer(serializers.Serializer):
        dataset = WholeNumberField(required=False, min_value=1, max_value=MAX_ID)

    @extend_schema(
        operation_id="experiments_list",
        parameters=[FilterSerializer],
        responses=ExperimentOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        experiments = selectors.experiment_list(
            user=request.user, dataset=filters.validated_data.get("dataset")
        )
        return Response(ExperimentOutputSerializer(experiments[:200], many=True).data)

    @extend_schema(
        operation_id="experiments_create",
        request=ExperimentCreateInputSerializer,
        responses={201: ExperimentDetailOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = self.ExperimentCreateInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data: dict[str, Any] = payload.validated_data
        dataset = selectors.dataset_get(user=request.user, dataset_id=data["dataset"])
        if dataset is None:
            raise ValidationError({"dataset": ["No such dataset of yours."]})
        pools = {pool.pk: pool for pool in selectors.pools_for(user=request.user)}
        arms = []
        for index, arm in enumerate(data["arms"]):
            pool = pools.get(arm["pool"])
            if pool is None:
                raise ValidationError({f"arms[{index}].pool": ["No such pool of yours."]})
            arms.append(
                ArmSpec(
                    strategy=arm["strategy"], pool=pool, options=arm["options"], label=arm["label"]
                )
            )
        experiment = experiment_create(
            dataset=dataset,
            arms=arms,
            sample=data["sample"],
            seed=data["seed"],
            tags=data["tags"],
            name=data["name"],
            created_by=request.user,
        )
        output = ExperimentDetailOutputSerializer(experiment)
        return Response(output.data, status=status.HTTP_201_CREATED)


class ExperimentDetailApi(APIView):
    """One experiment: status, progress, arms and scoreboard."""

    @extend_schema(operation_id="experiments_retrieve", responses=ExperimentDetailOutputSerializer)
    def get(self, request: Request, experiment_id: int) -> Response:
        experiment = visible_experiment_or_404(request=request, experiment_id=experiment_id)
        return Response(ExperimentDetailOutputSerializer(experiment).data)


class ExperimentProgressApi(APIView):
    """Status and progress only: one small read, polled by the experiment page."""

    @extend_schema(operation_id="experiments_progress", responses=ProgressOutputSerializer)
    def get(self, request: Request, experiment_id: int) -> Response:
        experiment = visible_experiment_or_404(request=request, experiment_id=experiment_id)
        return Response(scoreboard.experiment_progress(experiment=experiment))


class _ExperimentActionApi(APIView):
    def act(self, experiment: Experiment, user: Any) -> Experiment:
        raise NotImplementedError

    def post(self, request: Request, experiment_id: int) -> Response:
        experiment = visible_experiment_or_404(request=request, experiment_id=experiment_id)
        refuse_body(request)
        experiment = self.act(experiment, request.user)
        return Response(scoreboard.experiment_progress(experiment=experiment))


class ExperimentCancelApi(_ExperimentActionApi):
    """Stop an experiment: no item starts after this and the runs under way are cancelled;
    finished items are kept (admins and reviewers)."""

    @extend_schema(
        operation_id="experiments_cancel", request=None, responses=ProgressOutputSerializer
    )
    def post(self, request: Request, experiment_id: int) -> Response:
        return super().post(request, experiment_id)

    def act(self, experiment: Experiment, user: Any) -> Experiment:
        return experiment_cancel(experiment=experiment, user=user)


class ExperimentResumeApi(_ExperimentActionApi):
    """Go on with an unfinished experiment; finished items are not run again."""

    @extend_schema(
        operation_id="experiments_resume", request=None, responses=ProgressOutputSerializer
    )
    def post(self, request: Request, experiment_id: int) -> Response:
        return super().post(request, experiment_id)

    def act(self, experiment: Experiment, user: Any) -> Experiment:
        return experiment_resume(experiment=experiment, user=user)


class ExperimentRunsApi(APIView):
    """The runs behind one scoreboard cell: an arm's, optionally of one tag and one outcome."""

    pagination_class = PagePagination

    class QuerySerializer(serializers.Serializer):
        arm = WholeNumberField(min_value=1, max_value=MAX_ID)
        tag = serializers.CharField(required=False, max_length=50)
        outcome = serializers.ChoiceField(choices=scoreboard.OUTCOMES, required=False)

    @extend_schema(
        operation_id="experiments_runs",
        parameters=[QuerySerializer],
        responses=RunSummaryOutputSerializer(many=True),
    )
    def get(self, request: Request, experiment_id: int) -> Response:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        experiment = visible_experiment_or_404(request=request, experiment_id=experiment_id)
        runs = scoreboard.experiment_cell_runs(experiment=experiment, **query.validated_data)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(runs, request, view=self)
        data = RunSummaryOutputSerializer(page, many=True, context={"request": request}).data
        return paginator.get_paginated_response(data)


class HeadToHeadItemOutputSerializer(serializers.Serializer):
    item = serializers.IntegerField()
    position = serializers.IntegerField()
    input = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    winner = serializers.ChoiceField(choices=["a", "b"])
    a_run = serializers.IntegerField()
    b_run = serializers.IntegerField()
    a_score = serializers.FloatField(allow_null=True)
    b_score = serializers.FloatField(allow_null=True)
    compare_url = serializers.CharField()


class HeadToHeadCountsOutputSerializer(serializers.Serializer):
    both_right = serializers.IntegerField()
    only_a = serializers.IntegerField()
    only_b = serializers.IntegerField()
    both_wrong = serializers.IntegerField()


class HeadToHeadOutputSerializer(serializers.Serializer):
    a = serializers.IntegerField()
    b = serializers.IntegerField()
    counts = HeadToHeadCountsOutputSerializer()
    items = HeadToHeadItemOutputSerializer(many=True)


class ExperimentHeadToHeadApi(APIView):
    """Two arms item by item: the counts, and the items where exactly one was right, each
    linked to the compare view of its two runs."""

    class QuerySerializer(serializers.Serializer):
        a = WholeNumberField(min_value=1, max_value=MAX_ID, help_text="An arm id.")
        b = WholeNumberField(min_value=1, max_value=MAX_ID, help_text="Another arm id.")

    @extend_schema(
        operation_id="experiments_head_to_head",
        parameters=[QuerySerializer],
        responses=HeadToHeadOutputSerializer,
    )
    def get(self, request: Request, experiment_id: int) -> Response:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        experiment = visible_experiment_or_404(request=request, experiment_id=experiment_id)
        arms = selectors.experiment_arm_ids(experiment=experiment)
        a, b = query.validated_data["a"], query.validated_data["b"]
        for name, arm in (("a", a), ("b", b)):
            if arm not in arms:
                raise ValidationError({name: ["Not an arm of this experiment."]})
        result = scoreboard.experiment_head_to_head(experiment=experiment, a=a, b=b)
        return Response(HeadToHeadOutputSerializer(result).data)
