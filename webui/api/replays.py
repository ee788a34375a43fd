"""Replay endpoints: replay a run with edits, and a run's family (its source and replays).

Views validate, call one service or selector, and serialize; the rules live in
``orchestrator/services/replay.py`` and ``orchestrator/selectors.py``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors, wire
from orchestrator.models import Membership
from orchestrator.services.replay import MAX_EDITS, replay_create
from webui.api.inputs import InputSerializer
from webui.api.lookups import visible_run_or_404
from webui.api.serializers import (
    RunDetailOutputSerializer,
    TextField,
    TotalsOutputSerializer,
    WholeNumberField,
    follows,
)
from webui.converters import MAX_ID


class EditInputSerializer(InputSerializer):
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

    class ReplayInputSerializer(InputSerializer):
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
        request=ReplayInputSerializer,
        responses={201: RunDetailOutputSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        source = visible_run_or_404(request=request, run_id=run_id)
        if selectors.user_role(user=request.user, project=source.project_id) != (
            Membership.Role.ADMIN
        ):
            self.permission_denied(request, message="Only admins of the project may replay runs.")
        payload = self.ReplayInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data: dict[str, Any] = payload.validated_data
        run = replay_create(
            source=source,
            actor=request.user,
            edits=[dict(edit) for edit in data["edits"]],
            replan_from=data["replan_from"],
            fresh=data["fresh"],
        )
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
