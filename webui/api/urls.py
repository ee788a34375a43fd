"""REST API routes, under /api/."""

from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

import webui.converters  # noqa: F401  (registers the <id:...> path converter)
from webui.api.batches import BatchDetailApi, BatchListCreateApi
from webui.api.compare import CompareApi
from webui.api.datasets import (
    DatasetDetailApi,
    DatasetExportApi,
    DatasetItemFromRunApi,
    DatasetListCreateApi,
    DatasetSuiteApi,
)
from webui.api.experiments import (
    ExperimentCancelApi,
    ExperimentDetailApi,
    ExperimentHeadToHeadApi,
    ExperimentListCreateApi,
    ExperimentProgressApi,
    ExperimentResumeApi,
    ExperimentRunsApi,
)
from webui.api.exports import RunCsvExportApi, RunJsonlExportApi, TrajectoryExportApi
from webui.api.keys import ApiKeyListCreateApi, ApiKeyRevokeApi
from webui.api.pools import (
    ConductorConnectionTestApi,
    PoolDetailApi,
    PoolListCreateApi,
    PoolUsageApi,
    WorkerConnectionTestApi,
    WorkerCreateApi,
    WorkerDetailApi,
    WorkerDisableApi,
    WorkerReorderApi,
)
from webui.api.projects import (
    AuditExportApi,
    AuditListApi,
    MemberDetailApi,
    MemberListCreateApi,
    ProjectListApi,
)
from webui.api.replays import RunFamilyApi, RunReplayCreateApi
from webui.api.review import (
    CommentDetailApi,
    FailureKindDetailApi,
    FailureKindListCreateApi,
    ReviewInsightsApi,
    ReviewQueueApi,
    RunAssignApi,
    RunCommentListCreateApi,
    RunFlagApi,
    RunLabelAddApi,
    RunLabelRemoveApi,
    RunResolutionApi,
    RunReviewApi,
    RunScoreApi,
)
from webui.api.runs import (
    RunCancelApi,
    RunDetailApi,
    RunGraphApi,
    RunListChangesApi,
    RunListCreateApi,
    RunStepsApi,
)
from webui.api.steps import StepDetailApi


@csrf_exempt  # it changes nothing, and a POST must get the 404 too, not a CSRF page
def api_not_found(request: HttpRequest) -> JsonResponse:
    """Any other path under /api/ (an id past the integer range, a typo): a 404 in the API's own
    form, not the site's HTML page. Only paths ending in "/", so APPEND_SLASH still applies."""
    return JsonResponse({"detail": "Not found."}, status=404)


urlpatterns = [
    path("runs/", RunListCreateApi.as_view(), name="api-run-list"),
    path("runs/changes/", RunListChangesApi.as_view(), name="api-run-changes"),
    path("runs/export.csv", RunCsvExportApi.as_view(), name="api-run-export-csv"),
    path("runs/export.jsonl", RunJsonlExportApi.as_view(), name="api-run-export-jsonl"),
    path("runs/<id:run_id>/", RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<id:run_id>/graph/", RunGraphApi.as_view(), name="api-run-graph"),
    path("runs/<id:run_id>/steps/", RunStepsApi.as_view(), name="api-run-steps"),
    path("runs/<id:run_id>/cancel/", RunCancelApi.as_view(), name="api-run-cancel"),
    path("steps/<id:step_id>/", StepDetailApi.as_view(), name="api-step-detail"),
    path("runs/<id:run_id>/replays/", RunReplayCreateApi.as_view(), name="api-run-replays"),
    path("runs/<id:run_id>/family/", RunFamilyApi.as_view(), name="api-run-family"),
    path("pools/", PoolListCreateApi.as_view(), name="api-pool-list"),
    path("keys/", ApiKeyListCreateApi.as_view(), name="api-key-list"),
    path("keys/<id:key_id>/revoke/", ApiKeyRevokeApi.as_view(), name="api-key-revoke"),
    path(
        "export/trajectories.jsonl", TrajectoryExportApi.as_view(), name="api-export-trajectories"
    ),
    path("compare/", CompareApi.as_view(), name="api-compare"),
    path("datasets/", DatasetListCreateApi.as_view(), name="api-dataset-list"),
    path("datasets/suite/", DatasetSuiteApi.as_view(), name="api-dataset-suite"),
    path("datasets/<id:dataset_id>/", DatasetDetailApi.as_view(), name="api-dataset-detail"),
    path("datasets/<id:dataset_id>/export/", DatasetExportApi.as_view(), name="api-dataset-export"),
    path(
        "datasets/<id:dataset_id>/items/",
        DatasetItemFromRunApi.as_view(),
        name="api-dataset-add-item",
    ),
    path("experiments/", ExperimentListCreateApi.as_view(), name="api-experiment-list"),
    path(
        "experiments/<id:experiment_id>/",
        ExperimentDetailApi.as_view(),
        name="api-experiment-detail",
    ),
    path(
        "experiments/<id:experiment_id>/progress/",
        ExperimentProgressApi.as_view(),
        name="api-experiment-progress",
    ),
    path(
        "experiments/<id:experiment_id>/cancel/",
        ExperimentCancelApi.as_view(),
        name="api-experiment-cancel",
    ),
    path(
        "experiments/<id:experiment_id>/resume/",
        ExperimentResumeApi.as_view(),
        name="api-experiment-resume",
    ),
    path(
        "experiments/<id:experiment_id>/runs/",
        ExperimentRunsApi.as_view(),
        name="api-experiment-runs",
    ),
    path(
        "experiments/<id:experiment_id>/head-to-head/",
        ExperimentHeadToHeadApi.as_view(),
        name="api-experiment-head-to-head",
    ),
    # Pools, workers, members, audit.
    path("pools/<id:pool_id>/", PoolDetailApi.as_view(), name="api-pool-detail"),
    path("pools/<id:pool_id>/usage/", PoolUsageApi.as_view(), name="api-pool-usage"),
    path(
        "pools/<id:pool_id>/test-connection/",
        ConductorConnectionTestApi.as_view(),
        name="api-pool-test-connection",
    ),
    path("pools/<id:pool_id>/workers/", WorkerCreateApi.as_view(), name="api-worker-create"),
    path(
        "pools/<id:pool_id>/workers/reorder/",
        WorkerReorderApi.as_view(),
        name="api-worker-reorder",
    ),
    path(
        "pools/<id:pool_id>/workers/<id:worker_id>/",
        WorkerDetailApi.as_view(),
        name="api-worker-detail",
    ),
    path(
        "pools/<id:pool_id>/workers/<id:worker_id>/disable/",
        WorkerDisableApi.as_view(),
        name="api-worker-disable",
    ),
    path(
        "pools/<id:pool_id>/workers/<id:worker_id>/test-connection/",
        WorkerConnectionTestApi.as_view(),
        name="api-worker-test-connection",
    ),
    path("projects/", ProjectListApi.as_view(), name="api-project-list"),
    path(
        "projects/<str:project_slug>/members/",
        MemberListCreateApi.as_view(),
        name="api-member-list",
    ),
    path(
        "projects/<str:project_slug>/members/<id:membership_id>/",
        MemberDetailApi.as_view(),
        name="api-member-detail",
    ),
    path("projects/<str:project_slug>/audit/", AuditListApi.as_view(), name="api-audit-list"),
    path(
        "projects/<str:project_slug>/audit/export.csv",
        AuditExportApi.as_view(),
        name="api-audit-export",
    ),
    # Review
    path("runs/<id:run_id>/review/", RunReviewApi.as_view(), name="api-run-review"),
    path("runs/<id:run_id>/comments/", RunCommentListCreateApi.as_view(), name="api-run-comments"),
    path("comments/<id:comment_id>/", CommentDetailApi.as_view(), name="api-comment-detail"),
    path("runs/<id:run_id>/labels/", RunLabelAddApi.as_view(), name="api-run-labels"),
    path(
        "runs/<id:run_id>/labels/<id:kind_id>/",
        RunLabelRemoveApi.as_view(),
        name="api-run-label-remove",
    ),
    path("runs/<id:run_id>/assignee/", RunAssignApi.as_view(), name="api-run-assignee"),
    path("runs/<id:run_id>/score/", RunScoreApi.as_view(), name="api-run-score"),
    path("runs/<id:run_id>/flag/", RunFlagApi.as_view(), name="api-run-flag"),
    path("runs/<id:run_id>/resolution/", RunResolutionApi.as_view(), name="api-run-resolution"),
    path("review/queue/", ReviewQueueApi.as_view(), name="api-review-queue"),
    path("review/insights/", ReviewInsightsApi.as_view(), name="api-review-insights"),
    path("failure-kinds/", FailureKindListCreateApi.as_view(), name="api-failure-kinds"),
    path("failure-kinds/<id:kind_id>/", FailureKindDetailApi.as_view(), name="api-failure-kind"),
    path("batches/", BatchListCreateApi.as_view(), name="api-batch-list"),
    path("batches/<id:batch_id>/", BatchDetailApi.as_view(), name="api-batch-detail"),
    # Last: anything else under /api/ is the API's own 404.
    re_path(r"^[\s\S]*/$", api_not_found),
]
