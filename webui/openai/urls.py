"""OpenAI-compatible routes, under /v1/."""

from django.urls import path, re_path

from webui.openai import views

urlpatterns = [
    path("models", views.models_list, name="v1-models"),
    path("models/<path:model>", views.model_detail, name="v1-model"),
    path("chat/completions", views.chat_completions, name="v1-chat-completions"),
    re_path(r"^[\s\S]*$", views.unknown_route, name="v1-unknown"),
]
