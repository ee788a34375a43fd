"""The pools pages: a project's pools, and one page per pool where its admins edit the pool and
its workers in one form (a table of workers: add, reorder, disable, remove) and test each
connection. Members who are not admins see the same page read-only; anyone else gets a 404.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from orchestrator import selectors
from orchestrator.models import Membership, Pool, Project
from orchestrator.services.pools import (
    MAX_CONCURRENCY,
    MAX_COST_BUDGET,
    MAX_DESCRIPTION_CHARS,
    MAX_OUTPUT_TOKENS,
    MAX_POOL_ROUNDS,
    MAX_PRICE,
    MAX_STEP_TIMEOUT,
    MAX_STEPS,
    MAX_TOKEN_BUDGET,
    MAX_WORKERS_PER_POOL,
    pool_save,
)
from webui.api.parsers import too_deep_in
from webui.projects import current_project


class ParamsField(forms.JSONField):
    """Call parameters typed as JSON: an object (empty means {}), nesting refused before
    decoding; the service checks size and content."""

    def __init__(self, **kwargs: Any):
        super().__init__(required=False, widget=forms.Textarea(attrs={"rows": 1}), **kwargs)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and too_deep_in(value) is not None:
            raise ValidationError("Nested too deeply.")
        value = super().to_python(value)
        return {} if value in (None, "") else value


class PoolForm(forms.Form):
    name = forms.CharField(max_length=100)
    description = forms.CharField(
        required=False, max_length=MAX_DESCRIPTION_CHARS, widget=forms.Textarea(attrs={"rows": 2})
    )
    conductor_model = forms.CharField(
        max_length=200, initial="sim/conductor", help_text="litellm model string, or sim/conductor."
    )
    conductor_api_base = forms.CharField(max_length=300, required=False, label="Conductor API base")
    conductor_api_key_env = forms.CharField(
        max_length=100,
        required=False,
        label="Conductor key variable",
        help_text="The name of the environment variable that holds the key, never the key.",
    )
    conductor_params = ParamsField(label="Conductor parameters (JSON)")
    conductor_prompt_style = forms.ChoiceField(
        choices=Pool._meta.get_field("conductor_prompt_style").choices,
        initial="full",
        label="Conductor prompt",
        help_text=Pool._meta.get_field("conductor_prompt_style").help_text,
    )
    conductor_output = forms.ChoiceField(
        choices=Pool._meta.get_field("conductor_output").choices,
        initial="text",
        label="Conductor output",
        help_text=Pool._meta.get_field("conductor_output").help_text,
    )
    conductor_json_dialect = forms.ChoiceField(
        choices=Pool._meta.get_field("conductor_json_dialect").choices,
        initial="auto",
        label="JSON dialect",
        help_text=Pool._meta.get_field("conductor_json_dialect").help_text,
    )
    plan_fallback = forms.ChoiceField(
        choices=Pool._meta.get_field("plan_fallback").choices,
        initial="fail",
        label="Unusable plan",
        help_text=Pool._meta.get_field("plan_fallback").help_text,
    )
    max_steps = forms.IntegerField(
        min_value=1, max_value=MAX_STEPS, initial=5, label="Max steps per round"
    )
    max_rounds = forms.IntegerField(min_value=1, max_value=MAX_POOL_ROUNDS, initial=2)
    access_mode = forms.ChoiceField(choices=Pool.AccessMode.choices, initial=Pool.AccessMode.FINE)
    show_worker_names = forms.BooleanField(
        required=False, initial=True, label="Show worker names to the conductor"
    )
    step_timeout = forms.FloatField(
        min_value=0.1, max_value=MAX_STEP_TIMEOUT, initial=120.0, label="Step timeout (s)"
    )
    token_budget = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TOKEN_BUDGET,
        initial=200_000,
        help_text="Empty: no limit.",
    )
    cost_budget = forms.FloatField(
        required=False, min_value=0, max_value=MAX_COST_BUDGET, initial=2.0, label="Cost budget ($)",
        help_text="Empty: no limit.",
    )  # fmt: skip
    conductor_max_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_OUTPUT_TOKENS, initial=Pool._meta.get_field("worker_max_tokens").default,
        label="Conductor max tokens",
        help_text="Output tokens per conductor call unless its parameters set max_tokens. "
        "Empty: no bound.",
    )  # fmt: skip
    conductor_max_concurrency = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CONCURRENCY, label="Conductor calls at once",
        help_text="Over every process that executes runs; the others wait their turn. "
        "Empty: no bound.",
    )  # fmt: skip
    worker_max_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_OUTPUT_TOKENS, initial=Pool._meta.get_field("worker_max_tokens").default,
        label="Worker max tokens",
        help_text="Output tokens per worker call unless the worker or its parameters say. "
        "Empty: no bound.",
    )  # fmt: skip


class WorkerForm(forms.Form):
    id = forms.IntegerField(required=False, widget=forms.HiddenInput)
    name = forms.CharField(max_length=100)
    model = forms.CharField(max_length=200)
    api_base = forms.CharField(max_length=300, required=False)
    api_key_env = forms.CharField(max_length=100, required=False)
    params = ParamsField()
    price_in = forms.FloatField(min_value=0, max_value=MAX_PRICE, initial=0.0)
    price_out = forms.FloatField(min_value=0, max_value=MAX_PRICE, initial=0.0)
    description = forms.CharField(
        max_length=MAX_DESCRIPTION_CHARS, widget=forms.Textarea(attrs={"rows": 1})
    )
    enabled = forms.BooleanField(required=False, initial=True)
    max_tokens = forms.IntegerField(required=False, min_value=1, max_value=MAX_OUTPUT_TOKENS)
    max_concurrency = forms.IntegerField(required=False, min_value=1, max_value=MAX_CONCURRENCY)


WorkerFormSet = forms.formset_factory(
    WorkerForm,
    extra=0,
    can_order=True,
    can_delete=True,
    max_num=MAX_WORKERS_PER_POOL,
    absolute_max=MAX_WORKERS_PER_POOL,
    validate_max=True,
)


def _pool_initial(pool: Pool) -> dict[str, Any]:
    return {name: getattr(pool, name) for name in PoolForm.base_fields}


def _worker_initial(pool: Pool) -> list[dict[str, Any]]:
    return [
        {
            "id": w.pk,
            "ORDER": i + 1,
            **{n: getattr(w, n) for n in WorkerForm.base_fields if n != "id"},
        }
        for i, w in enumerate(pool.all_workers)
    ]


def _apply_errors(error: ValidationError, form: PoolForm, formset, rows: list) -> None:
    """Put a service's errors next to the fields they name (``workers.<row>.<field>``)."""
    for key, messages in error.message_dict.items():
        if key.startswith("workers."):
            _, row, field = key.split(".", 2)
            target = rows[int(row)]
            target.add_error(field if field in target.fields else None, messages)
        else:
            form.add_error(key if key in form.fields else None, messages)


def _render(
    request: HttpRequest, *, project: Project, pool: Pool | None, form, formset, status=200
):
    context = {
        "project": project,
        "pool": pool,
        "form": form,
        "formset": formset,
        "can_edit": True,
        "usage": selectors.pool_usage(pool=pool) if pool else [],
        "workers": pool.all_workers if pool else [],
        "missing": _missing(pool) if pool else {},
    }
    return render(request, "pools/detail.html", context, status=status)


def _missing(pool: Pool) -> dict[str, Any]:
    """Which key variables this server lacks, for the conductor and per worker id."""
    return {
        "conductor": selectors.conductor_missing_keys(pool=pool),
        "workers": {w.pk: selectors.worker_missing_keys(worker=w) for w in pool.all_workers},
    }


def _save(request: HttpRequest, *, project: Project, pool: Pool | None) -> HttpResponse:
    form = PoolForm(request.POST)
    formset = WorkerFormSet(request.POST, prefix="workers")
    if form.is_valid() and formset.is_valid():
        rows = list(formset.ordered_forms) + [
            f for f in formset.deleted_forms if f not in formset.ordered_forms
        ]
        workers = []
        for row in rows:
            data = {k: v for k, v in row.cleaned_data.items() if k not in ("ORDER", "DELETE")}
            data["remove"] = row in formset.deleted_forms
            workers.append(data)
        try:
            saved = pool_save(
                project=project, pool=pool, actor=request.user,
                values=dict(form.cleaned_data), workers=workers,
            )  # fmt: skip
        except ValidationError as error:
            _apply_errors(error, form, formset, rows)
        else:
            return redirect("pool-detail", pool_id=saved.pk)
    return _render(request, project=project, pool=pool, form=form, formset=formset, status=400)


@login_required
def pools_list(request: HttpRequest) -> HttpResponse:
    """``/pools/``: the current project's pools, with their workers and key warnings."""
    project = current_project(request)
    pools = list(selectors.project_pools(project=project)) if project else []
    for pool in pools:
        pool.key_missing = bool(selectors.conductor_missing_keys(pool=pool)) or any(
            selectors.worker_missing_keys(worker=w) for w in pool.all_workers if w.enabled
        )
        pool.enabled_count = sum(1 for w in pool.all_workers if w.enabled)
    context = {
        "project": project,
        "pools": pools,
        "can_edit": project is not None and project.role == Membership.Role.ADMIN,
    }
    return render(request, "pools/list.html", context)


@login_required
def pool_new(request: HttpRequest) -> HttpResponse:
    """``/pools/new/``: a new pool in the current project (its admins)."""
    project = current_project(request)
    if project is None or project.role != Membership.Role.ADMIN:
        raise PermissionDenied("Only a project's admins may add pools.")
    if request.method == "POST":
        return _save(request, project=project, pool=None)
    return _render(
        request, project=project, pool=None, form=PoolForm(),
        formset=WorkerFormSet(prefix="workers"),
    )  # fmt: skip


@login_required
def pool_detail(request: HttpRequest, pool_id: int) -> HttpResponse:
    """``/pools/<id>/``: the pool, its workers and their usage; its admins edit it here."""
    pool = selectors.pool_get(user=request.user, pool_id=pool_id)
    if pool is None:
        raise Http404(f"No pool {pool_id} in your projects.")
    can_edit = pool.role == Membership.Role.ADMIN
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("Only the project's admins may change its pools.")
        return _save(request, project=pool.project, pool=pool)
    if not can_edit:
        context = {
            "project": pool.project,
            "pool": pool,
            "can_edit": False,
            "usage": selectors.pool_usage(pool=pool),
            "workers": pool.all_workers,
            "missing": _missing(pool),
        }
        return render(request, "pools/detail.html", context)
    form = PoolForm(initial=_pool_initial(pool))
    formset = WorkerFormSet(initial=_worker_initial(pool), prefix="workers")
    return _render(request, project=pool.project, pool=pool, form=form, formset=formset)
