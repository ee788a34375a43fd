"""Replay endpoints: replay a run with edits, and a run's family (its source and replays).

Views validate, call one service or selector, and serialize; the rules live in
``orchestrator/services/replay.py`` and ``orchestrator/selectors.py``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors, wire
from orchestrator.models import Membership
from orchestrator.services.replay import MAX_EDITS, replay_create
from webui.api.runs import validation_error_from_django, visible_run_or_404
from webui.api.serializers import (
    RunDetailOutputSerializer,
    TextField,
    TotalsOutputSerializer,
    WholeNumberField,
    follows,
)
from webui.converters import MAX_ID


def flat_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested errors of a list of objects as flat keys (``edits[0].step``), the form the
    replay service gives and the schema documents (field: messages)."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = (
                f"{prefix}[{key}]"
                if isinstance(key, int)
                else (f"{prefix}.{key}" if prefix else str(key))
            )
            flat.update(flat_errors(value, name))
        return flat
    if isinstance(detail, list) and all(isinstance(item, str) for item in detail):
        return {prefix or "non_field_errors": [str(item) for item in detail]}
    if isinstance(detail, list):
        flat = {}
        for position, item in enumerate(detail):
            if item:
                flat.update(flat_errors(item, f"{prefix}[{position}]"))
        return flat
    return {prefix or "non_field_errors": [str(detail)]}


class EditInputSerializer(serializers.Serializer):
    step = WholeNumberField(min_value=1, max_value=MAX_ID, help_text="A step of the run.")
    instruction = TextField(required=False, allow_blank=True, help_text="Not empty.")
    worker = WholeNumberField(
        required=False,
        min_value=1,
        max_value=MAX_ID,
        help_text="An enabled worker of the run's pool, by id.",
    )
    access = serializers.JSONField(
        required=False,
        help_text='"all", or a list of indices of earlier steps of the same round.',
    )


class RunReplayCreateApi(APIView):
    """Replay a finished run with edits (admins of its project): a new run in the same pool that
    runs again only the edited steps and those reading them, reusing every other result."""

    class InputSerializer(serializers.Serializer):
        edits = EditInputSerializer(
            many=True,
            required=False,
            default=list,
            max_length=MAX_EDITS,
            help_text="One per step, naming any of instruction, worker, access; [] replays "
            "unchanged.",
        )
        replan_from = WholeNumberField(
            required=False,
            allow_null=True,
            default=None,
            min_value=1,
            max_value=MAX_ID,
            help_text="A step of a conductor run: the conductor writes its round again from it.",
        )
        fresh = serializers.BooleanField(
            required=False, default=False, help_text="Run every step again."
        )

    @extend_schema(
        operation_id="runs_replays_create",
        request=InputSerializer,
        responses={201: RunDetailOutputSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        source = visible_run_or_404(request=request, run_id=run_id)
        if selectors.user_role(user=request.user, project=source.project_id) != (
            Membership.Role.ADMIN
        ):
            self.permission_denied(request, message="Only admins of the project may replay runs.")
        payload = self.InputSerializer(data=request.data)
        if not payload.is_valid():
            raise ValidationError(flat_errors(payload.errors))
        data: dict[str, Any] = payload.validated_data
        try:
            run = replay_create(
                source=source,
                actor=request.user,
                edits=[dict(edit) for edit in data["edits"]],
                replan_from=data["replan_from"],
                fresh=data["fresh"],
            )
        except DjangoValidationError as error:
            raise validation_error_from_django(error) from error
        run = selectors.run_detail(user=request.user, run_id=run.pk)
        output = RunDetailOutputSerializer(run, context={"request": request})
        return Response(output.data, status=status.HTTP_201_CREATED)


@follows(wire.Edit)
class EditOutputSerializer(serializers.Serializer):
    step = serializers.IntegerField(allow_null=True)
    round = serializers.IntegerField(allow_null=True)
    index = serializers.IntegerField(allow_null=True)
    field = serializers.CharField(
        help_text="instruction, worker, access, replan_from (the conductor wrote the step's "
        "round again from it) or fresh (every step ran again)."
    )
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    who = serializers.CharField()
    when = serializers.CharField()


@follows(wire.FamilyRun)
class FamilyRunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    replay_of = serializers.IntegerField(allow_null=True)
    status = serializers.CharField()
    strategy = serializers.CharField()
    answer = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    error = serializers.CharField()
    edits = EditOutputSerializer(many=True)
    totals = TotalsOutputSerializer()
    created_by = serializers.CharField(allow_null=True)
    created_at = serializers.CharField(allow_null=True)


@follows(wire.Family)
class FamilyOutputSerializer(serializers.Serializer):
    root = serializers.IntegerField()
    runs = FamilyRunOutputSerializer(many=True)


class RunFamilyApi(APIView):
    """A run's family: the root source and every replay of it or of its replays, oldest first,
    each with its edits, status, score, tokens and cost."""

    @extend_schema(operation_id="runs_family", responses=FamilyOutputSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        return Response(selectors.run_family(run=run))
