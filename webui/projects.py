"""Projects in the site: the current project (kept in the session, switched from the nav), its
members page and its audit log page.

Project admins manage members and read the audit log; other members see the members list
read-only and get a 403 on the audit log; a project a user is not in is a 404.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from orchestrator import selectors
from orchestrator.models import Membership, Project
from orchestrator.services.members import (
    membership_change_role,
    membership_invite,
    membership_remove,
)
from webui.api.pagination import MAX_PAGE
from webui.audit_export import audit_csv_response, entry_changes

SESSION_KEY = "current_project"
AUDIT_PAGE_SIZE = 100


def chosen_project_id(request: HttpRequest) -> int | None:
    """The project the user switched to, if they did (lists then show it alone)."""
    value = request.session.get(SESSION_KEY)
    return value if isinstance(value, int) else None


def current_project(request: HttpRequest) -> Project | None:
    """The project the user works in: the one they switched to while they are still in it,
    else their first by name. ``role`` is set on it."""
    return selectors.current_project(user=request.user, project_id=chosen_project_id(request))


def project_nav(request: HttpRequest) -> dict[str, Any]:
    """Template context for the nav's project switcher, read only if a page shows it."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    projects = SimpleLazyObject(lambda: selectors.user_projects(user=request.user))

    def current_id() -> int | None:  # current_project's rule, on the projects already read
        chosen = chosen_project_id(request)
        ids = [project.pk for project in projects]
        return chosen if chosen in ids else (ids[0] if ids else None)

    return {"nav_projects": projects, "nav_project_id": SimpleLazyObject(current_id)}


def _safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    allowed = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if target and allowed else default


@login_required
@require_POST
def project_switch(request: HttpRequest) -> HttpResponse:
    """Make a project of yours the current one (a 404 for any other)."""
    project = selectors.project_for(user=request.user, project=request.POST.get("project", ""))
    if project is None:
        raise Http404("No such project of yours.")
    request.session[SESSION_KEY] = project.pk
    return redirect(_safe_next(request, "/"))


def _project_or_404(request: HttpRequest, slug: str) -> Project:
    project = selectors.project_for(user=request.user, project=slug)
    if project is None:
        raise Http404("No such project.")
    return project


def _admin_project(request: HttpRequest, slug: str) -> Project:
    project = _project_or_404(request, slug)
    if project.role != Membership.Role.ADMIN:
        raise PermissionDenied("Only the project's admins may do this.")
    return project


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.VIEWER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


def _members_page(
    request: HttpRequest, project: Project, *, form: InviteForm, error: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "project": project,
        "members": list(selectors.project_members(project=project)),
        "can_manage": project.role == Membership.Role.ADMIN,
        "form": form,
        "roles": Membership.Role.choices,
        "error": error,
    }
    return render(request, "projects/members.html", context, status=status)


def _messages(error: ValidationError) -> str:
    return " ".join(message for messages in error.message_dict.values() for message in messages)


@login_required
def members(request: HttpRequest, slug: str) -> HttpResponse:
    """``/projects/<slug>/members/``: the members and their roles; admins add existing users."""
    project = _project_or_404(request, slug)
    if request.method != "POST":
        return _members_page(request, project, form=InviteForm())
    project = _admin_project(request, slug)
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _members_page(request, project, form=form, status=400)
    try:
        membership_invite(project=project, actor=request.user, **form.cleaned_data)
    except ValidationError as error:
        for field, messages in error.message_dict.items():
            form.add_error(field if field in form.fields else None, messages)
        return _members_page(request, project, form=form, status=400)
    return redirect("project-members", slug=project.slug)


def _membership(project: Project, membership_id: int) -> Membership:
    membership = selectors.membership_get(project=project, membership_id=membership_id)
    if membership is None:
        raise Http404("No such member.")
    return membership


@login_required
@require_POST
def member_role(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    project = _admin_project(request, slug)
    membership = _membership(project, membership_id)
    form = RoleForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError({"role": ["Choose a role."]})
        membership_change_role(
            membership=membership, actor=request.user, role=form.cleaned_data["role"]
        )
    except ValidationError as error:
        return _members_page(
            request, project, form=InviteForm(), error=_messages(error), status=400
        )
    return redirect("project-members", slug=project.slug)


@login_required
@require_POST
def member_remove(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    project = _admin_project(request, slug)
    membership = _membership(project, membership_id)
    try:
        membership_remove(membership=membership, actor=request.user)
    except ValidationError as error:
        return _members_page(
            request, project, form=InviteForm(), error=_messages(error), status=400
        )
    return redirect("project-members", slug=project.slug)


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(required=False)
    actor = forms.ChoiceField(required=False)
    created_after = forms.DateField(required=False, label="From")
    created_before = forms.DateField(required=False, label="To")
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)

    def __init__(self, data: Any, *, actions: list[str], actors: list[str]):
        super().__init__(data)
        self.fields["action"].choices = [("", "Any action"), *((a, a) for a in actions)]
        self.fields["actor"].choices = [("", "Anyone"), *((a, a) for a in actors)]

    def selector_filters(self) -> dict[str, Any]:
        data = self.cleaned_data
        filters: dict[str, Any] = {k: data[k] for k in ("action", "actor") if data.get(k)}
        if data.get("created_after"):
            filters["created_after"] = _start_of_day(data["created_after"])
        if data.get("created_before") and data["created_before"] < dt.date.max:
            filters["created_before"] = _start_of_day(data["created_before"] + dt.timedelta(days=1))
        return filters


def _start_of_day(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def _audit_filters(request: HttpRequest) -> tuple[Project, AuditFilterForm]:
    project = current_project(request)
    if project is None:
        raise Http404("You are in no project.")
    if project.role != Membership.Role.ADMIN:
        raise PermissionDenied("Only the project's admins read its audit log.")
    actions, actors = selectors.audit_choices(project=project)
    form = AuditFilterForm(request.GET, actions=actions, actors=actors)
    form.is_valid()  # invalid filters are shown and left out
    return project, form


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    """``/audit/``: the current project's audit log, newest first, filtered (project admins)."""
    project, form = _audit_filters(request)
    page = form.cleaned_data.get("page") or 1
    offset = (page - 1) * AUDIT_PAGE_SIZE
    entries = list(
        selectors.audit_entries(project=project, **form.selector_filters())[
            offset : offset + AUDIT_PAGE_SIZE + 1
        ]
    )
    has_next = len(entries) > AUDIT_PAGE_SIZE
    entries = entries[:AUDIT_PAGE_SIZE]
    for entry in entries:
        entry.changes = entry_changes(entry)
    context = {
        "project": project,
        "entries": entries,
        "filter_form": form,
        "page": page,
        "previous_page": page - 1 if page > 1 else None,
        "next_page": page + 1 if has_next else None,
    }
    return render(request, "projects/audit.html", context)


@login_required
def audit_export(request: HttpRequest) -> HttpResponse:
    """``/audit/export.csv``: the same entries (the same filters) as CSV."""
    project, form = _audit_filters(request)
    return audit_csv_response(
        project, selectors.audit_entries(project=project, **form.selector_filters())
    )
