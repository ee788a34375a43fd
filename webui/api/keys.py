"""API keys for /v1: list, create (the key is in the answer, once), revoke. A user manages only
their own keys, for projects where they may start runs."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors
from orchestrator.models import ApiKey
from orchestrator.services.api_keys import api_key_create, api_key_revoke
from webui.api.inputs import InputSerializer, ProjectField, refuse_body
from webui.api.lookups import project_or_400


class ApiKeyOutputSerializer(serializers.Serializer):
    """A key as its owner sees it later: never the key, only its first characters."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first characters, to tell keys apart.")
    project = serializers.CharField(source="project.slug")
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)


class ApiKeyCreatedOutputSerializer(ApiKeyOutputSerializer):
    key = serializers.CharField(help_text="The key itself: shown in this answer only.")


class ApiKeyListCreateApi(APIView):
    """``GET``: your keys. ``POST``: a new key for a project where you may start runs."""

    class ApiKeyCreateInputSerializer(InputSerializer):
        project = ProjectField()
        name = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")

    @extend_schema(operation_id="api_keys_list", responses=ApiKeyOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        keys = selectors.api_keys_of(user=request.user)
        return Response(ApiKeyOutputSerializer(keys, many=True).data)

    @extend_schema(
        operation_id="api_keys_create",
        request=ApiKeyCreateInputSerializer,
        responses={201: ApiKeyCreatedOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = self.ApiKeyCreateInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        api_key, key = api_key_create(
            user=request.user,
            project=project_or_400(request, payload.validated_data["project"]),
            name=payload.validated_data["name"],
        )
        api_key.key = key
        data = ApiKeyCreatedOutputSerializer(api_key).data
        return Response(data, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class ApiKeyRevokeApi(APIView):
    """Revoke one of your keys: the next request with it is refused."""

    @extend_schema(operation_id="api_keys_revoke", request=None, responses=ApiKeyOutputSerializer)
    def post(self, request: Request, key_id: int) -> Response:
        refuse_body(request)
        try:
            api_key = api_key_revoke(user=request.user, key_id=key_id)
        except ApiKey.DoesNotExist:
            raise Http404("No such key of yours.") from None
        return Response(ApiKeyOutputSerializer(api_key).data)
