"""Projects and pools: creating them, and keeping a pool in step with a definition in code."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.text import slugify

from orchestrator.models import Membership, Pool, Project, Worker

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
