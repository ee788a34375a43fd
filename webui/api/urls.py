"""REST API routes, under /api/."""

from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

import webui.converters  # noqa: F401  (registers the <id:...> path converter)
from webui.api.batches import BatchDetailApi, BatchListCreateApi
from webui.api.exports import TrajectoryExportApi
from webui.api.keys import ApiKeyListCreateApi, ApiKeyRevokeApi
from webui.api.pools import PoolListApi
from webui.api.runs import RunCancelApi, RunDetailApi, RunGraphApi, RunListCreateApi
from webui.api.steps import StepDetailApi


@csrf_exempt  # it changes nothing, and a POST must get the 404 too, not a CSRF page
def api_not_found(request: HttpRequest) -> JsonResponse:
    """Any other path under /api/ (an id past the integer range, a typo): a 404 in the API's own
    form, not the site's HTML page. Only paths ending in "/", so APPEND_SLASH still applies."""
    return JsonResponse({"detail": "Not found."}, status=404)


urlpatterns = [
    path("runs/", RunListCreateApi.as_view(), name="api-run-list"),
    path("runs/<id:run_id>/", RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<id:run_id>/graph/", RunGraphApi.as_view(), name="api-run-graph"),
    path("runs/<id:run_id>/cancel/", RunCancelApi.as_view(), name="api-run-cancel"),
    path("steps/<id:step_id>/", StepDetailApi.as_view(), name="api-step-detail"),
    path("pools/", PoolListApi.as_view(), name="api-pool-list"),
    path("keys/", ApiKeyListCreateApi.as_view(), name="api-key-list"),
    path("keys/<id:key_id>/revoke/", ApiKeyRevokeApi.as_view(), name="api-key-revoke"),
    path(
        "export/trajectories.jsonl", TrajectoryExportApi.as_view(), name="api-export-trajectories"
    ),
    path("batches/", BatchListCreateApi.as_view(), name="api-batch-list"),
    path("batches/<id:batch_id>/", BatchDetailApi.as_view(), name="api-batch-detail"),
    # Last: anything else under /api/ is the API's own 404.
    re_path(r"^.*/$", api_not_found),
]
