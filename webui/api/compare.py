"""Compare endpoint: several runs' steps aligned and diffed, and their outcomes side by side.

The output is ``wire.Comparison`` as ``selectors.run_compare`` builds it; the output serializers
here describe it for the schema and are checked against its shapes at import (``follows``).
"""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.http import Http404
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import comparing, selectors, verdicts, wire
from orchestrator.models import Run
from webui.api.serializers import StepSummaryOutputSerializer, TotalsOutputSerializer, follows
from webui.converters import MAX_ID

CHANGE_HELP = (
    "Against the first run: same, changed (instruction, worker, access, response, status or "
    "error differ), added (only in a later run), removed (in the first run, not in a later one)."
)


RUN_IDS_PATTERN = rf"^[0-9]{{1,19}}(,[0-9]{{1,19}}){{1,{comparing.MAX_RUNS - 1}}}$"


class RunIdsField(serializers.CharField):
    """Run ids separated by commas (no spaces): at least two, at most ``comparing.MAX_RUNS``,
    each once. The pattern is in the schema; what it cannot say (an id past the largest, a run
    named twice) is a 400 too."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            trim_whitespace=False,
            validators=[
                RegexValidator(
                    RUN_IDS_PATTERN,
                    f"Give from 2 to {comparing.MAX_RUNS} run ids separated by commas, e.g. 12,15.",
                )
            ],
            **kwargs,
        )

    def to_internal_value(self, data: Any) -> list[int]:
        if not isinstance(data, str):
            self.fail("invalid")
        text = super().to_internal_value(data)
        self.run_validators(text)
        ids = [int(part) for part in text.split(",")]
        if any(not 1 <= run_id <= MAX_ID for run_id in ids):
            raise ValidationError(f"A run id is a whole number from 1 to {MAX_ID}.")
        if len(set(ids)) != len(ids):
            raise ValidationError("Name each run once.")
        return ids

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # The validators ran on the text in to_internal_value; the ids are not text.
        (is_empty, data) = self.validate_empty_values(data)
        if is_empty:
            return data
        return self.to_internal_value(data)


class CompareQuerySerializer(serializers.Serializer):
    runs = RunIdsField(
        max_length=200,
        help_text=(
            f"From 2 to {comparing.MAX_RUNS} run ids separated by commas, each once; the first is "
            "the run the others are compared with. Every run must be one you can see (else 404)."
        ),
    )


def runs_to_compare(*, user: Any, query: dict[str, Any]) -> list[Run]:
    """The runs a valid query names, in its order: a 404 if the user may not see one of them, a
    400 naming ``runs`` if together they hold too many steps. The API and the page share it."""
    runs = selectors.runs_to_compare(user=user, run_ids=query["runs"])
    if runs is None:
        missing = [
            str(run_id)
            for run_id in query["runs"]
            if selectors.run_get(user=user, run_id=run_id) is None
        ]
        named = f"run{'s' if len(missing) > 1 else ''} {', '.join(missing) or 'of these'}"
        raise Http404(f"No {named} in your projects.")
    total = sum(run.step_count for run in runs)
    if total > comparing.MAX_STEPS:
        raise ValidationError(
            {
                "runs": [
                    f"These runs hold {total} steps together; a comparison takes at most "
                    f"{comparing.MAX_STEPS}."
                ]
            }
        )
    return runs


def nullable(serializer: type[serializers.Serializer]) -> serializers.Field:
    """A list item that is ``serializer``'s object or null: drf-spectacular leaves ``allow_null``
    out of the schema of a list's serializer child, so the item is a field that names it."""
    item = type(f"Nullable{serializer.__name__}", (serializers.JSONField,), {})
    return extend_schema_field(serializer)(item)(allow_null=True)


@follows(wire.DiffPart)
class DiffPartOutputSerializer(serializers.Serializer):
    op = serializers.ChoiceField(choices=["equal", "insert", "delete"])
    text = serializers.CharField()


class DiffField(serializers.ListField):
    child = DiffPartOutputSerializer()


@follows(wire.StepDiff)
class StepDiffOutputSerializer(serializers.Serializer):
    """A word diff of each field, from the first run's step to this one's."""

    changed = serializers.ListField(
        child=serializers.ChoiceField(choices=list(wire.COMPARED_FIELDS)),
        help_text="The fields that differ.",
    )
    instruction = DiffField()
    worker = DiffField()
    access = DiffField(help_text='The access list as text: "all", "none" or its indices.')
    response = DiffField()


@follows(wire.CompareRow)
class CompareRowOutputSerializer(serializers.Serializer):
    """One aligned position; each list has one entry per run, in the order of ``runs``."""

    round = serializers.IntegerField()
    index = serializers.IntegerField()
    change = serializers.ChoiceField(choices=list(wire.CHANGE_KINDS), help_text=CHANGE_HELP)
    changes = serializers.ListField(
        child=serializers.ChoiceField(choices=list(wire.CHANGE_KINDS), allow_null=True),
        help_text="Each run's step against the first run's (null for the first run, and for a "
        "run that has no step here when the first has none either).",
    )
    steps = serializers.ListField(
        child=nullable(StepSummaryOutputSerializer),
        help_text="Each run's step at this position, null where it has none.",
    )
    diffs = serializers.ListField(
        child=nullable(StepDiffOutputSerializer),
        help_text="For each run whose step changed, its diff; null otherwise.",
    )


@follows(wire.OutcomeRow)
class OutcomeRowOutputSerializer(serializers.Serializer):
    key = serializers.ChoiceField(
        choices=[
            "status",
            "answer",
            "score",
            "tokens",
            "cost",
            "model_calls",
            "wall_time",
            "step_count",
        ]
    )
    label = serializers.CharField()
    values = serializers.ListField(child=serializers.JSONField(allow_null=True))
    differs = serializers.ListField(child=serializers.BooleanField())
    deltas = serializers.ListField(
        child=serializers.FloatField(allow_null=True),
        help_text="For numbers, each run's value minus the first run's.",
    )
    diffs = serializers.ListField(
        child=DiffField(allow_null=True),
        help_text="For the answer, a word diff from the first run's; null otherwise.",
    )


@follows(wire.RunSummary)
class CompareRunSummaryOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    strategy = serializers.CharField()
    pool = serializers.IntegerField()
    input = serializers.CharField()
    reference = serializers.CharField()
    answer = serializers.CharField()
    answer_shown = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    verdict = serializers.ChoiceField(choices=verdicts.VERDICTS)
    error = serializers.CharField()
    replay_of = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    totals = TotalsOutputSerializer()


@follows(wire.CompareRun)
class CompareRunOutputSerializer(serializers.Serializer):
    run = CompareRunSummaryOutputSerializer()
    pool_name = serializers.CharField()


class CountsOutputSerializer(serializers.Serializer):
    """How many positions are of each kind."""

    same = serializers.IntegerField()
    changed = serializers.IntegerField()
    added = serializers.IntegerField()
    removed = serializers.IntegerField()


@follows(wire.Comparison)
class ComparisonOutputSerializer(serializers.Serializer):
    runs = CompareRunOutputSerializer(many=True)
    steps = CompareRowOutputSerializer(many=True, help_text="One row per (round, index), in order.")
    counts = CountsOutputSerializer()
    outcome = OutcomeRowOutputSerializer(many=True)


class CompareApi(APIView):
    """Runs side by side: steps aligned by (round, index) and marked against the first run, with
    word diffs of each changed step's instruction, worker, access list and response, and the
    outcome table (answer, score, tokens, cost, model calls, wall time). Anyone who can see the
    runs can compare them."""

    @extend_schema(
        operation_id="compare_runs",
        parameters=[CompareQuerySerializer],
        responses={
            200: ComparisonOutputSerializer,
            404: OpenApiResponse(
                response=inline_serializer("CompareNotFound", {"detail": serializers.CharField()}),
                description="One of the runs is not one you can see.",
            ),
        },
    )
    def get(self, request: Request) -> Response:
        query = CompareQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        runs = runs_to_compare(user=request.user, query=query.validated_data)
        # The comparison is already its wire shape (checked against the serializers above).
        return Response(selectors.run_compare(runs=runs))
