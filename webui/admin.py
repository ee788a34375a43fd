"""Django admin for every stored model. Keys never appear: workers and pools store only the
*name* of the environment variable that holds a key. Runs, plans, steps and events are
written by services, so they are read-only here."""

from __future__ import annotations

from typing import ClassVar

from django import forms
from django.contrib import admin
from django.db import models
from django.forms.fields import InvalidJSONInput

from orchestrator import selectors
from orchestrator.models import (
    ApiKey,
    AuditEntry,
    Membership,
    Plan,
    Pool,
    Project,
    Run,
    RunEvent,
    Step,
    Worker,
)
from orchestrator.services.api_keys import api_key_revoke
from webui.api.parsers import MAX_JSON_DEPTH, too_deep_in


class BoundedJSONFormField(forms.JSONField):
    """A JSON form field that refuses deep nesting before decoding it: Python's json decoder
    recurses per level and fails with RecursionError (a 500) on a few thousand."""

    default_error_messages = {"too_deep": f"Nested deeper than {MAX_JSON_DEPTH} levels."}

    def to_python(self, value):
        if isinstance(value, str) and too_deep_in(value) is not None:
            raise forms.ValidationError(self.error_messages["too_deep"], code="too_deep")
        return super().to_python(value)

    def bound_data(self, data, initial):
        if isinstance(data, str) and too_deep_in(data) is not None:
            return InvalidJSONInput(data)  # shown back as typed, with the error
        return super().bound_data(data, initial)


BOUNDED_JSON: dict = {models.JSONField: {"form_class": BoundedJSONFormField}}


def key_status(missing: list[str]) -> str:
    """What the pool pages say of a key before any run: set, or which variables are not set."""
    if not missing:
        return "set (or not needed)"
    names = ", ".join(missing)
    return f"NOT SET on this server: {names}. Steps fail at once until it is set."


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "created_at")
    search_fields = ("name", "slug")
    prepopulated_fields: ClassVar[dict[str, tuple[str, ...]]] = {"slug": ("name",)}
    inlines = (MembershipInline,)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "project", "role")
    list_filter = ("role", "project")
    search_fields = ("user__username", "project__name")
    autocomplete_fields = ("user", "project")


class WorkerInline(admin.TabularInline):
    model = Worker
    extra = 0
    formfield_overrides = BOUNDED_JSON
    fields = (
        "position",
        "name",
        "model",
        "api_base",
        "api_key_env",
        "params",
        "price_in",
        "price_out",
        "description",
        "enabled",
        "key",
    )
    readonly_fields = ("key",)

    @admin.display(description="Key")
    def key(self, worker: Worker) -> str:
        return key_status(selectors.worker_missing_keys(worker=worker)) if worker.pk else ""


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "conductor_model", "max_steps", "max_rounds", "access_mode")
    list_filter = ("project", "access_mode")
    search_fields = ("name", "description")
    inlines = (WorkerInline,)
    formfield_overrides = BOUNDED_JSON
    fieldsets = (
        (None, {"fields": ["project", "name", "description"]}),
        (
            "Conductor",
            {
                "fields": [
                    "conductor_model",
                    "conductor_api_base",
                    "conductor_api_key_env",
                    "conductor_key",
                    "conductor_params",
                    "conductor_prompt_style",
                    "conductor_output",
                    "conductor_json_dialect",
                    "plan_fallback",
                    "max_steps",
                    "max_rounds",
                    "access_mode",
                    "show_worker_names",
                ]
            },
        ),
        (
            "Limits",
            {
                "fields": [
                    "step_timeout",
                    "token_budget",
                    "cost_budget",
                    "conductor_max_tokens",
                    "worker_max_tokens",
                    "conductor_max_concurrency",
                ]
            },
        ),
    )
    readonly_fields = ("conductor_key",)

    @admin.display(description="Conductor key")
    def conductor_key(self, pool: Pool) -> str:
        return key_status(selectors.conductor_missing_keys(pool=pool)) if pool.pk else ""


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("name", "model", "pool", "position", "api_key_env", "enabled")
    list_filter = ("enabled", "pool")
    search_fields = ("name", "model")
    formfield_overrides = BOUNDED_JSON
    readonly_fields = ("key",)

    @admin.display(description="Key")
    def key(self, worker: Worker) -> str:
        return key_status(selectors.worker_missing_keys(worker=worker)) if worker.pk else ""


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class PlanInline(ReadOnlyInline):
    model = Plan
    fields = ("round", "strategy", "error", "created_at")
    readonly_fields = fields


class StepInline(ReadOnlyInline):
    model = Step
    fields = (
        "round",
        "index",
        "worker_name",
        "instruction",
        "status",
        "tokens_in",
        "tokens_out",
        "cost",
        "latency",
        "attempts",
        "error",
    )
    readonly_fields = fields


class ReadOnlyAdmin(admin.ModelAdmin):
    """Stored history: browse and delete, never edit (services write it)."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "status",
        "strategy",
        "pool",
        "short_input",
        "score",
        "step_count",
        "tokens_in",
        "tokens_out",
        "cost",
        "created_by",
        "created_at",
    )
    list_filter = ("status", "strategy", "project", "pool")
    search_fields = ("input", "answer")
    date_hierarchy = "created_at"
    list_select_related = ("pool", "created_by")
    show_full_result_count = False
    inlines = (PlanInline, StepInline)

    @admin.display(description="Input")
    def short_input(self, run: Run) -> str:
        return run.input if len(run.input) <= 80 else run.input[:79] + "…"


@admin.register(Plan)
class PlanAdmin(ReadOnlyAdmin):
    list_display = ("run", "round", "strategy", "error")
    list_filter = ("strategy",)
    list_select_related = ("run",)
    raw_id_fields = ("run",)


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = (
        "run",
        "round",
        "index",
        "worker_name",
        "status",
        "tokens_in",
        "tokens_out",
        "latency",
    )
    list_filter = ("status", "worker_name")
    search_fields = ("instruction", "response")
    list_select_related = ("run",)
    raw_id_fields = ("run", "plan", "worker", "reused_from")
    show_full_result_count = False


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "type", "created_at")
    list_filter = ("type",)
    raw_id_fields = ("run",)
    show_full_result_count = False


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Keys for /v1: who holds which, when each was last used. Only the key's first characters
    are stored in the clear; revoke with the action (the owner can, on their account page)."""

    list_display = ("prefix", "name", "user", "project", "created_at", "last_used_at", "revoked_at")
    list_filter = ("project",)
    search_fields = ("prefix", "name", "user__username")
    exclude = ("key_hash",)
    actions: ClassVar = ["revoke"]

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset) -> None:
        for api_key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(user=api_key.user, key_id=api_key.pk)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The audit log, every project's: read only, and never deleted (projects' admins read their
    own at /audit/)."""

    list_display = ("created_at", "project", "actor_name", "action", "target_type", "target_label")
    list_filter = ("action", "project")
    search_fields = ("actor_name", "action", "target_label")
    list_select_related = ("project",)
    show_full_result_count = False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
