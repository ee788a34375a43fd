"""Step endpoint: one step with the exact messages it was sent and its response."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webui.api.lookups import step_or_404
from webui.api.serializers import StepDetailOutputSerializer


class StepDetailApi(APIView):
    """One step of a run in one of the user's projects."""

    @extend_schema(operation_id="steps_retrieve", responses=StepDetailOutputSerializer)
    def get(self, request: Request, step_id: int) -> Response:
        step = step_or_404(request=request, step_id=step_id)
        return Response(StepDetailOutputSerializer(step).data)
