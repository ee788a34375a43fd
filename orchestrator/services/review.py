"""Review of runs: comments (on a run or one of its steps), failure-kind labels, assignment,
human score, flag and resolution; and a project's list of failure kinds.

Reviewers and admins of the run's project (and superusers) may review; viewers may not
(``PermissionDenied``); a user outside the project gets ``ObjectDoesNotExist``, so a caller
answers as if the run did not exist. Every change is one transaction that first locks the run
row, so the ``review.changed`` events of concurrent changes carry the review in seq order; the
events (``orchestrator/wire.py``) are sent on commit. Resolutions and failure-kind changes are
written to the audit log in the same transaction.
"""

from __future__ import annotations

from typing import Any, Final

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from orchestrator import events, wire
from orchestrator.models import (
    DEFAULT_FAILURE_KINDS,
    Comment,
    FailureKind,
    Membership,
    Project,
    Run,
    RunLabel,
    RunReview,
    Step,
)
from orchestrator.selectors import run_review, user_role
from orchestrator.services.audit import audit_record

REVIEW_ROLES: Final = (Membership.Role.ADMIN, Membership.Role.REVIEWER)
MAX_COMMENT_CHARS: Final = 10_000
MAX_COMMENTS_PER_RUN: Final = 500
MAX_NOTE_CHARS: Final = 2_000
MAX_FAILURE_KINDS: Final = 30
MAX_KIND_NAME_CHARS: Final = 60


def _role(actor: Any, project_id: int) -> str:
    role = user_role(user=actor, project=project_id)
    if role is None:
        # Not a member: the run is not there for them (a 404, never a 403).
        raise ObjectDoesNotExist("No such run.")
    return role


def _require_reviewer(actor: Any, project_id: int) -> None:
    if _role(actor, project_id) not in REVIEW_ROLES:
        raise PermissionDenied("Only reviewers and admins may review runs.")


def _require_admin(actor: Any, project_id: int) -> None:
    if _role(actor, project_id) != Membership.Role.ADMIN:
        raise PermissionDenied("Only the project's admins may change its failure kinds.")


def _lock_run(run: Run) -> None:
    """Take the run row's lock first: review changes of one run then commit in the order of
    their event seqs (which the same row gives out)."""
    list(Run.objects.select_for_update().filter(pk=run.pk).values_list("pk"))


def _publish_review(run: Run, *, change: str, actor: Any) -> wire.Review:
    review, labels = run_review(run_id=run.pk)
    data = wire.review_data(review, labels)
    events.publish(
        run.pk,
        wire.REVIEW_CHANGED,
        {"review": data, "change": change, "by": actor.get_username()},
    )
    return data


def _review_row(run: Run) -> RunReview:
    review, _ = RunReview.objects.get_or_create(run=run)
    return review


def _clean_text(value: str, *, field: str, limit: int, required: bool) -> str:
    text = value.strip()
    if required and not text:
        raise ValidationError({field: ["Write something."]})
    if len(text) > limit:
        raise ValidationError({field: [f"At most {limit:,} characters."]})
    if "\x00" in text:
        raise ValidationError({field: ["No NUL characters."]})
    return text


# Comments ----------------------------------------------------------------------------------------


def comment_create(*, actor: Any, run: Run, body: str, step: Step | None = None) -> Comment:
    """A comment by ``actor`` on ``run``, or on ``step`` (a step of that run)."""
    _require_reviewer(actor, run.project_id)
    body = _clean_text(body, field="body", limit=MAX_COMMENT_CHARS, required=True)
    if step is not None and step.run_id != run.pk:
        raise ValidationError({"step": ["That step is not part of this run."]})
    with transaction.atomic():
        _lock_run(run)
        if Comment.objects.filter(run=run).count() >= MAX_COMMENTS_PER_RUN:
            raise ValidationError(
                {"body": [f"A run holds at most {MAX_COMMENTS_PER_RUN} comments."]}
            )
        comment = Comment.objects.create(run=run, step=step, author=actor, body=body)
        events.publish(run.pk, wire.COMMENT_CREATED, {"comment": wire.comment_data(comment)})
    return comment


def comment_edit(*, actor: Any, comment: Comment, body: str) -> Comment:
    """A new body for a comment; only its author may edit it."""
    _require_reviewer(actor, comment.run.project_id)
    if comment.author_id != actor.pk:
        raise PermissionDenied("Only a comment's author may edit it.")
    body = _clean_text(body, field="body", limit=MAX_COMMENT_CHARS, required=True)
    with transaction.atomic():
        _lock_run(comment.run)
        comment.body = body
        comment.edited_at = timezone.now()
        comment.save(update_fields=["body", "edited_at"])
        events.publish(comment.run_id, wire.COMMENT_EDITED, {"comment": wire.comment_data(comment)})
    return comment


def comment_delete(*, actor: Any, comment: Comment) -> None:
    """Delete a comment: its author, or an admin of the project."""
    role = _role(actor, comment.run.project_id)
    if role not in REVIEW_ROLES:
        raise PermissionDenied("Only reviewers and admins may review runs.")
    if comment.author_id != actor.pk and role != Membership.Role.ADMIN:
        raise PermissionDenied("Only a comment's author or an admin may delete it.")
    with transaction.atomic():
        _lock_run(comment.run)
        comment_id, step_id, run_id = comment.pk, comment.step_id, comment.run_id
        comment.delete()
        events.publish(run_id, wire.COMMENT_DELETED, {"comment": comment_id, "step": step_id})


# Labels, assignment, score, flag, resolution -----------------------------------------------------


def label_add(*, actor: Any, run: Run, kind: FailureKind) -> wire.Review:
    """Put a failure kind of the run's project on the run (nothing changes if it is there)."""
    _require_reviewer(actor, run.project_id)
    if kind.project_id != run.project_id:
        raise ValidationError({"kind": ["No such failure kind in this run's project."]})
    with transaction.atomic():
        _lock_run(run)
        _, created = RunLabel.objects.get_or_create(
            run=run, kind=kind, defaults={"added_by": actor}
        )
        if not created:
            review, labels = run_review(run_id=run.pk)
            return wire.review_data(review, labels)
        return _publish_review(run, change="labels", actor=actor)


def label_remove(*, actor: Any, run: Run, kind: FailureKind) -> wire.Review:
    """Take a failure kind off the run (nothing changes if it is not there)."""
    _require_reviewer(actor, run.project_id)
    with transaction.atomic():
        _lock_run(run)
        deleted, _ = RunLabel.objects.filter(run=run, kind=kind).delete()
        if not deleted:
            review, labels = run_review(run_id=run.pk)
            return wire.review_data(review, labels)
        return _publish_review(run, change="labels", actor=actor)


def run_assign(*, actor: Any, run: Run, assignee: Any | None) -> wire.Review:
    """Assign the run's review to ``assignee`` (a reviewer or admin of its project, the actor
    included), or to no one."""
    _require_reviewer(actor, run.project_id)
    if assignee is not None and (
        not assignee.is_active
        or user_role(user=assignee, project=run.project_id) not in REVIEW_ROLES
    ):
        raise ValidationError({"assignee": ["Assign to a reviewer or admin of this project."]})
    with transaction.atomic():
        _lock_run(run)
        review = _review_row(run)
        review.assignee = assignee
        review.save(update_fields=["assignee", "updated_at"])
        return _publish_review(run, change="assignee", actor=actor)


def review_score_set(*, actor: Any, run: Run, score: float | None) -> wire.Review:
    """A human score for the run's answer, from 0 (wrong) to 1 (right); None clears it. It
    stands beside the grader's score and, where set, decides whether the answer counts as
    wrong in the review queue."""
    _require_reviewer(actor, run.project_id)
    if score is not None and not (0.0 <= score <= 1.0):
        raise ValidationError({"score": ["A score from 0 to 1."]})
    with transaction.atomic():
        _lock_run(run)
        review = _review_row(run)
        review.human_score = score
        review.scored_by = actor if score is not None else None
        review.save(update_fields=["human_score", "scored_by", "updated_at"])
        return _publish_review(run, change="score", actor=actor)


def run_flag(*, actor: Any, run: Run, flagged: bool) -> wire.Review:
    """Flag the run for review (it enters the queue whatever its status and score), or not."""
    _require_reviewer(actor, run.project_id)
    with transaction.atomic():
        _lock_run(run)
        review = _review_row(run)
        review.flagged = flagged
        review.flagged_by = actor if flagged else None
        review.save(update_fields=["flagged", "flagged_by", "updated_at"])
        return _publish_review(run, change="flag", actor=actor)


def review_resolve(
    *, actor: Any, run: Run, note: str = "", fixed_by: Run | None = None
) -> wire.Review:
    """Resolve the run's review, with a note and optionally the run (a replay) that fixed it.
    Resolving again replaces the note and the fixing run. Audited."""
    _require_reviewer(actor, run.project_id)
    note = _clean_text(note, field="note", limit=MAX_NOTE_CHARS, required=False)
    if fixed_by is not None and (fixed_by.project_id != run.project_id or fixed_by.pk == run.pk):
        raise ValidationError({"fixed_by": ["Name another run of this run's project."]})
    with transaction.atomic():
        _lock_run(run)
        review = _review_row(run)
        before = _resolution_fields(review)
        review.resolved_at = timezone.now()
        review.resolved_by = actor
        review.resolution_note = note
        review.fixed_by = fixed_by
        review.save(
            update_fields=[
                "resolved_at", "resolved_by", "resolution_note", "fixed_by", "updated_at"
            ]
        )  # fmt: skip
        audit_record(
            project=run.project_id,
            actor=actor,
            action="review.resolve",
            target=run,
            before=before,
            after=_resolution_fields(review),
        )
        return _publish_review(run, change="resolution", actor=actor)


def review_reopen(*, actor: Any, run: Run) -> wire.Review:
    """Undo a resolution: the run is back in the queue if it qualifies. Audited. Nothing
    changes (and nothing is sent) if the review is not resolved."""
    _require_reviewer(actor, run.project_id)
    with transaction.atomic():
        _lock_run(run)
        review = _review_row(run)
        if review.resolved_at is None:
            _, labels = run_review(run_id=run.pk)
            return wire.review_data(review, labels)
        before = _resolution_fields(review)
        review.resolved_at = None
        review.resolved_by = None
        review.resolution_note = ""
        review.fixed_by = None
        review.save(
            update_fields=[
                "resolved_at", "resolved_by", "resolution_note", "fixed_by", "updated_at"
            ]
        )  # fmt: skip
        audit_record(
            project=run.project_id,
            actor=actor,
            action="review.reopen",
            target=run,
            before=before,
            after=_resolution_fields(review),
        )
        return _publish_review(run, change="resolution", actor=actor)


def _resolution_fields(review: RunReview) -> dict[str, Any]:
    return {
        "resolved": review.resolved_at is not None,
        "note": review.resolution_note,
        "fixed_by": review.fixed_by_id,
    }


# Failure kinds -----------------------------------------------------------------------------------


def failure_kinds_ensure(*, project: Project | int) -> list[FailureKind]:
    """The project's failure kinds, in order; the defaults are made the first time a project's
    kinds are asked for (a project always keeps at least one)."""
    project_id = project if isinstance(project, int) else project.pk
    kinds = list(FailureKind.objects.filter(project_id=project_id).order_by("position", "id"))
    if kinds:
        return kinds
    try:
        with transaction.atomic():
            FailureKind.objects.bulk_create(
                FailureKind(project_id=project_id, name=name, position=position)
                for position, name in enumerate(DEFAULT_FAILURE_KINDS)
            )
    except IntegrityError:
        pass  # another request made them first
    return list(FailureKind.objects.filter(project_id=project_id).order_by("position", "id"))


def _kind_name(name: str, *, project_id: int, exclude: int | None = None) -> str:
    name = " ".join(name.split())
    if not name:
        raise ValidationError({"name": ["Give the failure kind a name."]})
    if len(name) > MAX_KIND_NAME_CHARS:
        raise ValidationError({"name": [f"At most {MAX_KIND_NAME_CHARS} characters."]})
    clash = FailureKind.objects.filter(project_id=project_id, name__iexact=name)
    if exclude is not None:
        clash = clash.exclude(pk=exclude)
    if clash.exists():
        raise ValidationError({"name": ["This project already has a failure kind of that name."]})
    return name


def failure_kind_create(*, actor: Any, project: Project, name: str) -> FailureKind:
    """A new failure kind at the end of the project's list (admins). Audited."""
    _require_admin(actor, project.pk)
    failure_kinds_ensure(project=project)
    with transaction.atomic():
        list(Project.objects.select_for_update().filter(pk=project.pk).values_list("pk"))
        name = _kind_name(name, project_id=project.pk)
        kinds = FailureKind.objects.filter(project=project)
        if kinds.count() >= MAX_FAILURE_KINDS:
            raise ValidationError({"name": [f"A project has at most {MAX_FAILURE_KINDS} kinds."]})
        position = (kinds.aggregate(last=Max("position"))["last"] or 0) + 1
        kind = FailureKind.objects.create(project=project, name=name, position=position)
        audit_record(
            project=project, actor=actor, action="failure_kind.create", target=kind,
            after={"name": name},
        )  # fmt: skip
    return kind


def failure_kind_rename(*, actor: Any, kind: FailureKind, name: str) -> FailureKind:
    """Rename a failure kind; the runs labelled with it keep the label. Audited."""
    _require_admin(actor, kind.project_id)
    with transaction.atomic():
        name = _kind_name(name, project_id=kind.project_id, exclude=kind.pk)
        before = kind.name
        kind.name = name
        kind.save(update_fields=["name"])
        audit_record(
            project=kind.project_id, actor=actor, action="failure_kind.rename", target=kind,
            before={"name": before}, after={"name": name},
        )  # fmt: skip
    return kind


def failure_kind_delete(*, actor: Any, kind: FailureKind) -> None:
    """Delete a failure kind no run is labelled with (rename one that is used). Audited."""
    _require_admin(actor, kind.project_id)
    with transaction.atomic():
        used = RunLabel.objects.filter(kind=kind).count()
        if used:
            raise ValidationError(
                {"kind": [f"{used} runs carry this label: rename it instead of deleting it."]}
            )
        if FailureKind.objects.filter(project_id=kind.project_id).count() <= 1:
            raise ValidationError({"kind": ["A project keeps at least one failure kind."]})
        audit_record(
            project=kind.project_id, actor=actor, action="failure_kind.delete", target=kind,
            before={"name": kind.name},
        )  # fmt: skip
        kind.delete()
