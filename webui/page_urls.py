"""Page routes."""

from django.urls import path

import webui.converters  # noqa: F401  (registers the <id:...> path converter)
from webui import (
    account,
    analytics,
    batches,
    experiment_pages,
    pool_pages,
    projects,
    review,
    views,
)

urlpatterns = [
    path("", views.runs_list, name="runs"),
    path("runs/changes/", views.runs_list_changes, name="runs-changes"),
    path("runs/<id:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<id:run_id>/family/", views.run_family, name="run-family"),
    path("compare/", views.runs_compare, name="runs-compare"),
    path("batches/", batches.batch_list, name="batch-list"),
    path("batches/new/", batches.batch_new, name="batch-new"),
    path("batches/<id:batch_id>/", batches.batch_detail, name="batch-detail"),
    path("account/", account.account, name="account"),
    path("datasets/", experiment_pages.datasets_page, name="datasets"),
    path("datasets/suite/", experiment_pages.dataset_suite_view, name="dataset-suite"),
    path("datasets/<id:dataset_id>/", experiment_pages.dataset_detail, name="dataset-detail"),
    path("experiments/", experiment_pages.experiments_page, name="experiments"),
    path(
        "experiments/<id:experiment_id>/",
        experiment_pages.experiment_detail,
        name="experiment-detail",
    ),
    path(
        "account/keys/<id:key_id>/revoke/", account.api_key_revoke_view, name="account-key-revoke"
    ),
    path("pools/", pool_pages.pools_list, name="pools"),
    path("pools/new/", pool_pages.pool_new, name="pool-new"),
    path("pools/<id:pool_id>/", pool_pages.pool_detail, name="pool-detail"),
    path("projects/switch/", projects.project_switch, name="project-switch"),
    path("projects/<slug:slug>/members/", projects.members, name="project-members"),
    path(
        "projects/<slug:slug>/members/<id:membership_id>/role/",
        projects.member_role,
        name="project-member-role",
    ),
    path(
        "projects/<slug:slug>/members/<id:membership_id>/remove/",
        projects.member_remove,
        name="project-member-remove",
    ),
    path("audit/", projects.audit, name="audit"),
    path("audit/export.csv", projects.audit_export, name="audit-export"),
    path("review/", review.review_queue, name="review-queue"),
    path("review/insights/", review.review_insights, name="review-insights"),
    path("analytics/", analytics.analytics_page, name="analytics"),
]
