"""REST API routes, under /api/."""

from django.urls import path

import webui.converters  # noqa: F401  (registers the <id:...> path converter)
from webui.api.pools import PoolListApi
from webui.api.runs import RunCancelApi, RunDetailApi, RunGraphApi, RunListCreateApi
from webui.api.steps import StepDetailApi

urlpatterns = [
    path("runs/", RunListCreateApi.as_view(), name="api-run-list"),
    path("runs/<id:run_id>/", RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<id:run_id>/graph/", RunGraphApi.as_view(), name="api-run-graph"),
    path("runs/<id:run_id>/cancel/", RunCancelApi.as_view(), name="api-run-cancel"),
    path("steps/<id:step_id>/", StepDetailApi.as_view(), name="api-step-detail"),
    path("pools/", PoolListApi.as_view(), name="api-pool-list"),
]
