"""Projects and pools: creating them, and keeping a pool in step with a definition in code."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from orchestrator.engine.types import MAX_ROUNDS, MAX_STEPS_PER_ROUND
from orchestrator.models import Membership, Pool, Project, Worker
from orchestrator.services.audit import audit_record

POOL_FIELDS = (
    "description",
    "conductor_model",
    "conductor_params",
    "conductor_prompt_style",
    "max_steps",
    "max_rounds",
    "token_budget",
    "cost_budget",
    "access_mode",
    "show_worker_names",
)
WORKER_FIELDS = (
    "model",
    "description",
    "price_in",
    "price_out",
    "params",
    "api_base",
    "api_key_env",
    "enabled",
)


def project_get_or_create(*, name: str) -> Project:
    """The project called ``name``, created if it does not exist yet."""
    project, _ = Project.objects.get_or_create(name=name, defaults={"slug": slugify(name)})
    return project


def membership_set(*, project: Project, user: Any, role: str) -> Membership:
    """Give ``user`` the ``role`` in ``project`` (creating or updating the membership)."""
    membership, _ = Membership.objects.update_or_create(
        project=project, user=user, defaults={"role": role}
    )
    return membership


@transaction.atomic
def pool_sync_from_data(*, project: Project, data: Any) -> tuple[Pool, bool]:
    """Create or update the pool named ``data.name`` in ``project`` to match ``data``.

    ``data`` has the pool's fields (``POOL_FIELDS``) and ``workers``, each with a name and the
    ``WORKER_FIELDS``: the shape of ``orchestrator.providers.simulator.demo_pool()``. Workers are
    matched by name and placed in the given order; workers the definition no longer names are
    disabled, not deleted (stored steps point at them). Returns the pool and whether it was new.
    """
    values = {field: getattr(data, field) for field in POOL_FIELDS if hasattr(data, field)}
    pool, created = Pool.objects.update_or_create(project=project, name=data.name, defaults=values)
    named = []
    for position, worker in enumerate(data.workers):
        worker_values = {
            field: getattr(worker, field) for field in WORKER_FIELDS if hasattr(worker, field)
        }
        Worker.objects.update_or_create(
            pool=pool, name=worker.name, defaults={**worker_values, "position": position}
        )
        named.append(worker.name)
    pool.workers.exclude(name__in=named).update(enabled=False)
    return pool, created


# Editing pools and workers in the app (/pools/ and /api/pools/). Every change is audited with
# the fields it changed, before and after. A key is named by its environment variable only: a
# value that looks like a key, or call parameters that would carry one, are refused.

POOL_EDITABLE = (
    "name",
    "description",
    "conductor_model",
    "conductor_api_base",
    "conductor_api_key_env",
    "conductor_params",
    "conductor_prompt_style",
    "max_steps",
    "max_rounds",
    "access_mode",
    "show_worker_names",
    "step_timeout",
    "token_budget",
    "cost_budget",
    "conductor_max_tokens",
    "worker_max_tokens",
    "conductor_output",
    "conductor_json_dialect",
    "plan_fallback",
    "conductor_max_concurrency",
)
WORKER_EDITABLE = (
    "name",
    "model",
    "api_base",
    "api_key_env",
    "params",
    "price_in",
    "price_out",
    "description",
    "enabled",
    "max_tokens",
    "max_concurrency",
)
MAX_WORKERS_PER_POOL = 50
MAX_DESCRIPTION_CHARS = 2_000
MAX_PARAMS_BYTES = 4_000
MAX_PARAMS_DEPTH = 4
MAX_PARAMS_KEYS = 40
MAX_PRICE = 10_000.0
MAX_STEP_TIMEOUT = 3_600.0
MAX_TOKEN_BUDGET = 100_000_000
MAX_COST_BUDGET = 100_000.0
MAX_OUTPUT_TOKENS = 1_000_000
MAX_CONCURRENCY = 1_000
# Call parameters that would put a secret in the database: a key goes in an environment
# variable, named by api_key_env.
SECRET_PARAM_NAMES = frozenset(
    {"api_key", "key", "token", "secret", "password", "authorization", "headers", "extra_headers"}
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _params_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a worker's (or conductor's) call parameters, or None."""
    if not isinstance(value, dict):
        return 'Give a JSON object, such as {"temperature": 0.2}.'
    if len(value) > MAX_PARAMS_KEYS:
        return f"At most {MAX_PARAMS_KEYS} parameters."
    if _depth(value) > MAX_PARAMS_DEPTH:
        return f"Nested deeper than {MAX_PARAMS_DEPTH} levels."
    if len(json.dumps(value)) > MAX_PARAMS_BYTES:
        return f"Larger than {MAX_PARAMS_BYTES:,} bytes as JSON."
    secret = sorted(
        name for name in value if str(name).lower().replace("-", "_") in SECRET_PARAM_NAMES
    )
    if secret:
        return (
            f"{', '.join(secret)}: a key never goes in the parameters; put it in an "
            "environment variable of the server and give that variable's name."
        )
    return None


def _api_base_problem(value: str) -> str | None:
    if value and not value.startswith(("http://", "https://")):
        return "Give an http:// or https:// address, or leave it empty."
    return None


def _bound(errors: dict[str, list[str]], field: str, value: Any, high: float) -> None:
    if value is not None and value > high:
        errors.setdefault(field, []).append(f"At most {high:,g}.")


def _check(instance: Pool | Worker) -> None:
    """The model's own validation plus the bounds of the app: a ValidationError keyed by
    field, before anything is written."""
    errors: dict[str, list[str]] = {}
    try:
        instance.full_clean(exclude=["project", "pool"], validate_unique=False)
    except ValidationError as error:
        errors.update({k: list(v) for k, v in error.message_dict.items()})
    if isinstance(instance, Pool):
        params, base = (
            ("conductor_params", instance.conductor_params),
            (
                "conductor_api_base",
                instance.conductor_api_base,
            ),
        )
        _bound(errors, "step_timeout", instance.step_timeout, MAX_STEP_TIMEOUT)
        _bound(errors, "token_budget", instance.token_budget, MAX_TOKEN_BUDGET)
        _bound(errors, "cost_budget", instance.cost_budget, MAX_COST_BUDGET)
        for field in ("conductor_max_tokens", "worker_max_tokens"):
            _bound(errors, field, getattr(instance, field), MAX_OUTPUT_TOKENS)
        _bound(
            errors, "conductor_max_concurrency", instance.conductor_max_concurrency, MAX_CONCURRENCY
        )
        duplicate = Pool.objects.filter(project_id=instance.project_id, name=instance.name)
    else:
        params, base = ("params", instance.params), ("api_base", instance.api_base)
        for field in ("price_in", "price_out"):
            value = getattr(instance, field)
            if value is not None and value < 0:
                errors.setdefault(field, []).append("A price cannot be negative.")
            _bound(errors, field, value, MAX_PRICE)
        _bound(errors, "max_tokens", instance.max_tokens, MAX_OUTPUT_TOKENS)
        _bound(errors, "max_concurrency", instance.max_concurrency, MAX_CONCURRENCY)
        duplicate = Worker.objects.filter(pool_id=instance.pool_id, name=instance.name)
    if len(instance.description) > MAX_DESCRIPTION_CHARS:
        errors.setdefault("description", []).append(
            f"At most {MAX_DESCRIPTION_CHARS:,} characters."
        )
    if problem := _params_problem(params[1]):
        errors.setdefault(params[0], []).append(problem)
    if problem := _api_base_problem(base[1]):
        errors.setdefault(base[0], []).append(problem)
    if instance.name and duplicate.exclude(pk=instance.pk).exists():
        errors.setdefault("name", []).append("This name is taken in the pool's project.")
    if errors:
        raise ValidationError(errors)


def _unknown_fields(values: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ValidationError({name: ["Not a field that can be set."] for name in unknown})


def pool_state(pool: Pool) -> dict[str, Any]:
    """A pool's editable settings, as the audit log stores them (JSON data, no secret)."""
    return {field: getattr(pool, field) for field in POOL_EDITABLE}


def worker_state(worker: Worker) -> dict[str, Any]:
    return {field: getattr(worker, field) for field in (*WORKER_EDITABLE, "position")}


def _changes(
    before: dict[str, Any], after: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    changed = [key for key in after if before.get(key) != after[key]]
    return {k: before.get(k) for k in changed}, {k: after[k] for k in changed}


@transaction.atomic
def pool_create(*, project: Project, actor: Any, values: dict[str, Any]) -> Pool:
    """A new pool in ``project`` with ``values`` (of ``POOL_EDITABLE``); no workers yet."""
    _unknown_fields(values, POOL_EDITABLE)
    pool = Pool(project=project, **values)
    _check(pool)
    pool.save()
    audit_record(
        project=project, actor=actor, action="pool.create", target=pool, after=pool_state(pool)
    )
    return pool


@transaction.atomic
def pool_update(*, pool: Pool, actor: Any, values: dict[str, Any]) -> Pool:
    """Change some of a pool's settings; the audit entry holds the fields that changed."""
    _unknown_fields(values, POOL_EDITABLE)
    pool = Pool.objects.select_for_update().get(pk=pool.pk)
    before = pool_state(pool)
    for field, value in values.items():
        setattr(pool, field, value)
    _check(pool)
    old, new = _changes(before, pool_state(pool))
    if new:
        pool.save(update_fields=[*new, "updated_at"])
        audit_record(
            project=pool.project_id,
            actor=actor,
            action="pool.update",
            target=pool,
            before=old,
            after=new,
        )
    return pool


@transaction.atomic
def worker_create(*, pool: Pool, actor: Any, values: dict[str, Any]) -> Worker:
    """A new worker at the end of ``pool``."""
    _unknown_fields(values, WORKER_EDITABLE)
    pool = Pool.objects.select_for_update().get(pk=pool.pk)
    workers = Worker.objects.filter(pool=pool)
    if workers.count() >= MAX_WORKERS_PER_POOL:
        raise ValidationError(
            {"non_field_errors": [f"A pool holds at most {MAX_WORKERS_PER_POOL} workers."]}
        )
    last = workers.order_by("-position").values_list("position", flat=True).first()
    worker = Worker(pool=pool, position=0 if last is None else last + 1, **values)
    _check(worker)
    worker.save()
    audit_record(
        project=pool.project_id,
        actor=actor,
        action="worker.create",
        target=worker,
        after=worker_state(worker),
    )
    return worker


@transaction.atomic
def worker_update(*, worker: Worker, actor: Any, values: dict[str, Any]) -> Worker:
    """Change some of a worker's fields (``enabled`` included)."""
    _unknown_fields(values, WORKER_EDITABLE)
    worker = Worker.objects.select_for_update().get(pk=worker.pk)
    before = worker_state(worker)
    for field, value in values.items():
        setattr(worker, field, value)
    _check(worker)
    old, new = _changes(before, worker_state(worker))
    if new:
        worker.save(update_fields=list(new))
        action = "worker.update"
        if set(new) == {"enabled"}:
            action = "worker.enable" if worker.enabled else "worker.disable"
        audit_record(
            project=worker.pool.project_id,
            actor=actor,
            action=action,
            target=worker,
            before=old,
            after=new,
        )
    return worker


def worker_disable(*, worker: Worker, actor: Any) -> Worker:
    """Take a worker out of its pool's future runs; its stored steps keep pointing at it."""
    return worker_update(worker=worker, actor=actor, values={"enabled": False})


@transaction.atomic
def worker_remove(*, worker: Worker, actor: Any) -> bool:
    """Delete a worker no stored step used; disable one that was used (history stays intact).
    Returns whether it was deleted."""
    worker = Worker.objects.select_for_update().select_related("pool").get(pk=worker.pk)
    if worker.steps.exists():
        worker_update(worker=worker, actor=actor, values={"enabled": False})
        return False
    audit_record(
        project=worker.pool.project_id,
        actor=actor,
        action="worker.delete",
        target=worker,
        before=worker_state(worker),
    )
    worker.delete()
    return True


@transaction.atomic
def workers_reorder(*, pool: Pool, actor: Any, order: list[int]) -> list[Worker]:
    """Put the pool's workers in ``order`` (every worker id of the pool, once each): the
    conductor sees them as Model 0, 1, ... in this order."""
    pool = Pool.objects.select_for_update().get(pk=pool.pk)
    workers = {w.pk: w for w in Worker.objects.filter(pool=pool).order_by("position", "id")}
    if sorted(order) != sorted(workers) or len(set(order)) != len(order):
        raise ValidationError({"order": ["Give every worker id of the pool, once each."]})
    before = [workers[pk].name for pk in workers]
    changed = []
    for position, pk in enumerate(order):
        if workers[pk].position != position:
            workers[pk].position = position
            changed.append(workers[pk])
    Worker.objects.bulk_update(changed, ["position"])
    after = [workers[pk].name for pk in order]
    if before != after:
        audit_record(
            project=pool.project_id,
            actor=actor,
            action="pool.reorder",
            target=pool,
            before={"workers": before},
            after={"workers": after},
        )
    return [workers[pk] for pk in order]


@transaction.atomic
def pool_save(
    *,
    project: Project,
    pool: Pool | None,
    actor: Any,
    values: dict[str, Any],
    workers: list[dict[str, Any]],
) -> Pool:
    """The pool page's one form: create or update ``pool`` with ``values`` and its workers as
    listed, in that order. Each worker is a dict of ``WORKER_EDITABLE`` values with ``id`` (None
    for a new one) and ``remove`` (delete it, or disable it when stored runs used it). Workers the
    list leaves out keep their place after the listed ones. All or nothing: a ValidationError's
    keys name the field (``name``, or ``workers.<row>.<field>`` for a worker's)."""
    if pool is None:
        pool = pool_create(project=project, actor=actor, values=values)
    else:
        pool = pool_update(pool=pool, actor=actor, values=values)
    stored = {w.pk: w for w in Worker.objects.filter(pool=pool)}
    order: list[int] = []
    for row, data in enumerate(workers):
        worker_id = data.get("id")
        fields = {k: v for k, v in data.items() if k not in ("id", "remove")}
        try:
            if worker_id is None:
                if not data.get("remove"):
                    order.append(worker_create(pool=pool, actor=actor, values=fields).pk)
                continue
            if worker_id not in stored:
                raise ValidationError({"id": ["No such worker in this pool."]})
            if data.get("remove"):
                worker_remove(worker=stored[worker_id], actor=actor)
                continue
            worker_update(worker=stored[worker_id], actor=actor, values=fields)
            order.append(worker_id)
        except ValidationError as error:
            raise ValidationError(
                {
                    f"workers.{row}.{field}": messages
                    for field, messages in error.message_dict.items()
                }
            ) from error
    remaining = list(
        Worker.objects.filter(pool=pool).order_by("position", "id").values_list("pk", flat=True)
    )
    order += [pk for pk in remaining if pk not in order]
    order = [pk for pk in order if pk in remaining]
    workers_reorder(pool=pool, actor=actor, order=order)
    return pool


MAX_STEPS = MAX_STEPS_PER_ROUND
MAX_POOL_ROUNDS = MAX_ROUNDS
