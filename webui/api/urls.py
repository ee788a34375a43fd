"""REST API routes, under /api/."""

from django.urls import path

from webui.api.exports import TrajectoryExportApi
from webui.api.keys import ApiKeyListCreateApi, ApiKeyRevokeApi
from webui.api.pools import PoolListApi
from webui.api.runs import RunCancelApi, RunDetailApi, RunGraphApi, RunListCreateApi
from webui.api.steps import StepDetailApi

urlpatterns = [
    path("runs/", RunListCreateApi.as_view(), name="api-run-list"),
    path("runs/<int:run_id>/", RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<int:run_id>/graph/", RunGraphApi.as_view(), name="api-run-graph"),
    path("runs/<int:run_id>/cancel/", RunCancelApi.as_view(), name="api-run-cancel"),
    path("steps/<int:step_id>/", StepDetailApi.as_view(), name="api-step-detail"),
    path("pools/", PoolListApi.as_view(), name="api-pool-list"),
    path("keys/", ApiKeyListCreateApi.as_view(), name="api-key-list"),
    path("keys/<int:key_id>/revoke/", ApiKeyRevokeApi.as_view(), name="api-key-revoke"),
    path(
        "export/trajectories.jsonl", TrajectoryExportApi.as_view(), name="api-export-trajectories"
    ),
]
