"""Page routes."""

from django.urls import path

import webui.converters  # noqa: F401  (registers the <id:...> path converter)
from webui import account, views

urlpatterns = [
    path("", views.runs_list, name="runs"),
    path("runs/<id:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<id:run_id>/family/", views.run_family, name="run-family"),
    path("compare/", views.runs_compare, name="runs-compare"),
    path("account/", account.account, name="account"),
    path(
        "account/keys/<id:key_id>/revoke/", account.api_key_revoke_view, name="account-key-revoke"
    ),
]
