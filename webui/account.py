"""The account page: a user's API keys for /v1 (create, shown once; revoke; last used)."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from orchestrator import selectors
from orchestrator.models import ApiKey, Project
from orchestrator.services.api_keys import api_key_create, api_key_revoke
from orchestrator.services.chat import model_ids


class ApiKeyForm(forms.Form):
    project = forms.TypedChoiceField(coerce=int)
    name = forms.CharField(max_length=100, required=False, strip=True)

    def __init__(self, *args, projects: list[Project], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [(p.pk, p.name) for p in projects]


def _key_projects(user) -> list[Project]:
    """The projects where the user may start runs, so may hold keys."""
    return selectors.projects_with_role(user=user, roles=selectors.ROLES_THAT_RUN)


def _page(
    request: HttpRequest,
    *,
    form: ApiKeyForm,
    new_key: str = "",
    new_key_models=(),
    status: int = 200,
) -> HttpResponse:
    context = {
        "keys": list(selectors.api_keys_of(user=request.user)),
        "form": form,
        "new_key": new_key,
        "new_key_models": list(new_key_models),
        "v1_base": request.build_absolute_uri("/v1"),
    }
    return render(request, "account.html", context, status=status)


@never_cache
@login_required
def account(request: HttpRequest) -> HttpResponse:
    """``/account/``: your API keys. Posting the form creates one and shows it, this once."""
    projects = _key_projects(request.user)
    if request.method != "POST":
        return _page(request, form=ApiKeyForm(projects=projects))
    form = ApiKeyForm(request.POST, projects=projects)
    if not form.is_valid():
        return _page(request, form=form, status=400)
    project = next(p for p in projects if p.pk == form.cleaned_data["project"])
    try:
        api_key, key = api_key_create(
            user=request.user, project=project, name=form.cleaned_data["name"]
        )
    except (PermissionDenied, ValidationError) as error:
        form.add_error(None, " ".join(getattr(error, "messages", [str(error)])))
        return _page(request, form=form, status=400)
    models = [m for pool in selectors.api_pools(project=project) for m in model_ids(pool)]
    # The key is in this response only: not in a redirect URL, the session or a log.
    return _page(
        request,
        form=ApiKeyForm(projects=projects),
        new_key=key,
        new_key_models=models[:8],
        status=201,
    )


@login_required
@require_POST
def api_key_revoke_view(request: HttpRequest, key_id: int) -> HttpResponse:
    try:
        api_key_revoke(user=request.user, key_id=key_id)
    except ApiKey.DoesNotExist:
        raise Http404("No such key of yours.") from None
    return redirect("account")
