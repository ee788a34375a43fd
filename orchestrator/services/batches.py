"""Batch replays: every run a filter of the runs list matches, replayed with one override.

``batch_create`` checks the filter and the override, stores the batch with one item per
matching run (at most ``MAX_BATCH_RUNS``) and, once committed, starts ``batch_advance`` in the
background (``batch_enqueue``: the Celery task sent by name, or inline on the server's loop).
``batch_advance`` makes the replays of a few pending items at a time through ``replay_create``
(which enqueues each like any run); an item the override does not apply to, or that
``replay_create`` refuses, keeps the error instead. Nothing waits on a replay: progress is read
from the replays themselves (``selectors.batch_summary``).

Overrides, precisely:

- ``{"kind": "worker", "from": NAME, "to": NAME}``: every step of the source that ran on the
  worker named ``from`` gets the enabled worker named ``to`` of the source's pool.
- ``{"kind": "instruction", "match": "literal" | "regex", "pattern": ..., "replacement": ...}``:
  in every step's instruction, each occurrence of ``pattern`` (a literal substring,
  case-sensitive; or a regular expression of the ``regex`` module, at most
  ``MAX_PATTERN_CHARS`` characters, that cannot match empty text, searched for at most
  ``REGEX_TIMEOUT_SECONDS`` per instruction) is replaced by ``replacement``, taken literally
  (no group references). Steps whose instruction does not change are left as they were.

A source with no step to change, a pool without the ``to`` worker, a run that has not finished
or an instruction the rewrite leaves empty is not replayed; its item says why.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import regex
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from orchestrator import selectors, verdicts
from orchestrator.engine import strategies
from orchestrator.models import Batch, BatchItem, Membership, Pool, Project, Run, Step, Worker
from orchestrator.services.audit import audit_record
from orchestrator.services.execution import BATCH_ADVANCE_TASK, server_loop
from orchestrator.services.replay import replay_create

logger = logging.getLogger(__name__)

MAX_BATCH_RUNS: Final = 500
"""The most runs one batch replays; a filter matching more is refused (narrow it)."""
MAX_PATTERN_CHARS: Final = 200
MAX_REPLACEMENT_CHARS: Final = 2000
MAX_NAME_CHARS: Final = 100
REGEX_TIMEOUT_SECONDS: Final = 0.05
ADVANCE_CHUNK: Final = 20
"""Items one ``batch_advance`` call makes replays for; the task sends itself again for more."""
MAX_ITEM_ERROR_CHARS: Final = 1000

BATCH_STATUSES: Final = ("creating", "running", "finished")
"""A batch as read: replays being made, all made and some not finished, every one finished."""
OVERRIDE_WORKER: Final = "worker"
OVERRIDE_INSTRUCTION: Final = "instruction"
MATCH_KINDS: Final = ("literal", "regex")
FILTER_KEYS: Final = (
    "status",
    "pool",
    "strategy",
    "worker",
    "created_after",
    "created_before",
    "score_min",
    "score_max",
    "q",
    "verdict",
)
_FILTER_TEXT_LIMITS: Final = {"worker": MAX_NAME_CHARS, "q": 200}


# Creating ----------------------------------------------------------------------------------------


def batch_create(
    *,
    project: Project,
    actor: Any,
    filters: Mapping[str, Any],
    override: Mapping[str, Any],
    enqueue: bool = True,
) -> Batch:
    """Store a batch replaying every run of ``project`` that ``filters`` matches (the runs
    list's filters: ``selectors.run_list`` keywords) with ``override``, and start it on commit.

    Only admins of the project may (PermissionDenied). Bad input raises ValidationError keyed by
    field (``filters.pool``, ``override.pattern``, ...), as does a filter matching no run or
    more than ``MAX_BATCH_RUNS``; nothing is stored then. Records ``batch.create`` in the audit
    log in the same transaction.
    """
    if selectors.user_role(user=actor, project=project) != Membership.Role.ADMIN:
        raise PermissionDenied("Only admins of the project may replay its runs.")
    errors: dict[str, list[str]] = {}
    selector_filters, stored_filters = _checked_filters(filters, project=project, errors=errors)
    checked_override = _checked_override(override, project=project, errors=errors)
    if errors:
        raise ValidationError(errors)
    sources = list(
        selectors.run_list(user=actor, project=project, **selector_filters).values_list(
            "pk", flat=True
        )[: MAX_BATCH_RUNS + 1]
    )
    if not sources:
        raise ValidationError({"filters": ["No run of the project matches these filters."]})
    if len(sources) > MAX_BATCH_RUNS:
        raise ValidationError(
            {
                "filters": [
                    f"More than {MAX_BATCH_RUNS} runs match these filters: narrow them to "
                    f"{MAX_BATCH_RUNS} at most."
                ]
            }
        )
    if (
        checked_override["kind"] == OVERRIDE_WORKER
        and not Step.objects.filter(
            run_id__in=sources, worker_name=checked_override["from"]
        ).exists()
    ):
        raise ValidationError(
            {
                "override.from": [
                    f"No step of the {len(sources)} matching run(s) ran on a worker named "
                    f'"{checked_override["from"]}": the batch would change nothing.'
                ]
            }
        )
    with transaction.atomic():
        batch = Batch.objects.create(
            project=project,
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
            filters=stored_filters,
            override=checked_override,
            total=len(sources),
        )
        BatchItem.objects.bulk_create(
            BatchItem(batch=batch, position=position, source_id=source_id)
            for position, source_id in enumerate(sources)
        )
        audit_record(
            project=project,
            actor=actor,
            action="batch.create",
            target=batch,
            after={"filters": stored_filters, "override": checked_override, "total": len(sources)},
        )
        if enqueue:
            batch_id = batch.pk
            transaction.on_commit(lambda: batch_enqueue(batch_id=batch_id), robust=True)
    return batch


def _checked_filters(
    filters: Any, *, project: Project, errors: dict[str, list[str]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filters as ``run_list`` keywords and as stored data (dates in ISO 8601)."""
    if filters is None:
        return {}, {}
    if not isinstance(filters, Mapping):
        errors["filters"] = ["Give the filters as an object."]
        return {}, {}
    keywords: dict[str, Any] = {}
    for key, value in filters.items():
        name = f"filters.{str(key)[:40]}"
        if key not in FILTER_KEYS:
            errors[name] = [f"Unknown filter; the filters are {', '.join(FILTER_KEYS)}."]
            continue
        if value in (None, ""):
            continue
        problem, checked = _checked_filter(key, value, project=project)
        if problem:
            errors[name] = [problem]
        else:
            keywords[key] = checked
    stored = {
        key: value.isoformat() if isinstance(value, dt.datetime) else value
        for key, value in keywords.items()
    }
    return keywords, stored


def _checked_filter(key: str, value: Any, *, project: Project) -> tuple[str, Any]:
    if key == "status":
        if value not in Run.Status.values:
            return f"Choose one of {', '.join(Run.Status.values)}.", None
    elif key == "verdict":
        if value not in verdicts.VERDICTS:
            return f"Choose one of {', '.join(verdicts.VERDICTS)}.", None
    elif key == "strategy":
        if value not in strategies.STRATEGIES:
            return f"Choose one of {', '.join(strategies.STRATEGIES)}.", None
    elif key == "pool":
        if not _is_id(value) or not Pool.objects.filter(pk=value, project=project).exists():
            return f"No pool {str(value)[:40]} in project {project.name}.", None
    elif key in _FILTER_TEXT_LIMITS:
        if not isinstance(value, str):
            return "Give text.", None
        if len(value) > _FILTER_TEXT_LIMITS[key]:
            return f"At most {_FILTER_TEXT_LIMITS[key]} characters.", None
    elif key in ("score_min", "score_max"):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            return "Give a number.", None
        return "", float(value)
    elif key in ("created_after", "created_before"):
        when = value if isinstance(value, dt.datetime) else None
        if isinstance(value, str) and len(value) <= 40:
            try:
                when = parse_datetime(value)
            except ValueError:
                when = None
        if when is None:
            return "Give a date and time in ISO 8601 (2026-01-31T00:00:00Z).", None
        if timezone.is_naive(when):
            when = timezone.make_aware(when)
        return "", when
    return "", value


def _checked_override(
    override: Any, *, project: Project, errors: dict[str, list[str]]
) -> dict[str, Any]:
    """The override as stored, or {} with the problems in ``errors`` (keyed ``override.*``)."""
    if not isinstance(override, Mapping):
        errors["override"] = ['Give an object: {"kind": "worker" | "instruction", ...}.']
        return {}
    kind = override.get("kind")
    fields = {
        OVERRIDE_WORKER: ("kind", "from", "to"),
        OVERRIDE_INSTRUCTION: ("kind", "match", "pattern", "replacement"),
    }
    if kind not in fields:
        errors["override.kind"] = ['Choose "worker" (one worker for another) or "instruction".']
        return {}
    unknown = sorted(str(name)[:40] for name in override if name not in fields[kind])
    if unknown:
        errors[f"override.{unknown[0]}"] = [
            f"A {kind} override takes {', '.join(fields[kind][1:])} only."
        ]
    if kind == OVERRIDE_WORKER:
        names = {}
        for field in ("from", "to"):
            value = override.get(field)
            if not isinstance(value, str) or not value.strip():
                errors[f"override.{field}"] = ["Give a worker's name."]
            elif len(value) > MAX_NAME_CHARS:
                errors[f"override.{field}"] = [f"At most {MAX_NAME_CHARS} characters."]
            else:
                names[field] = value.strip()
        if len(names) == 2:
            if names["from"] == names["to"]:
                errors["override.to"] = ["Give another worker than the one it replaces."]
            elif not Worker.objects.filter(
                pool__project=project, name=names["to"], enabled=True
            ).exists():
                errors["override.to"] = [
                    f'No pool of project {project.name} has an enabled worker named "{names["to"]}".'
                ]
        return {"kind": kind, **names}
    match = override.get("match", "literal")
    if match not in MATCH_KINDS:
        errors["override.match"] = ['Choose "literal" (a substring) or "regex".']
    pattern = override.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        errors["override.pattern"] = ["Give the text to look for."]
    elif len(pattern) > MAX_PATTERN_CHARS:
        errors["override.pattern"] = [f"At most {MAX_PATTERN_CHARS} characters."]
    elif match == "regex":
        problem = _regex_problem(pattern)
        if problem:
            errors["override.pattern"] = [problem]
    replacement = override.get("replacement", "")
    if not isinstance(replacement, str):
        errors["override.replacement"] = ["Give the replacement as text (it may be empty)."]
    elif len(replacement) > MAX_REPLACEMENT_CHARS:
        errors["override.replacement"] = [f"At most {MAX_REPLACEMENT_CHARS} characters."]
    return {"kind": kind, "match": match, "pattern": pattern, "replacement": replacement}


def _regex_problem(pattern: str) -> str:
    try:
        compiled = regex.compile(pattern)
    except (regex.error, OverflowError, RecursionError) as error:
        return f"Not a valid regular expression: {error}."
    if compiled.search("", timeout=REGEX_TIMEOUT_SECONDS) is not None:
        return "The expression matches empty text, so it would rewrite every instruction."
    return ""


# Applying the override ---------------------------------------------------------------------------


def override_edits(
    override: Mapping[str, Any], *, steps: Sequence[Step], workers: Sequence[Worker]
) -> tuple[list[dict[str, Any]], str]:
    """The edits (``replay_create``'s form) that ``override`` makes to a run with ``steps`` whose
    pool has the enabled ``workers``; or no edits and why none apply."""
    ordered = sorted(steps, key=lambda step: (step.round, step.index))
    if override["kind"] == OVERRIDE_WORKER:
        old, new = override["from"], override["to"]
        target = next((worker for worker in workers if worker.name == new), None)
        on_old = [step for step in ordered if step.worker_name == old]
        if not on_old:
            return [], f'No step ran on "{old}": nothing to change.'
        if target is None:
            return [], f'The run\'s pool has no enabled worker named "{new}".'
        return [{"step": step.pk, "worker": target.pk} for step in on_old], ""
    rewrite = _rewriter(override)
    edits = []
    for step in ordered:
        try:
            text = rewrite(step.instruction)
        except TimeoutError:
            return [], (
                f"The expression took over {REGEX_TIMEOUT_SECONDS * 1000:g} ms on the "
                f"instruction of step {step.round}.{step.index}."
            )
        if text != step.instruction:
            edits.append({"step": step.pk, "instruction": text})
    if not edits:
        how = "contains" if override["match"] == "literal" else "matches"
        return [], f"No step's instruction {how} {override['pattern'][:80]!r}: nothing to change."
    return edits, ""


def _rewriter(override: Mapping[str, Any]) -> Callable[[str], str]:
    pattern, replacement = override["pattern"], override["replacement"]
    if override["match"] == "literal":
        return lambda text: text.replace(pattern, replacement)
    compiled = regex.compile(pattern)

    def replace(match: Any) -> str:
        # Literal replacement; a zero-width match (a lookaround alone) changes nothing.
        return replacement if match.group(0) else ""

    return lambda text: compiled.sub(replace, text, timeout=REGEX_TIMEOUT_SECONDS)


# Advancing ---------------------------------------------------------------------------------------


def batch_advance(*, batch_id: int, limit: int = ADVANCE_CHUNK, enqueue: bool = True) -> bool:
    """Make the replays of up to ``limit`` pending items of batch ``batch_id``, each in a
    transaction of its own (a redelivered task skips the items already done); return whether
    items remain pending. Once none does, the batch is ``created``.

    Acts for the batch's creator, who must still be an admin of the project: otherwise every
    pending item ends with that error. ``enqueue=False`` leaves the replays queued (tests).
    """
    batch = Batch.objects.select_related("created_by", "project").filter(pk=batch_id).first()
    if batch is None or batch.status != Batch.Status.CREATING:
        return False
    actor = batch.created_by
    if selectors.user_role(user=actor, project=batch.project_id) != Membership.Role.ADMIN:
        who = actor.get_username() if actor is not None else "The batch's creator"
        _item_errors_all(batch, f"{who} is no longer an admin of the project.")
    else:
        pending = list(
            BatchItem.objects.filter(batch_id=batch.pk, replay__isnull=True, error="")
            .order_by("position")
            .values_list("pk", flat=True)[:limit]
        )
        for item_id in pending:
            _advance_item(batch, item_id, actor=actor, enqueue=enqueue)
    remaining = BatchItem.objects.filter(batch_id=batch.pk, replay__isnull=True, error="").exists()
    if not remaining:
        Batch.objects.filter(pk=batch.pk, status=Batch.Status.CREATING).update(
            status=Batch.Status.CREATED, created_all_at=timezone.now()
        )
    return remaining


def _advance_item(batch: Batch, item_id: int, *, actor: Any, enqueue: bool) -> None:
    with transaction.atomic():
        item = (
            BatchItem.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("source__pool")
            .filter(pk=item_id, replay__isnull=True, error="")
            .first()
        )
        if item is None:  # done by another delivery meanwhile
            return
        source = item.source
        workers = list(Worker.objects.filter(pool_id=source.pool_id, enabled=True))
        edits, problem = override_edits(
            batch.override, steps=list(Step.objects.filter(run_id=source.pk)), workers=workers
        )
        replay = None
        if not problem:
            try:
                replay = replay_create(source=source, actor=actor, edits=edits, enqueue=enqueue)
            except (ValidationError, PermissionDenied) as error:
                problem = _error_text(error)
        if replay is not None:
            item.replay = replay
            item.save(update_fields=["replay"])
            Batch.objects.filter(pk=batch.pk).update(replayed=F("replayed") + 1)
        else:
            item.error = problem[:MAX_ITEM_ERROR_CHARS]
            item.save(update_fields=["error"])
            Batch.objects.filter(pk=batch.pk).update(not_replayed=F("not_replayed") + 1)


def _item_errors_all(batch: Batch, error: str) -> None:
    with transaction.atomic():
        count = BatchItem.objects.filter(batch_id=batch.pk, replay__isnull=True, error="").update(
            error=error
        )
        Batch.objects.filter(pk=batch.pk).update(not_replayed=F("not_replayed") + count)


def _error_text(error: ValidationError | PermissionDenied) -> str:
    if isinstance(error, ValidationError) and hasattr(error, "message_dict"):
        return " ".join(
            f"{field}: {' '.join(messages)}" for field, messages in error.message_dict.items()
        )
    if isinstance(error, ValidationError):
        return " ".join(error.messages)
    return str(error)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


# Where the advancing runs --------------------------------------------------------------------------

# Inline advances hold only weak references on their loop: keep each here while it runs.
_inline_advances: set[asyncio.Task[None]] = set()


def batch_enqueue(*, batch_id: int) -> None:
    """Advance a committed batch in the background with the configured backend (on commit): the
    Celery task sent by name, or, inline, on the server's event loop (so the replays it makes
    start there like any inline run), else in a thread of its own."""
    if settings.CONDUCTOR_EXECUTION == "celery":
        from celery import current_app

        current_app.send_task(BATCH_ADVANCE_TASK, args=[batch_id])
        return
    loop = server_loop()
    if loop is None:
        threading.Thread(target=_advance_in_thread, args=(batch_id,), daemon=True).start()
        return

    def start() -> None:
        task = loop.create_task(_advance_inline(batch_id), name=f"batch-{batch_id}")
        _inline_advances.add(task)
        task.add_done_callback(_inline_advances.discard)

    loop.call_soon_threadsafe(start, context=contextvars.Context())


async def _advance_inline(batch_id: int) -> None:
    from django.db import connections

    async with ThreadSensitiveContext():
        try:
            while await sync_to_async(batch_advance)(batch_id=batch_id):
                await asyncio.sleep(0)
        except Exception:
            logger.exception("batch %s failed to advance", batch_id)
        finally:
            await asyncio.shield(sync_to_async(connections.close_all)())


def _advance_in_thread(batch_id: int) -> None:
    from django.db import connections

    try:
        while batch_advance(batch_id=batch_id):
            pass
    except Exception:
        logger.exception("batch %s failed to advance", batch_id)
    finally:
        connections.close_all()


__all__ = [
    "BATCH_ADVANCE_TASK",
    "MAX_BATCH_RUNS",
    "batch_advance",
    "batch_create",
    "batch_enqueue",
    "override_edits",
]
