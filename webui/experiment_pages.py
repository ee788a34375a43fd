"""Pages for datasets and experiments: the datasets list (import, the bundled suite), a dataset
(its items, its experiments, a new experiment), and an experiment's scoreboard. Thin: validate,
call one service or selector, render or redirect. The scoreboard page draws itself from the API
(``static/js/experiment.js``)."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator import selectors, wire
from orchestrator.models import Project
from orchestrator.services.datasets import (
    MAX_NAME_LENGTH,
    dataset_ensure_suite,
    dataset_import,
    dataset_max_bytes,
    format_for_filename,
)
from orchestrator.services.experiments import experiment_create, parse_arms

ITEMS_SHOWN = 100
DEFAULT_ARMS = "conductor,single:0,reflection,moa"


def _runnable_projects(user) -> list[Project]:
    return selectors.projects_with_role(user=user, roles=selectors.ROLES_THAT_RUN)


class DatasetImportForm(forms.Form):
    project = forms.TypedChoiceField(coerce=int)
    name = forms.CharField(max_length=MAX_NAME_LENGTH)
    file = forms.FileField(help_text="JSONL or CSV: input, reference, grader, tags.")

    def __init__(self, *args, projects: list[Project], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [(p.pk, p.name) for p in projects]


class ExperimentForm(forms.Form):
    pool = forms.TypedChoiceField(coerce=int)
    arms = forms.CharField(
        max_length=400,
        initial=DEFAULT_ARMS,
        help_text="Comma-separated strategy[:worker]: conductor, single:0, reflection:2, moa:2.",
    )
    sample = forms.IntegerField(required=False, min_value=1, help_text="Empty: every item.")
    seed = forms.IntegerField(required=False, min_value=0, initial=0)

    def __init__(self, *args, pools, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].choices = [(p.pk, p.name) for p in pools]


def _form_errors(form: forms.Form, error: ValidationError) -> None:
    for field, messages in getattr(error, "message_dict", {"__all__": error.messages}).items():
        form.add_error(field if field in form.fields else None, messages)


@login_required
def datasets_page(request: HttpRequest) -> HttpResponse:
    """``/datasets/``: the datasets of the user's projects; import a file; add the suite."""
    projects = _runnable_projects(request.user)
    form = DatasetImportForm(projects=projects)
    if request.method == "POST":
        form = DatasetImportForm(request.POST, request.FILES, projects=projects)
        if form.is_valid():
            upload = form.cleaned_data["file"]
            format = format_for_filename(upload.name) or request.POST.get("format", "")
            try:
                if upload.size > dataset_max_bytes():
                    raise ValidationError(
                        {
                            "file": [
                                f"Too large: {upload.size:,} bytes; the limit is "
                                f"{dataset_max_bytes():,} bytes."
                            ]
                        }
                    )
                dataset = dataset_import(
                    project=selectors.project_for(
                        user=request.user, project=int(form.cleaned_data["project"])
                    ),
                    name=form.cleaned_data["name"],
                    content=upload.read(),
                    format=format if format in ("jsonl", "csv") else "jsonl",
                    created_by=request.user,
                )
            except ValidationError as error:
                _form_errors(form, error)
            except PermissionDenied as error:
                form.add_error(None, str(error))
            else:
                return redirect("dataset-detail", dataset_id=dataset.pk)
    datasets = selectors.dataset_list(user=request.user)
    has_suite = {d.project_id for d in datasets if d.builtin}
    context = {
        "datasets": datasets,
        "form": form,
        "projects_without_suite": [p for p in projects if p.pk not in has_suite],
        "max_bytes": dataset_max_bytes(),
    }
    return render(request, "datasets/list.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def dataset_suite_view(request: HttpRequest) -> HttpResponse:
    """Add the bundled suite to one of the user's projects (admins and reviewers)."""
    projects = {p.pk: p for p in _runnable_projects(request.user)}
    try:
        project = projects[int(request.POST.get("project", ""))]
    except (KeyError, ValueError) as error:
        raise Http404("No such project of yours.") from error
    dataset = dataset_ensure_suite(project=project, created_by=request.user)
    return redirect("dataset-detail", dataset_id=dataset.pk)


@login_required
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """``/datasets/<id>/``: its items, its experiments, and a form to start one."""
    dataset = selectors.dataset_get(user=request.user, dataset_id=dataset_id)
    if dataset is None:
        raise Http404(f"No dataset {dataset_id} in your projects.")
    can_run = selectors.user_can_run(user=request.user, project=dataset.project_id)
    pools = [
        p for p in selectors.pools_for(user=request.user) if p.project_id == dataset.project_id
    ]
    form = ExperimentForm(
        pools=pools, initial={"pool": next((p.pk for p in pools if p.is_simulated), None)}
    )
    if request.method == "POST" and can_run:
        form = ExperimentForm(request.POST, pools=pools)
        if form.is_valid():
            pool = next(p for p in pools if p.pk == form.cleaned_data["pool"])
            try:
                experiment = experiment_create(
                    dataset=dataset,
                    arms=parse_arms(form.cleaned_data["arms"], pool=pool),
                    sample=form.cleaned_data["sample"],
                    seed=form.cleaned_data["seed"] or 0,
                    created_by=request.user,
                )
            except ValidationError as error:
                _form_errors(form, error)
            except PermissionDenied as error:
                form.add_error(None, str(error))
            else:
                return redirect("experiment-detail", experiment_id=experiment.pk)
    context = {
        "dataset": dataset,
        "items": selectors.dataset_items(dataset=dataset, limit=ITEMS_SHOWN),
        "items_shown": ITEMS_SHOWN,
        "experiments": selectors.experiment_list(user=request.user, dataset=dataset)[:50],
        "form": form,
        "can_run": can_run,
    }
    return render(request, "datasets/detail.html", context, status=400 if form.errors else 200)


EXPERIMENTS_SHOWN = 200


@login_required
def experiments_page(request: HttpRequest) -> HttpResponse:
    """``/experiments/``: the experiments of the user's projects, newest first, with their
    dataset, status and progress; a new one starts from its dataset's page."""
    experiments = list(selectors.experiment_list(user=request.user)[: EXPERIMENTS_SHOWN + 1])
    context = {
        "experiments": experiments[:EXPERIMENTS_SHOWN],
        "more": len(experiments) > EXPERIMENTS_SHOWN,
        "shown": EXPERIMENTS_SHOWN,
    }
    return render(request, "experiments/list.html", context)


@login_required
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """``/experiments/<id>/``: progress (polled), the scoreboard, the chart, head to head."""
    experiment = selectors.experiment_get(user=request.user, experiment_id=experiment_id)
    if experiment is None:
        raise Http404(f"No experiment {experiment_id} in your projects.")
    context = {
        "experiment": experiment,
        "arms": selectors.experiment_arms(experiment=experiment),
        "can_run": selectors.user_can_run(user=request.user, project=experiment.project_id),
        "constants": wire.experiment_page_constants(),
    }
    return render(request, "experiments/detail.html", context)
