"""Review services: who may do what, what each change stores, and the events it sends."""

from __future__ import annotations

import pytest
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, ValidationError

from orchestrator import wire
from orchestrator.models import (
    DEFAULT_FAILURE_KINDS,
    AuditEntry,
    Comment,
    FailureKind,
    Membership,
    RunEvent,
    RunLabel,
    RunReview,
)
from orchestrator.selectors import run_review
from orchestrator.services import review
from tests.factories import make_member, make_pool, make_project, make_run, make_step

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(sim_pool):
    return make_run(pool=sim_pool, status="failed", error="The conductor wrote no lists.")


@pytest.fixture
def step(run):
    return make_step(run=run, index=0)


@pytest.fixture
def kinds(project):
    return review.failure_kinds_ensure(project=project)


@pytest.fixture
def committed(django_capture_on_commit_callbacks, sent_events):
    """Run a service as a request would: its events are sent when its transaction commits."""

    def call(function, **arguments):
        with django_capture_on_commit_callbacks(execute=True):
            return function(**arguments)

    return call


def test_a_project_gets_the_default_failure_kinds_on_first_use(project):
    kinds = review.failure_kinds_ensure(project=project)
    assert [kind.name for kind in kinds] == list(DEFAULT_FAILURE_KINDS)
    # Asked again, the same kinds: none are added twice.
    assert review.failure_kinds_ensure(project=project) == kinds


def test_a_comment_on_a_step_is_stored_and_sent_to_the_run_page(
    run, step, reviewer, committed, sent_events
):
    comment = committed(
        review.comment_create, actor=reviewer, run=run, step=step, body="  **Wrong** worker.  "
    )

    assert comment.body == "**Wrong** worker."
    assert comment.step_id == step.pk and comment.author == reviewer
    [event] = sent_events
    assert event["type"] == wire.COMMENT_CREATED and event["run"] == run.pk
    assert event["comment"] == wire.comment_data(comment)
    assert event["comment"]["step"] == step.pk and event["comment"]["author"] == "rui-reviewer"
    # Stored like every event, so a page that reconnects gets it too.
    assert RunEvent.objects.filter(run=run, seq=event["seq"], type=wire.COMMENT_CREATED).exists()


def test_review_events_follow_the_runs_own_seqs(run, reviewer, committed, sent_events):
    run.last_seq = 7
    run.save(update_fields=["last_seq"])
    committed(review.comment_create, actor=reviewer, run=run, body="First.")
    committed(review.run_flag, actor=reviewer, run=run, flagged=True)
    assert [event["seq"] for event in sent_events] == [8, 9]


def test_viewers_may_not_review_and_outsiders_are_told_nothing(
    run, step, viewer, outsider, kinds, committed, sent_events
):
    changes = [
        (review.comment_create, {"run": run, "body": "Hello."}),
        (review.label_add, {"run": run, "kind": kinds[0]}),
        (review.label_remove, {"run": run, "kind": kinds[0]}),
        (review.run_assign, {"run": run, "assignee": None}),
        (review.review_score_set, {"run": run, "score": 0.0}),
        (review.run_flag, {"run": run, "flagged": True}),
        (review.review_resolve, {"run": run, "note": "Fixed."}),
        (review.review_reopen, {"run": run}),
    ]
    for function, arguments in changes:
        with pytest.raises(PermissionDenied):
            committed(function, actor=viewer, **arguments)
        # Not a member: as if the run did not exist (a 404 for the API, never a 403).
        with pytest.raises(ObjectDoesNotExist):
            committed(function, actor=outsider, **arguments)
    assert sent_events == []
    assert not Comment.objects.exists()
    assert not AuditEntry.objects.exists()


def test_admins_and_superusers_may_review(run, project_admin, superuser, committed):
    committed(review.comment_create, actor=project_admin, run=run, body="Seen.")
    committed(review.comment_create, actor=superuser, run=run, body="Seen too.")
    assert Comment.objects.filter(run=run).count() == 2


def test_labels_are_added_once_and_each_change_sends_the_whole_review(
    run, reviewer, kinds, committed, sent_events
):
    bad_plan, wrong_worker = kinds[0], kinds[1]
    committed(review.label_add, actor=reviewer, run=run, kind=bad_plan)
    committed(review.label_add, actor=reviewer, run=run, kind=wrong_worker)
    again = committed(review.label_add, actor=reviewer, run=run, kind=bad_plan)
    assert [label["name"] for label in again["labels"]] == ["bad plan", "wrong worker"]
    removed = committed(review.label_remove, actor=reviewer, run=run, kind=bad_plan)
    assert [label["name"] for label in removed["labels"]] == ["wrong worker"]

    # Adding a label the run has changes nothing and sends nothing.
    assert [event["type"] for event in sent_events] == [wire.REVIEW_CHANGED] * 3
    assert [[label["id"] for label in e["review"]["labels"]] for e in sent_events] == [
        [bad_plan.pk],
        [bad_plan.pk, wrong_worker.pk],
        [wrong_worker.pk],
    ]
    assert {event["change"] for event in sent_events} == {"labels"}
    assert {event["by"] for event in sent_events} == {"rui-reviewer"}


def test_a_label_of_another_project_is_refused(run, reviewer):
    other_kind = review.failure_kinds_ensure(project=make_project())[0]
    with pytest.raises(ValidationError) as error:
        review.label_add(actor=reviewer, run=run, kind=other_kind)
    assert "kind" in error.value.message_dict


def test_a_run_is_assigned_to_reviewers_and_admins_only(
    run, reviewer, project_admin, viewer, committed, sent_events
):
    assigned = committed(review.run_assign, actor=reviewer, run=run, assignee=project_admin)
    assert assigned["assignee"] == "ada-admin"
    with pytest.raises(ValidationError) as error:
        review.run_assign(actor=reviewer, run=run, assignee=viewer)
    assert "assignee" in error.value.message_dict
    cleared = committed(review.run_assign, actor=reviewer, run=run, assignee=None)
    assert cleared["assignee"] is None
    assert [event["review"]["assignee"] for event in sent_events] == ["ada-admin", None]


def test_a_human_score_is_from_0_to_1(run, reviewer, committed, sent_events):
    for wrong in (-0.1, 1.5):
        with pytest.raises(ValidationError) as error:
            review.review_score_set(actor=reviewer, run=run, score=wrong)
        assert "score" in error.value.message_dict
    assert (
        committed(review.review_score_set, actor=reviewer, run=run, score=0.25)["human_score"]
        == 0.25
    )
    assert [event["change"] for event in sent_events] == ["score"]


def test_a_resolution_names_the_fixing_replay_and_is_audited(
    run, sim_pool, reviewer, committed, sent_events
):
    replay = make_run(pool=sim_pool, replay_of=run, status="succeeded")
    resolved = committed(
        review.review_resolve, actor=reviewer, run=run, note="Bad plan; fixed.", fixed_by=replay
    )
    assert resolved["resolution"]["fixed_by"] == replay.pk
    assert resolved["resolution"]["by"] == "rui-reviewer"
    entry = AuditEntry.objects.get(action="review.resolve")
    assert entry.target_id == run.pk and entry.actor == reviewer
    assert entry.before == {"resolved": False, "note": "", "fixed_by": None}
    assert entry.after == {"resolved": True, "note": "Bad plan; fixed.", "fixed_by": replay.pk}

    reopened = committed(review.review_reopen, actor=reviewer, run=run)
    assert reopened["resolution"] is None
    assert AuditEntry.objects.filter(action="review.reopen").count() == 1
    assert [event["change"] for event in sent_events] == ["resolution", "resolution"]


def test_a_resolution_may_not_name_a_run_of_another_project(run, reviewer):
    elsewhere = make_run(pool=make_pool(project=make_project()))
    with pytest.raises(ValidationError) as error:
        review.review_resolve(actor=reviewer, run=run, fixed_by=elsewhere)
    assert "fixed_by" in error.value.message_dict
    with pytest.raises(ValidationError):
        review.review_resolve(actor=reviewer, run=run, fixed_by=run)
    assert not AuditEntry.objects.exists()


def test_comments_are_bounded_and_belong_to_their_run(run, sim_pool, reviewer):
    with pytest.raises(ValidationError) as error:
        review.comment_create(actor=reviewer, run=run, body="   ")
    assert "body" in error.value.message_dict
    with pytest.raises(ValidationError):
        review.comment_create(actor=reviewer, run=run, body="x" * (review.MAX_COMMENT_CHARS + 1))
    other_step = make_step(run=make_run(pool=sim_pool))
    with pytest.raises(ValidationError) as error:
        review.comment_create(actor=reviewer, run=run, step=other_step, body="Here?")
    assert "step" in error.value.message_dict
    assert not Comment.objects.exists()


def test_only_the_author_edits_and_the_author_or_an_admin_deletes(
    run, reviewer, project_admin, committed, sent_events
):
    comment = committed(review.comment_create, actor=reviewer, run=run, body="Frist.")
    other = make_member(project=run.project, role=Membership.Role.REVIEWER)
    with pytest.raises(PermissionDenied):
        review.comment_edit(actor=other, comment=comment, body="Mine now.")
    with pytest.raises(PermissionDenied):
        review.comment_delete(actor=other, comment=comment)
    edited = committed(review.comment_edit, actor=reviewer, comment=comment, body="First.")
    assert edited.body == "First." and edited.edited_at is not None
    comment_id = comment.pk
    committed(review.comment_delete, actor=project_admin, comment=comment)
    assert not Comment.objects.exists()
    assert [event["type"] for event in sent_events] == [
        wire.COMMENT_CREATED,
        wire.COMMENT_EDITED,
        wire.COMMENT_DELETED,
    ]
    assert sent_events[-1]["comment"] == comment_id and sent_events[-1]["step"] is None


def test_admins_configure_failure_kinds_and_each_change_is_audited(
    project, run, project_admin, reviewer, kinds
):
    with pytest.raises(PermissionDenied):
        review.failure_kind_create(actor=reviewer, project=project, name="Too slow")
    kind = review.failure_kind_create(actor=project_admin, project=project, name=" Too   slow ")
    assert kind.name == "Too slow" and kind.position > kinds[-1].position
    with pytest.raises(ValidationError):
        review.failure_kind_create(actor=project_admin, project=project, name="too SLOW")
    review.failure_kind_rename(actor=project_admin, kind=kind, name="Slow")

    review.label_add(actor=reviewer, run=run, kind=kinds[0])
    with pytest.raises(ValidationError) as error:
        review.failure_kind_delete(actor=project_admin, kind=kinds[0])
    assert "rename it instead" in str(error.value)
    review.failure_kind_delete(actor=project_admin, kind=kind)

    assert list(AuditEntry.objects.order_by("id").values_list("action", "before", "after")) == [
        ("failure_kind.create", {}, {"name": "Too slow"}),
        ("failure_kind.rename", {"name": "Too slow"}, {"name": "Slow"}),
        ("failure_kind.delete", {"name": "Slow"}, {}),
    ]
    assert not FailureKind.objects.filter(name="Slow").exists()


def test_a_run_goes_with_its_review_and_a_fixing_run_leaves_a_resolution(
    run, step, sim_pool, reviewer, kinds
):
    replay = make_run(pool=sim_pool, replay_of=run)
    review.label_add(actor=reviewer, run=run, kind=kinds[0])
    review.comment_create(actor=reviewer, run=run, step=step, body="Gone with it.")
    review.review_resolve(actor=reviewer, run=run, fixed_by=replay)
    replay.delete()
    assert run_review(run_id=run.pk)[0].resolved_at is not None
    run.delete()
    assert not Comment.objects.exists() and not RunLabel.objects.exists()
    assert not RunReview.objects.exists()
    assert FailureKind.objects.count() == len(kinds)  # the project's kinds stay
