"""Review endpoints: comments, labels, assignment, human score, flag and resolution of a run;
the review queue and its insight counts; a project's failure kinds.

Everyone who may see a run may read its review; reviewers and admins of its project may change
it (403 for viewers); a run, comment or failure kind outside the user's projects is a 404. The
rules are in ``orchestrator.services.review``; views validate, call it, and serialize.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from orchestrator import selectors, wire
from orchestrator.models import Run
from orchestrator.services import review as services
from webui.api.inputs import InputSerializer, ProjectField, RunFilterSerializer, refuse_body
from webui.api.lookups import (
    comment_or_404,
    failure_kind_or_404,
    project_or_400,
    run_or_400,
    visible_run_or_404,
)
from webui.api.pagination import MAX_PAGE, PagePagination
from webui.api.serializers import (
    NumberField,
    RunSummaryOutputSerializer,
    StrictBooleanField,
    TextField,
    WholeNumberField,
    follows,
)
from webui.converters import MAX_ID

# A run "gives a wrong answer" below this score (the human score where set, else the grader's).
DEFAULT_THRESHOLD = selectors.REVIEW_SCORE_THRESHOLD
MAX_INSIGHT_DAYS = 365


REVIEW_WRITERS = selectors.ROLES_THAT_RUN


def _call(function, **arguments: Any) -> Any:
    """Call a review service: a run outside the user's projects (``ObjectDoesNotExist``) is a
    404; its other refusals are the API's exception handler's."""
    try:
        return function(**arguments)
    except ObjectDoesNotExist as error:
        raise Http404(str(error)) from error


def _reviewer_or_403(request: Request, run: Any) -> None:
    """Refuse a member who may only read before looking at what they sent, so a viewer's write
    is a 403 whatever its body (the service checks the role again)."""
    if selectors.user_role(user=request.user, project=run.project_id) not in REVIEW_WRITERS:
        raise PermissionDenied("Only reviewers and admins of the project may do this.")


# Output ------------------------------------------------------------------------------------------


@follows(wire.Label)
class LabelOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The failure kind's id.")
    name = serializers.CharField()


@follows(wire.Resolution)
class ResolutionOutputSerializer(serializers.Serializer):
    by = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField(allow_null=True)
    note = serializers.CharField()
    fixed_by = serializers.IntegerField(
        allow_null=True, help_text="The run (a replay) that fixed it."
    )


@follows(wire.Review)
class ReviewOutputSerializer(serializers.Serializer):
    """A run's review: labels, assignee, human score, flag, resolution."""

    labels = LabelOutputSerializer(many=True)
    assignee = serializers.CharField(allow_null=True)
    human_score = serializers.FloatField(allow_null=True)
    flagged = serializers.BooleanField()
    resolution = ResolutionOutputSerializer(allow_null=True)


@follows(wire.Comment)
class CommentOutputSerializer(serializers.Serializer):
    """A comment; ``body`` is Markdown a user wrote (render it as untrusted text)."""

    id = serializers.IntegerField()
    run = serializers.IntegerField()
    step = serializers.IntegerField(allow_null=True)
    author = serializers.CharField(allow_null=True)
    body = serializers.CharField()
    created_at = serializers.DateTimeField(allow_null=True)
    edited_at = serializers.DateTimeField(allow_null=True)


class QueueRunOutputSerializer(RunSummaryOutputSerializer):
    """A run in the review queue: the run as lists show it, and its review."""

    review = serializers.SerializerMethodField()

    @extend_schema_field(ReviewOutputSerializer)
    def get_review(self, run) -> dict:
        return wire.review_data(getattr(run, "review", None), run.labels.all())


class FailureKindOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    position = serializers.IntegerField()


def _review_of(run: Run) -> dict:
    review, labels = selectors.run_review(run_id=run.pk)
    return wire.review_data(review, labels)


# A run's review ----------------------------------------------------------------------------------


class RunReviewApi(APIView):
    """A run's review: labels, assignee, human score, flag, resolution."""

    @extend_schema(operation_id="runs_review_retrieve", responses=ReviewOutputSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        return Response(ReviewOutputSerializer(_review_of(run)).data)


class RunCommentListCreateApi(APIView):
    """``GET``: a run's comments, oldest first. ``POST``: comment on the run or one of its steps
    (reviewers and admins)."""

    class CommentCreateInputSerializer(InputSerializer):
        body = TextField(
            max_length=services.MAX_COMMENT_CHARS, help_text="Markdown, shown as untrusted text."
        )
        step = WholeNumberField(
            required=False,
            allow_null=True,
            min_value=1,
            max_value=MAX_ID,
            help_text="A step of this run; empty: a comment on the run.",
        )

    @extend_schema(operation_id="runs_comments_list", responses=CommentOutputSerializer(many=True))
    def get(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        comments = [wire.comment_data(c) for c in selectors.comment_list(run=run)]
        return Response(CommentOutputSerializer(comments, many=True).data)

    @extend_schema(
        operation_id="runs_comments_create",
        request=CommentCreateInputSerializer,
        responses={201: CommentOutputSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        payload = self.CommentCreateInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        step = None
        if payload.validated_data.get("step") is not None:
            step = selectors.run_step(run=run, step_id=payload.validated_data["step"])
            if step is None:
                raise ValidationError({"step": ["No such step in this run."]})
        comment = _call(
            services.comment_create,
            actor=request.user,
            run=run,
            body=payload.validated_data["body"],
            step=step,
        )
        data = CommentOutputSerializer(wire.comment_data(comment)).data
        return Response(data, status=status.HTTP_201_CREATED)


class CommentDetailApi(APIView):
    """``PATCH``: edit your comment. ``DELETE``: delete your comment (admins: any comment)."""

    class CommentEditInputSerializer(InputSerializer):
        body = TextField(max_length=services.MAX_COMMENT_CHARS)

    @extend_schema(
        operation_id="comments_partial_update",
        request=CommentEditInputSerializer,
        responses=CommentOutputSerializer,
    )
    def patch(self, request: Request, comment_id: int) -> Response:
        comment = comment_or_404(request=request, comment_id=comment_id)
        if comment.author_id != request.user.pk:
            raise PermissionDenied("Only its author may edit a comment.")
        payload = self.CommentEditInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        comment = _call(
            services.comment_edit,
            actor=request.user,
            comment=comment,
            body=payload.validated_data["body"],
        )
        return Response(CommentOutputSerializer(wire.comment_data(comment)).data)

    @extend_schema(operation_id="comments_destroy", request=None, responses={204: None})
    def delete(self, request: Request, comment_id: int) -> Response:
        comment = comment_or_404(request=request, comment_id=comment_id)
        refuse_body(request)
        _call(services.comment_delete, actor=request.user, comment=comment)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunLabelAddApi(APIView):
    """Label a run with one of its project's failure kinds (reviewers and admins)."""

    class LabelAddInputSerializer(InputSerializer):
        kind = WholeNumberField(
            min_value=1, max_value=MAX_ID, help_text="A failure kind of the run's project."
        )

    @extend_schema(
        operation_id="runs_labels_create",
        request=LabelAddInputSerializer,
        responses=ReviewOutputSerializer,
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        payload = self.LabelAddInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        kind = selectors.failure_kind_get(user=request.user, kind_id=payload.validated_data["kind"])
        if kind is None or kind.project_id != run.project_id:
            raise ValidationError({"kind": ["No such failure kind in this run's project."]})
        review = _call(services.label_add, actor=request.user, run=run, kind=kind)
        return Response(ReviewOutputSerializer(review).data)


class RunLabelRemoveApi(APIView):
    """Take a failure kind off a run (reviewers and admins)."""

    @extend_schema(
        operation_id="runs_labels_destroy", request=None, responses={200: ReviewOutputSerializer}
    )
    def delete(self, request: Request, run_id: int, kind_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        kind = selectors.failure_kind_get(user=request.user, kind_id=kind_id)
        if kind is None or kind.project_id != run.project_id:
            raise Http404("No such failure kind in this run's project.")
        refuse_body(request)
        review = _call(services.label_remove, actor=request.user, run=run, kind=kind)
        return Response(ReviewOutputSerializer(review).data)


class RunAssignApi(APIView):
    """Assign a run's review to a reviewer or admin of its project, or to no one."""

    class AssignInputSerializer(InputSerializer):
        assignee = serializers.CharField(
            allow_null=True, max_length=150, help_text="A username; null: no one."
        )

    @extend_schema(
        operation_id="runs_assignee_update",
        request=AssignInputSerializer,
        responses=ReviewOutputSerializer,
    )
    def put(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        payload = self.AssignInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        username = payload.validated_data["assignee"]
        assignee = None
        if username is not None:
            assignee = selectors.user_by_username(username=username)
            if assignee is None:
                raise ValidationError(
                    {"assignee": ["Assign to a reviewer or admin of this project."]}
                )
        review = _call(services.run_assign, actor=request.user, run=run, assignee=assignee)
        return Response(ReviewOutputSerializer(review).data)


class RunScoreApi(APIView):
    """Set a run's human score (0: wrong, 1: right), or clear it with null."""

    class ScoreInputSerializer(InputSerializer):
        score = NumberField(allow_null=True, min_value=0.0, max_value=1.0)

    @extend_schema(
        operation_id="runs_score_update",
        request=ScoreInputSerializer,
        responses=ReviewOutputSerializer,
    )
    def put(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        payload = self.ScoreInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        review = _call(
            services.review_score_set,
            actor=request.user,
            run=run,
            score=payload.validated_data["score"],
        )
        return Response(ReviewOutputSerializer(review).data)


class RunFlagApi(APIView):
    """Flag a run for review (it enters the review queue), or take the flag off."""

    class FlagInputSerializer(InputSerializer):
        flagged = StrictBooleanField()

    @extend_schema(
        operation_id="runs_flag_update",
        request=FlagInputSerializer,
        responses=ReviewOutputSerializer,
    )
    def put(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        payload = self.FlagInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        review = _call(
            services.run_flag,
            actor=request.user,
            run=run,
            flagged=payload.validated_data["flagged"],
        )
        return Response(ReviewOutputSerializer(review).data)


class RunResolutionApi(APIView):
    """``PUT``: resolve a run's review, with a note and optionally the run (a replay) that fixed
    it. ``DELETE``: reopen it. Both are in the project's audit log."""

    class ResolveInputSerializer(InputSerializer):
        note = TextField(
            required=False, allow_blank=True, default="", max_length=services.MAX_NOTE_CHARS
        )
        fixed_by = WholeNumberField(
            required=False,
            allow_null=True,
            default=None,
            min_value=1,
            max_value=MAX_ID,
            help_text="Another run of the same project (the replay that fixed it).",
        )

    @extend_schema(
        operation_id="runs_resolution_update",
        request=ResolveInputSerializer,
        responses=ReviewOutputSerializer,
    )
    def put(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        payload = self.ResolveInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        fixed_by = None
        if payload.validated_data["fixed_by"] is not None:
            fixed_by = run_or_400(
                request=request, run_id=payload.validated_data["fixed_by"], field="fixed_by"
            )
        review = _call(
            services.review_resolve,
            actor=request.user,
            run=run,
            note=payload.validated_data["note"],
            fixed_by=fixed_by,
        )
        return Response(ReviewOutputSerializer(review).data)

    @extend_schema(
        operation_id="runs_resolution_destroy",
        request=None,
        responses={200: ReviewOutputSerializer},
    )
    def delete(self, request: Request, run_id: int) -> Response:
        run = visible_run_or_404(request=request, run_id=run_id)
        _reviewer_or_403(request, run)
        refuse_body(request)
        review = _call(services.review_reopen, actor=request.user, run=run)
        return Response(ReviewOutputSerializer(review).data)


# The queue and its insight -----------------------------------------------------------------------


class QueueFilterSerializer(RunFilterSerializer):
    """The runs list's filters, and the queue's own."""

    project = ProjectField(required=False, help_text="One of your projects, by id or slug.")
    kind = WholeNumberField(
        required=False, min_value=1, max_value=MAX_ID, help_text="A failure kind's id."
    )
    assignee = serializers.CharField(
        required=False, max_length=150, help_text="Runs assigned to this username."
    )
    state = serializers.ChoiceField(choices=selectors.REVIEW_STATES, required=False, default="open")
    threshold = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        default=DEFAULT_THRESHOLD,
        help_text="A score below it counts as a wrong answer.",
    )


def _project_filter(request: Request, filters: dict[str, Any]) -> dict[str, Any]:
    """``filters`` with the project it names (if any) found among the user's, else a 400."""
    if filters.get("project"):
        filters["project"] = project_or_400(request, filters["project"])
    else:
        filters.pop("project", None)
    return filters


class ReviewQueueApi(APIView):
    """The review queue, newest first: runs of your projects that failed, gave a wrong answer
    (score below ``threshold``), were flagged, or carry a failure label, filtered."""

    pagination_class = PagePagination

    @extend_schema(
        operation_id="review_queue",
        parameters=[
            QueueFilterSerializer,
            OpenApiParameter("page", int, description=f"Page number, from 1 to {MAX_PAGE}."),
            OpenApiParameter("page_size", int, description="Runs per page (at most 200)."),
        ],
        responses=QueueRunOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        filters = QueueFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        arguments = _project_filter(request, dict(filters.validated_data))
        runs = selectors.review_queue(user=request.user, **arguments)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(runs, request, view=self)
        data = QueueRunOutputSerializer(page, many=True, context={"request": request}).data
        return paginator.get_paginated_response(data)


class InsightsQuerySerializer(serializers.Serializer):
    project = ProjectField(help_text="One of your projects, by id or slug.")
    days = WholeNumberField(required=False, min_value=1, max_value=MAX_INSIGHT_DAYS, default=30)
    threshold = serializers.FloatField(
        required=False, min_value=0.0, max_value=1.0, default=DEFAULT_THRESHOLD
    )


class KindCountSerializer(serializers.Serializer):
    kind = serializers.IntegerField()
    name = serializers.CharField()
    runs = serializers.IntegerField()


class WorkerCountSerializer(serializers.Serializer):
    worker = serializers.CharField()
    runs = serializers.IntegerField()


class DayCountSerializer(serializers.Serializer):
    day = serializers.DateField()
    strategy = serializers.CharField()
    runs = serializers.IntegerField()


class InsightsOutputSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    by_kind = KindCountSerializer(many=True)
    by_worker = WorkerCountSerializer(many=True)
    by_day = DayCountSerializer(many=True)


def insights_since(days: int) -> dt.datetime:
    return timezone.now() - dt.timedelta(days=days)


class ReviewInsightsApi(APIView):
    """Counts over a project's runs that want review (any state) in the last ``days``: by
    failure kind, by worker, by strategy per day."""

    @extend_schema(
        operation_id="review_insights",
        parameters=[InsightsQuerySerializer],
        responses=InsightsOutputSerializer,
    )
    def get(self, request: Request) -> Response:
        query = InsightsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        arguments = _project_filter(request, {"project": query.validated_data["project"]})
        since = insights_since(query.validated_data["days"])
        counts = selectors.review_insights(
            user=request.user,
            project=arguments["project"],
            threshold=query.validated_data["threshold"],
            since=since,
        )
        return Response(InsightsOutputSerializer({"since": since, **counts}).data)


# Failure kinds -----------------------------------------------------------------------------------


class FailureKindListCreateApi(APIView):
    """``GET``: a project's failure kinds, in order. ``POST``: a new one (project admins)."""

    class FailureKindQuerySerializer(serializers.Serializer):
        project = ProjectField(help_text="One of your projects, by id or slug.")

    class FailureKindCreateInputSerializer(InputSerializer):
        project = ProjectField(help_text="One of your projects, by id or slug.")
        name = TextField(max_length=services.MAX_KIND_NAME_CHARS)

    @extend_schema(
        operation_id="failure_kinds_list",
        parameters=[FailureKindQuerySerializer],
        responses=FailureKindOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        query = self.FailureKindQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        project = _project_filter(request, dict(query.validated_data))["project"]
        kinds = services.failure_kinds_ensure(project=project)
        return Response(FailureKindOutputSerializer(kinds, many=True).data)

    @extend_schema(
        operation_id="failure_kinds_create",
        request=FailureKindCreateInputSerializer,
        responses={201: FailureKindOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        payload = self.FailureKindCreateInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        project = _project_filter(request, {"project": payload.validated_data["project"]})[
            "project"
        ]
        kind = _call(
            services.failure_kind_create,
            actor=request.user,
            project=project,
            name=payload.validated_data["name"],
        )
        return Response(FailureKindOutputSerializer(kind).data, status=status.HTTP_201_CREATED)


class FailureKindDetailApi(APIView):
    """``PATCH``: rename a failure kind. ``DELETE``: delete one no run carries (admins)."""

    class FailureKindRenameInputSerializer(InputSerializer):
        name = TextField(max_length=services.MAX_KIND_NAME_CHARS)

    @extend_schema(
        operation_id="failure_kinds_partial_update",
        request=FailureKindRenameInputSerializer,
        responses=FailureKindOutputSerializer,
    )
    def patch(self, request: Request, kind_id: int) -> Response:
        kind = failure_kind_or_404(request=request, kind_id=kind_id)
        payload = self.FailureKindRenameInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        kind = _call(
            services.failure_kind_rename,
            actor=request.user,
            kind=kind,
            name=payload.validated_data["name"],
        )
        return Response(FailureKindOutputSerializer(kind).data)

    @extend_schema(operation_id="failure_kinds_destroy", request=None, responses={204: None})
    def delete(self, request: Request, kind_id: int) -> Response:
        kind = failure_kind_or_404(request=request, kind_id=kind_id)
        refuse_body(request)
        _call(services.failure_kind_delete, actor=request.user, kind=kind)
        return Response(status=status.HTTP_204_NO_CONTENT)
