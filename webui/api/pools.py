"""Pool endpoint: the pools a user can see, with their enabled workers.

Keys never leave the environment: a worker shows only the *name* of the variable holding its
key, and only to admins of its project.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors
from orchestrator.models import Membership


class PoolWorkerOutputSerializer(serializers.Serializer):
    """A worker as users of its pool see it. ``context["pool_roles"]``: pool id -> user's role."""

    id = serializers.IntegerField()
    position = serializers.IntegerField()
    name = serializers.CharField()
    model = serializers.CharField()
    description = serializers.CharField()
    price_in = serializers.FloatField(help_text="Per million input tokens.")
    price_out = serializers.FloatField(help_text="Per million output tokens.")
    is_simulated = serializers.BooleanField()
    api_key_env = serializers.SerializerMethodField(
        help_text="Name of the environment variable holding the key (admins only; never the key)."
    )
    key_missing = serializers.SerializerMethodField(
        help_text="True when the variable that should hold this worker's key is not set on the "
        "server: its steps would fail at once, naming the variable, until an operator sets it."
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_api_key_env(self, worker) -> str | None:
        is_admin = self.context["pool_roles"].get(worker.pool_id) == Membership.Role.ADMIN
        return worker.api_key_env if is_admin else None

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_key_missing(self, worker) -> bool:
        return bool(selectors.worker_missing_keys(worker=worker))


class PoolListApi(APIView):
    """The pools of the user's projects, and whether the user may start runs on each."""

    class PoolOutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        description = serializers.CharField()
        project = serializers.CharField(source="project.name")
        is_simulated = serializers.BooleanField()
        conductor_model = serializers.CharField()
        max_steps = serializers.IntegerField()
        max_rounds = serializers.IntegerField()
        token_budget = serializers.IntegerField(
            allow_null=True, help_text="Tokens one run may use; null: no limit."
        )
        cost_budget = serializers.FloatField(
            allow_null=True, help_text="Dollars one run may cost; null: no limit."
        )
        access_mode = serializers.CharField()
        can_run = serializers.SerializerMethodField()
        conductor_key_missing = serializers.SerializerMethodField(
            help_text="True when the variable that should hold the conductor's key is not set."
        )
        workers = PoolWorkerOutputSerializer(source="enabled_workers", many=True)

        @extend_schema_field(OpenApiTypes.BOOL)
        def get_can_run(self, pool) -> bool:
            return self.context["pool_roles"].get(pool.pk) in selectors.ROLES_THAT_RUN

        @extend_schema_field(OpenApiTypes.BOOL)
        def get_conductor_key_missing(self, pool) -> bool:
            return bool(selectors.conductor_missing_keys(pool=pool))

    @extend_schema(operation_id="pools_list", responses=PoolOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        pools = list(selectors.pools_for(user=request.user))
        roles = selectors.user_roles(user=request.user)
        pool_roles = {pool.pk: roles.get(pool.project_id) for pool in pools}
        serializer = self.PoolOutputSerializer(pools, many=True, context={"pool_roles": pool_roles})
        return Response(serializer.data)
