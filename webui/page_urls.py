"""Page routes."""

from django.urls import path

from webui import account, views

urlpatterns = [
    path("", views.runs_list, name="runs"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("account/", account.account, name="account"),
    path("account/keys/<int:key_id>/revoke/", account.api_key_revoke_view, name="account-key-revoke"),
]
