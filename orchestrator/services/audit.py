"""The audit log: one entry per admin action, written in the same transaction as the action."""

from __future__ import annotations

from typing import Any

from orchestrator.models import AuditEntry, Project


def audit_record(
    *,
    project: Project | int,
    actor: Any,
    action: str,
    target: Any = None,
    target_type: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEntry:
    """Record that ``actor`` did ``action`` (a dotted verb such as ``"pool.update"``,
    ``"replay.create"``, ``"membership.role"``) to ``target`` (a model instance, or None with an
    explicit ``target_type``) in ``project``.

    Call it inside the transaction that makes the change, so an action and its entry are stored
    together or not at all. ``before`` and ``after`` hold the changed fields only, as JSON data;
    callers never pass a secret (a key is named by its environment variable).
    """
    project_id = project if isinstance(project, int) else project.pk
    actor_id = getattr(actor, "pk", None) if getattr(actor, "is_authenticated", False) else None
    return AuditEntry.objects.create(
        project_id=project_id,
        actor_id=actor_id,
        actor_name=getattr(actor, "get_username", lambda: "")() if actor_id else "",
        action=action,
        target_type=target_type or (target._meta.model_name if target is not None else ""),
        target_id=getattr(target, "pk", None),
        target_label=str(target)[:200] if target is not None else "",
        before=before or {},
        after=after or {},
    )
