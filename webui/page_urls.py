"""Page routes."""

from django.urls import path

from webui import views

urlpatterns = [
    path("", views.runs_list, name="runs"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
]
