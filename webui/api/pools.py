"""Pool endpoints: the pools a user can see, with their workers; creating and editing them,
their workers (add, change, reorder, disable), testing a connection, and their usage.

Keys never leave the environment: a worker shows only the *name* of the variable holding its
key, and only to admins of its project. Members of a pool's project read it; only its admins
change it (403); anyone else gets a 404.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors
from orchestrator.models import Membership, Pool
from orchestrator.services.connections import conductor_connection_test, worker_connection_test
from orchestrator.services.pools import (
    MAX_CONCURRENCY,
    MAX_COST_BUDGET,
    MAX_DESCRIPTION_CHARS,
    MAX_OUTPUT_TOKENS,
    MAX_PARAMS_BYTES,
    MAX_POOL_ROUNDS,
    MAX_PRICE,
    MAX_STEP_TIMEOUT,
    MAX_STEPS,
    MAX_TOKEN_BUDGET,
    MAX_WORKERS_PER_POOL,
    pool_create,
    pool_update,
    worker_create,
    worker_disable,
    worker_remove,
    worker_update,
    workers_reorder,
)
from webui.api.inputs import InputSerializer, ProjectField, refuse_body
from webui.api.lookups import admin_pool_or_403, pool_or_404, project_or_400, worker_or_404
from webui.api.serializers import NumberField, StrictBooleanField, TextField, WholeNumberField
from webui.converters import MAX_ID


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


class PoolCreateInputSerializer(InputSerializer):
    """A pool's settings: the conductor (model or sim/conductor, API base, key variable, call
    parameters), the bounds of a run, how the conductor sees the workers."""

    name = TextField(max_length=100)
    description = TextField(max_length=MAX_DESCRIPTION_CHARS, allow_blank=True, required=False)
    conductor_model = TextField(
        max_length=200, required=False, help_text="A litellm model string, or sim/conductor."
    )
    conductor_api_base = TextField(max_length=300, allow_blank=True, required=False)
    conductor_api_key_env = TextField(
        max_length=100,
        allow_blank=True,
        required=False,
        help_text="The NAME of the environment variable holding the conductor's key.",
    )
    conductor_params = serializers.DictField(
        required=False,
        help_text=f"Call parameters, a JSON object of at most {MAX_PARAMS_BYTES} bytes.",
    )
    conductor_prompt_style = serializers.ChoiceField(
        choices=Pool._meta.get_field("conductor_prompt_style").choices,
        required=False,
        help_text="full: the format with a worked example, for general chat models; "
        "compact: the format only, for conductors fine-tuned on it.",
    )
    max_steps = WholeNumberField(min_value=1, max_value=MAX_STEPS, required=False)
    max_rounds = WholeNumberField(min_value=1, max_value=MAX_POOL_ROUNDS, required=False)
    access_mode = serializers.ChoiceField(choices=Pool.AccessMode.choices, required=False)
    show_worker_names = StrictBooleanField(required=False)
    step_timeout = NumberField(min_value=0.1, max_value=MAX_STEP_TIMEOUT, required=False)
    token_budget = WholeNumberField(
        min_value=1, max_value=MAX_TOKEN_BUDGET, allow_null=True, required=False
    )
    cost_budget = NumberField(
        min_value=0, max_value=MAX_COST_BUDGET, allow_null=True, required=False
    )
    conductor_output = serializers.ChoiceField(
        choices=Pool._meta.get_field("conductor_output").choices,
        required=False,
        help_text="text: reasoning then the three Python lists (fine-tuned conductors); json: "
        "one JSON object of steps, asked of the server as output constrained to the plan's "
        "JSON schema (small general models).",
    )
    conductor_json_dialect = serializers.ChoiceField(
        choices=Pool._meta.get_field("conductor_json_dialect").choices,
        required=False,
        help_text="How json output asks for the schema: openai (response_format json_schema), "
        "llamacpp (response_format json_object with schema), vllm (guided_json), ollama "
        "(format), or auto: ollama/ and ollama_chat/ models ollama, hosted_vllm/ models vllm, "
        "other models with an API base llamacpp, the rest openai.",
    )
    plan_fallback = serializers.ChoiceField(
        choices=Pool._meta.get_field("plan_fallback").choices,
        required=False,
        help_text="When the conductor's plan is unusable after its repairs: fail the run, or "
        "single: the pool's first enabled worker answers alone (a later round keeps its "
        "answer), marked as a fallback.",
    )
    conductor_max_concurrency = WholeNumberField(
        min_value=1,
        max_value=MAX_CONCURRENCY,
        allow_null=True,
        required=False,
        help_text="Conductor calls of this pool that run at once, over every process that "
        "executes runs (through Redis when the server has it); the others wait their turn, "
        "the wait shown apart from the call's latency. null: no bound.",
    )
    conductor_max_tokens = WholeNumberField(
        min_value=1,
        max_value=MAX_OUTPUT_TOKENS,
        allow_null=True,
        required=False,
        help_text="Output tokens a conductor call may write unless conductor_params bound it "
        "(max_tokens); null: no bound but the server's. Default 1024.",
    )
    worker_max_tokens = WholeNumberField(
        min_value=1,
        max_value=MAX_OUTPUT_TOKENS,
        allow_null=True,
        required=False,
        help_text="Output tokens a worker call may write unless the worker's max_tokens or its "
        "params bound it; null: no bound but the server's. Default 1024.",
    )


class PoolInputSerializer(PoolCreateInputSerializer):
    project = ProjectField(help_text="A project you are an admin of, by id or slug.")


class WorkerInputSerializer(InputSerializer):
    name = TextField(max_length=100)
    model = TextField(max_length=200, help_text="litellm model string: openai/..., sim/...")
    api_base = TextField(max_length=300, allow_blank=True, required=False)
    api_key_env = TextField(
        max_length=100,
        allow_blank=True,
        required=False,
        help_text="The NAME of the environment variable holding the key (never the key).",
    )
    params = serializers.DictField(required=False, help_text="Call parameters (JSON object).")
    price_in = NumberField(min_value=0, max_value=MAX_PRICE, required=False)
    price_out = NumberField(min_value=0, max_value=MAX_PRICE, required=False)
    description = TextField(max_length=MAX_DESCRIPTION_CHARS, help_text="Shown to the conductor.")
    enabled = StrictBooleanField(required=False)
    max_tokens = WholeNumberField(
        min_value=1,
        max_value=MAX_OUTPUT_TOKENS,
        allow_null=True,
        required=False,
        help_text="Output tokens one call may write unless params bound it; null: the pool's "
        "worker_max_tokens.",
    )
    max_concurrency = WholeNumberField(
        min_value=1,
        max_value=MAX_CONCURRENCY,
        allow_null=True,
        required=False,
        help_text="Calls of this worker that run at once, over every process that executes "
        "runs; the others wait their turn. null: no bound.",
    )


class WorkerDetailOutputSerializer(serializers.Serializer):
    """A worker as its project's admins see it (the key's variable name, never a key)."""

    id = serializers.IntegerField()
    position = serializers.IntegerField()
    name = serializers.CharField()
    model = serializers.CharField()
    api_base = serializers.CharField()
    api_key_env = serializers.CharField()
    params = serializers.DictField()
    price_in = serializers.FloatField()
    price_out = serializers.FloatField()
    description = serializers.CharField()
    enabled = serializers.BooleanField()
    max_tokens = serializers.IntegerField(allow_null=True)
    max_concurrency = serializers.IntegerField(allow_null=True)
    key_missing = serializers.SerializerMethodField()

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_key_missing(self, worker) -> bool:
        return bool(selectors.worker_missing_keys(worker=worker))


class PoolDetailOutputSerializer(serializers.Serializer):
    """A pool with every worker (disabled ones too) and its conductor settings."""

    id = serializers.IntegerField()
    project = serializers.CharField(source="project.slug")
    name = serializers.CharField()
    description = serializers.CharField()
    is_simulated = serializers.BooleanField()
    conductor_model = serializers.CharField()
    conductor_api_base = serializers.CharField()
    conductor_api_key_env = serializers.SerializerMethodField(
        help_text="Name of the conductor's key variable (admins only)."
    )
    conductor_params = serializers.DictField()
    conductor_key_missing = serializers.SerializerMethodField()
    conductor_prompt_style = serializers.CharField()
    max_steps = serializers.IntegerField()
    max_rounds = serializers.IntegerField()
    access_mode = serializers.CharField()
    show_worker_names = serializers.BooleanField()
    step_timeout = serializers.FloatField()
    token_budget = serializers.IntegerField(allow_null=True)
    cost_budget = serializers.FloatField(allow_null=True)
    conductor_max_tokens = serializers.IntegerField(allow_null=True)
    worker_max_tokens = serializers.IntegerField(allow_null=True)
    conductor_output = serializers.CharField()
    conductor_json_dialect = serializers.CharField()
    plan_fallback = serializers.CharField()
    conductor_max_concurrency = serializers.IntegerField(allow_null=True)
    can_edit = serializers.SerializerMethodField()
    workers = serializers.SerializerMethodField()

    def _is_admin(self, pool) -> bool:
        return getattr(pool, "role", None) == Membership.Role.ADMIN

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_conductor_api_key_env(self, pool) -> str | None:
        return pool.conductor_api_key_env if self._is_admin(pool) else None

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_conductor_key_missing(self, pool) -> bool:
        return bool(selectors.conductor_missing_keys(pool=pool))

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_can_edit(self, pool) -> bool:
        return self._is_admin(pool)

    @extend_schema_field(WorkerDetailOutputSerializer(many=True))
    def get_workers(self, pool) -> list:
        workers = WorkerDetailOutputSerializer(pool.all_workers, many=True).data
        if not self._is_admin(pool):
            for worker in workers:
                worker["api_key_env"] = ""
        return workers


class ConnectionOutputSerializer(serializers.Serializer):
    """One test call: the answer, tokens and latency, or the exact error (never a key)."""

    ok = serializers.BooleanField()
    model = serializers.CharField()
    answer = serializers.CharField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    latency = serializers.FloatField(allow_null=True, help_text="Seconds.")
    error = serializers.CharField()
    missing_keys = serializers.ListField(
        child=serializers.CharField(),
        help_text="Key variables not set in the server's environment (names only).",
    )


class WorkerUsageOutputSerializer(serializers.Serializer):
    worker = serializers.IntegerField(source="worker.pk")
    name = serializers.CharField(source="worker.name")
    enabled = serializers.BooleanField(source="worker.enabled")
    runs = serializers.IntegerField()
    steps = serializers.IntegerField(help_text="Model calls (reused steps left out).")
    success_rate = serializers.FloatField(allow_null=True)
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost = serializers.FloatField()
    latency_p50 = serializers.FloatField(allow_null=True, help_text="Seconds.")
    latency_p95 = serializers.FloatField(allow_null=True, help_text="Seconds.")


def _detail(request: Request, pool_id: int, code: int = status.HTTP_200_OK) -> Response:
    return Response(PoolDetailOutputSerializer(pool_or_404(request, pool_id)).data, status=code)


class PoolListCreateApi(PoolListApi):
    """``GET``: the pools of your projects. ``POST``: a new pool in a project you administer."""

    @extend_schema(
        operation_id="pools_create",
        request=PoolInputSerializer,
        responses={201: PoolDetailOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = PoolInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        values = dict(payload.validated_data)
        project = project_or_400(request, values.pop("project"))
        if project.role != Membership.Role.ADMIN:
            self.permission_denied(request, message="Only the project's admins may add pools.")
        pool = pool_create(project=project, actor=request.user, values=values)
        return _detail(request, pool.pk, status.HTTP_201_CREATED)


class PoolDetailApi(APIView):
    """``GET``: one pool with every worker. ``PATCH``: change its settings (admins)."""

    @extend_schema(operation_id="pools_retrieve", responses=PoolDetailOutputSerializer)
    def get(self, request: Request, pool_id: int) -> Response:
        return _detail(request, pool_id)

    @extend_schema(
        operation_id="pools_update",
        request=PoolCreateInputSerializer(partial=True),
        responses=PoolDetailOutputSerializer,
    )
    def patch(self, request: Request, pool_id: int) -> Response:
        pool = admin_pool_or_403(request, pool_id)
        payload = PoolCreateInputSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        pool_update(pool=pool, actor=request.user, values=dict(payload.validated_data))
        return _detail(request, pool_id)


class WorkerCreateApi(APIView):
    """Add a worker at the end of a pool (admins)."""

    @extend_schema(
        operation_id="workers_create",
        request=WorkerInputSerializer,
        responses={201: WorkerDetailOutputSerializer},
    )
    def post(self, request: Request, pool_id: int) -> Response:
        pool = admin_pool_or_403(request, pool_id)
        payload = WorkerInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        worker = worker_create(pool=pool, actor=request.user, values=dict(payload.validated_data))
        return Response(WorkerDetailOutputSerializer(worker).data, status=status.HTTP_201_CREATED)


class WorkerDetailApi(APIView):
    """``PATCH``: change a worker (admins). ``DELETE``: remove it; a worker that stored runs
    used is disabled instead, so their history stays intact."""

    class RemovedOutputSerializer(serializers.Serializer):
        deleted = serializers.BooleanField(help_text="False: stored runs used it, it is disabled.")

    @extend_schema(
        operation_id="workers_update",
        request=WorkerInputSerializer(partial=True),
        responses=WorkerDetailOutputSerializer,
    )
    def patch(self, request: Request, pool_id: int, worker_id: int) -> Response:
        worker = worker_or_404(admin_pool_or_403(request, pool_id), worker_id)
        payload = WorkerInputSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        worker = worker_update(
            worker=worker, actor=request.user, values=dict(payload.validated_data)
        )
        return Response(WorkerDetailOutputSerializer(worker).data)

    @extend_schema(operation_id="workers_delete", responses={200: RemovedOutputSerializer})
    def delete(self, request: Request, pool_id: int, worker_id: int) -> Response:
        worker = worker_or_404(admin_pool_or_403(request, pool_id), worker_id)
        refuse_body(request)
        return Response({"deleted": worker_remove(worker=worker, actor=request.user)})


class WorkerDisableApi(APIView):
    """Disable a worker: future runs leave it out; stored steps keep pointing at it."""

    @extend_schema(
        operation_id="workers_disable", request=None, responses=WorkerDetailOutputSerializer
    )
    def post(self, request: Request, pool_id: int, worker_id: int) -> Response:
        worker = worker_or_404(admin_pool_or_403(request, pool_id), worker_id)
        refuse_body(request)
        worker = worker_disable(worker=worker, actor=request.user)
        return Response(WorkerDetailOutputSerializer(worker).data)


class IdListField(serializers.ListField):
    """A list of ids whose errors read as one message (not one object per bad entry)."""

    def run_child_validation(self, data):
        try:
            return super().run_child_validation(data)
        except serializers.ValidationError:
            raise serializers.ValidationError(
                f"Give a list of whole numbers from 1 to {MAX_ID}."
            ) from None


class WorkerReorderApi(APIView):
    """Put a pool's workers in a new order (the conductor sees them as Model 0, 1, ...)."""

    class ReorderInputSerializer(InputSerializer):
        order = IdListField(
            child=WholeNumberField(min_value=1, max_value=MAX_ID),
            max_length=MAX_WORKERS_PER_POOL,
            help_text="Every worker id of the pool, once each, in the new order.",
        )

    @extend_schema(
        operation_id="workers_reorder",
        request=ReorderInputSerializer,
        responses=WorkerDetailOutputSerializer(many=True),
    )
    def post(self, request: Request, pool_id: int) -> Response:
        pool = admin_pool_or_403(request, pool_id)
        payload = self.ReorderInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        workers = workers_reorder(
            pool=pool, actor=request.user, order=payload.validated_data["order"]
        )
        return Response(WorkerDetailOutputSerializer(workers, many=True).data)


class WorkerConnectionTestApi(APIView):
    """One tiny call of a worker as runs would make it (admins): answer, tokens and latency, or
    the exact error. A key variable the server lacks is named, and no call is made."""

    @extend_schema(
        operation_id="workers_test_connection", request=None, responses=ConnectionOutputSerializer
    )
    def post(self, request: Request, pool_id: int, worker_id: int) -> Response:
        worker = worker_or_404(admin_pool_or_403(request, pool_id), worker_id)
        refuse_body(request)
        result = worker_connection_test(worker=worker)
        return Response(ConnectionOutputSerializer(result).data)


class ConductorConnectionTestApi(APIView):
    """The same for the pool's conductor."""

    @extend_schema(
        operation_id="pools_test_connection", request=None, responses=ConnectionOutputSerializer
    )
    def post(self, request: Request, pool_id: int) -> Response:
        pool = admin_pool_or_403(request, pool_id)
        refuse_body(request)
        result = conductor_connection_test(pool=pool)
        return Response(ConnectionOutputSerializer(result).data)


class PoolUsageApi(APIView):
    """How each worker of a pool did: runs, success rate, tokens, cost, latency percentiles."""

    @extend_schema(operation_id="pools_usage", responses=WorkerUsageOutputSerializer(many=True))
    def get(self, request: Request, pool_id: int) -> Response:
        pool = pool_or_404(request, pool_id)
        usage = selectors.pool_usage(pool=pool)
        return Response(WorkerUsageOutputSerializer(usage, many=True).data)
