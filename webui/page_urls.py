"""Page routes."""

from django.urls import path

import webui.converters  # noqa: F401  (registers the <id:...> path converter)
from webui import account, batches, views

urlpatterns = [
    path("", views.runs_list, name="runs"),
    path("runs/<id:run_id>/", views.run_detail, name="run-detail"),
    path("batches/", batches.batch_list, name="batch-list"),
    path("batches/new/", batches.batch_new, name="batch-new"),
    path("batches/<id:batch_id>/", batches.batch_detail, name="batch-detail"),
    path("account/", account.account, name="account"),
    path(
        "account/keys/<id:key_id>/revoke/", account.api_key_revoke_view, name="account-key-revoke"
    ),
]
