"""Page routes."""

from django.urls import path

import webui.converters  # noqa: F401  (registers the <id:...> path converter)
from webui import account, pool_pages, projects, views

urlpatterns = [
    path("", views.runs_list, name="runs"),
    path("runs/<id:run_id>/", views.run_detail, name="run-detail"),
    path("account/", account.account, name="account"),
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
]
