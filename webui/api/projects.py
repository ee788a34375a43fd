"""Project endpoints: your projects, their members (project admins invite existing users,
change roles, remove members) and their audit log (project admins; JSON pages or CSV).

A project you are not a member of is a 404; a member who is not an admin gets a 403 on what
only admins may do.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors
from orchestrator.models import Membership
from orchestrator.services.members import (
    membership_change_role,
    membership_invite,
    membership_remove,
)
from webui.api.inputs import InputSerializer, refuse_body
from webui.api.lookups import admin_project_or_403, membership_or_404, project_or_404
from webui.api.pagination import PagePagination
from webui.api.serializers import TextField
from webui.audit_export import audit_csv_response, entry_changes


class ProjectOutputSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField(help_text="Your role: admin, reviewer or viewer.")


class MemberOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField(source="user.username")
    role = serializers.CharField()


class ProjectListApi(APIView):
    """The projects you are a member of, with your role in each."""

    @extend_schema(operation_id="projects_list", responses=ProjectOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        projects = selectors.user_projects(user=request.user)
        return Response(ProjectOutputSerializer(projects, many=True).data)


class MemberListCreateApi(APIView):
    """``GET``: a project's members (any member). ``POST``: add an existing user (admins)."""

    class InviteInputSerializer(InputSerializer):
        username = TextField(max_length=150)
        role = serializers.ChoiceField(choices=Membership.Role.choices)

    @extend_schema(operation_id="members_list", responses=MemberOutputSerializer(many=True))
    def get(self, request: Request, project_slug: str) -> Response:
        project = project_or_404(request, project_slug)
        members = selectors.project_members(project=project)
        return Response(MemberOutputSerializer(members, many=True).data)

    @extend_schema(
        operation_id="members_create",
        request=InviteInputSerializer,
        responses={201: MemberOutputSerializer},
    )
    def post(self, request: Request, project_slug: str) -> Response:
        project = admin_project_or_403(request, project_slug)
        payload = self.InviteInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        membership = membership_invite(
            project=project, actor=request.user, **payload.validated_data
        )
        return Response(MemberOutputSerializer(membership).data, status=status.HTTP_201_CREATED)


class MemberDetailApi(APIView):
    """``PATCH``: change a member's role. ``DELETE``: remove them. Admins; a project always
    keeps one admin."""

    class RoleInputSerializer(InputSerializer):
        role = serializers.ChoiceField(choices=Membership.Role.choices)

    @extend_schema(
        operation_id="members_update", request=RoleInputSerializer, responses=MemberOutputSerializer
    )
    def patch(self, request: Request, project_slug: str, membership_id: int) -> Response:
        project = admin_project_or_403(request, project_slug)
        membership = membership_or_404(project, membership_id)
        payload = self.RoleInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        membership = membership_change_role(
            membership=membership, actor=request.user, role=payload.validated_data["role"]
        )
        return Response(MemberOutputSerializer(membership).data)

    @extend_schema(
        operation_id="members_delete",
        responses={
            204: OpenApiResponse(description="Removed."),
            400: OpenApiResponse(description="The last admin."),
        },
    )
    def delete(self, request: Request, project_slug: str, membership_id: int) -> Response:
        project = admin_project_or_403(request, project_slug)
        membership = membership_or_404(project, membership_id)
        refuse_body(request)
        membership_remove(membership=membership, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditFilterSerializer(serializers.Serializer):
    action = serializers.CharField(
        required=False, max_length=40, help_text='Such as "pool.update".'
    )
    actor = serializers.CharField(required=False, max_length=150, help_text="A username.")
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)


class AuditChangeOutputSerializer(serializers.Serializer):
    field = serializers.CharField()
    before = serializers.CharField()
    after = serializers.CharField()


class AuditEntryOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField(source="actor_name")
    action = serializers.CharField()
    target_type = serializers.CharField()
    target_id = serializers.IntegerField(allow_null=True)
    target = serializers.CharField(source="target_label")
    before = serializers.DictField()
    after = serializers.DictField()
    changes = serializers.SerializerMethodField(help_text="The fields as text, for reading.")

    @extend_schema_field(AuditChangeOutputSerializer(many=True))
    def get_changes(self, entry) -> list[dict[str, str]]:
        return [
            {"field": field, "before": before, "after": after}
            for field, before, after in entry_changes(entry)
        ]


class AuditListApi(APIView):
    """A project's audit log, newest first (project admins)."""

    pagination_class = PagePagination

    @extend_schema(
        operation_id="audit_list",
        parameters=[AuditFilterSerializer],
        responses=AuditEntryOutputSerializer(many=True),
    )
    def get(self, request: Request, project_slug: str) -> Response:
        project = admin_project_or_403(request, project_slug)
        filters = AuditFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        entries = selectors.audit_entries(project=project, **filters.validated_data)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(entries, request, view=self)
        return paginator.get_paginated_response(AuditEntryOutputSerializer(page, many=True).data)


class AuditExportApi(APIView):
    """A project's audit log as CSV (project admins): one line per changed field."""

    @extend_schema(
        operation_id="audit_export",
        parameters=[AuditFilterSerializer],
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request, project_slug: str):
        project = admin_project_or_403(request, project_slug)
        filters = AuditFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        entries = selectors.audit_entries(project=project, **filters.validated_data)
        return audit_csv_response(project, entries)
