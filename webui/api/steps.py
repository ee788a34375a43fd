"""Step endpoint: one step with the exact messages it was sent and its response."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors
from webui.api.serializers import StepDetailOutputSerializer


class StepDetailApi(APIView):
    """One step of a run in one of the user's projects."""

    @extend_schema(operation_id="steps_retrieve", responses=StepDetailOutputSerializer)
    def get(self, request: Request, step_id: int) -> Response:
        step = selectors.step_get(user=request.user, step_id=step_id)
        if step is None:
            raise Http404("No such step.")
        return Response(StepDetailOutputSerializer(step).data)
