"""Batch replays: the override reaches exactly the steps it names, items that cannot be replayed
say why, progress counts what finished, the aggregate matches the runs, and the rules."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from orchestrator import selectors, wire
from orchestrator.models import AuditEntry, Batch, BatchItem, Membership, Run, Step
from orchestrator.providers.simulator import load_suite
from orchestrator.services import batches as batch_services
from orchestrator.services.batches import batch_advance, batch_create
from orchestrator.services.runs import run_create
from tests.factories import make_member, make_pool, make_worker

pytestmark = pytest.mark.django_db

ARITHMETIC = [task for task in load_suite() if task.domain == "arithmetic"][:3]


@pytest.fixture
def admin(project):
    return make_member(project=project, role=Membership.Role.ADMIN)


@pytest.fixture
def pool(project):
    """Weak never solves arithmetic, Strong always does, Other is average."""
    pool = make_pool(project=project, workers=0, max_steps=5)
    for position, (name, skill) in enumerate((("Weak", 0.0), ("Strong", 1.0), ("Other", 0.5))):
        make_worker(
            pool=pool,
            name=name,
            position=position,
            params={"latency": 0, "skills": {"arithmetic": skill}},
        )
    return pool


def finished(pool, execute, task, **kwargs) -> Run:
    run = run_create(
        pool=pool, input=task.question, reference=task.reference, enqueue=False, **kwargs
    )
    return execute(run)


@pytest.fixture
def runs(pool, execute):
    """Two wrong single runs on Weak, a right one on Strong, a mixture with a step on each."""
    return {
        "weak1": finished(pool, execute, ARITHMETIC[0], strategy="single"),
        "weak2": finished(pool, execute, ARITHMETIC[1], strategy="single"),
        "strong": finished(
            pool, execute, ARITHMETIC[2], strategy="single", strategy_options={"worker": 1}
        ),
        "moa": finished(
            pool,
            execute,
            ARITHMETIC[0],
            strategy="moa",
            strategy_options={"proposers": [0, 2], "aggregator": 1},
        ),
    }


WEAK_TO_STRONG = {"kind": "worker", "from": "Weak", "to": "Strong"}


def make_batch(project, admin, **kwargs) -> Batch:
    kwargs.setdefault("filters", {"worker": "Weak"})
    kwargs.setdefault("override", WEAK_TO_STRONG)
    return batch_create(project=project, actor=admin, enqueue=False, **kwargs)


def advance_all(batch: Batch) -> None:
    while batch_advance(batch_id=batch.pk, limit=2, enqueue=False):
        pass


def replays_of(batch: Batch) -> dict[int, Run]:
    return {
        item.source_id: item.replay
        for item in BatchItem.objects.filter(batch=batch).select_related("replay")
        if item.replay_id
    }


def summary(batch: Batch):
    """The batch as its page and the API show it, checked against its wire shape."""
    visible = selectors.batch_get(user=batch.created_by, batch_id=batch.pk)
    entry = selectors.batch_summary(batch=visible)
    assert wire.check(entry, wire.BatchSummary) == []
    return entry


def test_worker_override_moves_every_step_on_the_worker_and_no_other(project, admin, runs, execute):
    assert runs["weak1"].score == 0.0 and runs["strong"].score == 1.0

    batch = make_batch(project, admin)
    advance_all(batch)

    replays = replays_of(batch)
    assert set(replays) == {runs["weak1"].pk, runs["weak2"].pk, runs["moa"].pk}
    for source_id, replay in replays.items():
        replay = execute(replay)
        source_steps = list(Step.objects.filter(run_id=source_id).order_by("round", "index"))
        replay_steps = list(Step.objects.filter(run=replay).order_by("round", "index"))
        assert [s.worker_name for s in replay_steps] == [
            "Strong" if s.worker_name == "Weak" else s.worker_name for s in source_steps
        ]
        edited = {edit["step"] for edit in replay.edits}
        assert edited == {s.pk for s in source_steps if s.worker_name == "Weak"}
        assert all(edit["field"] == "worker" for edit in replay.edits)
        assert replay.status == Run.Status.SUCCEEDED and replay.score == 1.0
    # The mixture's proposer on Other read nothing that changed: reused, not run again.
    moa = Step.objects.filter(run=replays[runs["moa"].pk])
    assert moa.get(index=1).reused_from_id is not None
    assert moa.get(index=0).reused_from_id is None and moa.get(index=2).reused_from_id is None


def test_progress_counts_replays_finished_over_the_total(project, admin, runs, execute):
    batch = make_batch(project, admin, filters={})
    entry = summary(batch)
    assert entry["status"] == "creating"
    assert entry["progress"] == {
        "total": 4,
        "replayed": 0,
        "not_replayed": 0,
        "finished": 0,
        "done": 0,
        "fraction": 0.0,
    }

    assert batch_advance(batch_id=batch.pk, limit=3, enqueue=False) is True
    assert summary(batch)["progress"]["done"] == 1  # "strong" ran on no Weak step: not replayed
    advance_all(batch)
    entry = summary(batch)
    assert entry["status"] == "running"
    assert (entry["progress"]["replayed"], entry["progress"]["not_replayed"]) == (3, 1)
    assert entry["progress"]["done"] == 1

    replays = list(replays_of(batch).values())
    execute(replays[0])
    assert summary(batch)["progress"]["finished"] == 1
    assert summary(batch)["progress"]["fraction"] == 0.5
    for replay in replays[1:]:
        execute(replay)
    entry = summary(batch)
    assert entry["status"] == "finished"
    assert entry["progress"]["finished"] == 3 and entry["progress"]["fraction"] == 1.0
    not_replayed = next(item for item in entry["items"] if item["replay"] is None)
    assert not_replayed["source"]["id"] == runs["strong"].pk
    assert not_replayed["error"] == 'No step ran on "Weak": nothing to change.'


def test_aggregate_before_and_after_matches_the_runs(project, admin, runs, execute):
    batch = make_batch(project, admin, filters={})
    advance_all(batch)
    for replay in replays_of(batch).values():
        execute(replay)

    entry = summary(batch)
    aggregate = entry["aggregate"]
    pairs = [
        (Run.objects.get(pk=source_id), Run.objects.get(pk=replay.pk))
        for source_id, replay in replays_of(batch).items()
    ]
    assert aggregate["compared"] == len(pairs) == 3
    assert aggregate["fixed"] == sum(s.score != 1.0 and r.score == 1.0 for s, r in pairs) == 3
    assert aggregate["broken"] == 0
    assert aggregate["before"]["wrong"] == sum(s.score == 0.0 for s, _ in pairs)
    assert aggregate["after"]["right"] == 3
    assert aggregate["tokens_before"] == sum(s.tokens_in + s.tokens_out for s, _ in pairs)
    assert aggregate["tokens_after"] == sum(r.tokens_in + r.tokens_out for _, r in pairs)
    assert aggregate["cost_before"] == pytest.approx(sum(s.cost for s, _ in pairs), abs=1e-6)
    assert aggregate["wall_time_after"] == pytest.approx(
        sum(r.wall_time for _, r in pairs), abs=1e-6
    )
    # The reused proposer costs the mixture's replay nothing: fewer tokens than its source.
    moa_source, moa_replay = next((s, r) for s, r in pairs if s.strategy == "moa")
    assert moa_replay.tokens_in < moa_source.tokens_in
    for item in entry["items"]:
        if item["replay"]:
            assert item["compare_url"] == (
                f"/compare/?runs={item['source']['id']},{item['replay']['id']}"
            )


def test_instruction_override_rewrites_only_the_matching_steps(pool, project, admin, execute):
    source = finished(
        pool, execute, ARITHMETIC[0], strategy="reflection", strategy_options={"rounds": 2}
    )
    steps = list(Step.objects.filter(run=source).order_by("index"))
    # A phrase of the second step's instruction that the first step's does not hold.
    words = steps[1].instruction.split()
    pattern = next(
        " ".join(words[i : i + 2])
        for i in range(len(words) - 1)
        if " ".join(words[i : i + 2]) not in steps[0].instruction
    )

    batch = make_batch(
        project,
        admin,
        filters={"strategy": "reflection"},
        override={
            "kind": "instruction",
            "match": "literal",
            "pattern": pattern,
            "replacement": "X",
        },
    )
    advance_all(batch)

    replay = replays_of(batch)[source.pk]
    expected = {
        s.pk: s.instruction.replace(pattern, "X") for s in steps if pattern in s.instruction
    }
    assert {edit["step"]: edit["after"] for edit in replay.edits} == expected
    assert steps[0].pk not in expected


def test_regex_override_replaces_literally_and_skips_runs_it_does_not_match(
    pool, project, admin, execute
):
    source = finished(pool, execute, ARITHMETIC[0], strategy="single")
    instruction = Step.objects.get(run=source).instruction
    first_word = instruction.split()[0]

    batch = make_batch(
        project,
        admin,
        filters={"strategy": "single"},
        override={
            "kind": "instruction",
            "match": "regex",
            "pattern": rf"^{first_word}\b",
            "replacement": r"Carefully \1",
        },
    )
    advance_all(batch)

    (edit,) = replays_of(batch)[source.pk].edits
    assert edit["after"] == "Carefully \\1" + instruction[len(first_word) :]

    miss = make_batch(
        project,
        admin,
        filters={"strategy": "single"},
        override={"kind": "instruction", "match": "regex", "pattern": "zz+q", "replacement": ""},
    )
    advance_all(miss)
    items = list(BatchItem.objects.filter(batch=miss))
    assert len(items) == 2  # the source and its replay, both single runs
    for item in items:
        assert item.replay_id is None
        assert item.error == "No step's instruction matches 'zz+q': nothing to change."


def test_a_pool_without_the_new_worker_and_an_unfinished_run_are_not_replayed(
    project, admin, pool, execute
):
    elsewhere = make_pool(project=project, workers=0)
    make_worker(pool=elsewhere, name="Weak", position=0)
    lonely = finished(elsewhere, execute, ARITHMETIC[0], strategy="single")
    queued = run_create(pool=pool, input="What is 1 + 1?", strategy="single", enqueue=False)
    Step.objects.create(
        run=queued, round=0, index=0, instruction="x", worker_index=0, worker_name="Weak", model="m"
    )

    batch = make_batch(project, admin)
    advance_all(batch)

    errors = dict(BatchItem.objects.filter(batch=batch).values_list("source_id", "error"))
    assert errors[lonely.pk] == 'The run\'s pool has no enabled worker named "Strong".'
    assert "Only a finished run can be replayed" in errors[queued.pk]
    assert Batch.objects.get(pk=batch.pk).not_replayed == 2


def test_batch_create_records_the_audit_entry_in_its_transaction(project, admin, runs):
    batch = make_batch(project, admin)

    entry = AuditEntry.objects.get(action="batch.create")
    assert (entry.target_type, entry.target_id, entry.actor_id) == ("batch", batch.pk, admin.pk)
    assert entry.after == {"filters": {"worker": "Weak"}, "override": WEAK_TO_STRONG, "total": 3}
    assert list(BatchItem.objects.filter(batch=batch).values_list("source_id", flat=True)) == [
        runs["moa"].pk,
        runs["weak2"].pk,
        runs["weak1"].pk,
    ]


@pytest.mark.parametrize(
    ("filters", "override", "field"),
    [
        ({"status": "lost"}, WEAK_TO_STRONG, "filters.status"),
        ({"pool": 10**12}, WEAK_TO_STRONG, "filters.pool"),
        ({"colour": "red"}, WEAK_TO_STRONG, "filters.colour"),
        ({"created_after": "last week"}, WEAK_TO_STRONG, "filters.created_after"),
        ({"worker": "Nobody"}, WEAK_TO_STRONG, "filters"),
        ({}, {"kind": "model"}, "override.kind"),
        ({}, "Weak", "override"),
        ({}, {"kind": "worker", "from": "Weak", "to": "Weak"}, "override.to"),
        ({}, {"kind": "worker", "from": "Weak", "to": "Ghost"}, "override.to"),
        ({}, {"kind": "worker", "from": "", "to": "Strong"}, "override.from"),
        ({}, {"kind": "worker", "from": "Ghost", "to": "Strong"}, "override.from"),
        ({"verdict": "green"}, WEAK_TO_STRONG, "filters.verdict"),
        (
            {},
            {"kind": "worker", "from": "Weak", "to": "Strong", "pattern": "x"},
            "override.pattern",
        ),
        ({}, {"kind": "instruction", "pattern": "", "replacement": "x"}, "override.pattern"),
        ({}, {"kind": "instruction", "pattern": "a" * 201, "replacement": ""}, "override.pattern"),
        ({}, {"kind": "instruction", "match": "glob", "pattern": "a"}, "override.match"),
        (
            {},
            {"kind": "instruction", "match": "regex", "pattern": "(", "replacement": ""},
            "override.pattern",
        ),
        (
            {},
            {"kind": "instruction", "match": "regex", "pattern": "a*", "replacement": ""},
            "override.pattern",
        ),
        ({}, {"kind": "instruction", "pattern": "a", "replacement": 3}, "override.replacement"),
    ],
)
def test_bad_input_names_the_field_and_creates_nothing(
    project, admin, runs, filters, override, field
):
    with pytest.raises(ValidationError) as raised:
        batch_create(project=project, actor=admin, filters=filters, override=override)

    assert field in raised.value.message_dict
    assert not Batch.objects.exists() and not BatchItem.objects.exists()
    assert not AuditEntry.objects.filter(action="batch.create").exists()


def test_the_runs_lists_verdict_filter_picks_the_runs_a_batch_replays(project, admin, runs):
    batch = make_batch(project, admin, filters={"verdict": "wrong"})

    wrong = {run.pk for run in runs.values() if run.score == 0.0}
    assert wrong and runs["strong"].pk not in wrong
    assert set(BatchItem.objects.filter(batch=batch).values_list("source_id", flat=True)) == wrong
    assert batch.filters == {"verdict": "wrong"}


def test_a_filter_matching_more_than_the_bound_is_refused(project, admin, runs, monkeypatch):
    monkeypatch.setattr(batch_services, "MAX_BATCH_RUNS", 2)

    with pytest.raises(ValidationError) as raised:
        make_batch(project, admin)

    assert "More than 2 runs" in raised.value.message_dict["filters"][0]
    assert not Batch.objects.exists()


@pytest.mark.parametrize("role", [Membership.Role.REVIEWER, Membership.Role.VIEWER])
def test_only_admins_create_batches(project, runs, role):
    member = make_member(project=project, role=role)

    with pytest.raises(PermissionDenied):
        batch_create(project=project, actor=member, filters={}, override=WEAK_TO_STRONG)

    assert not Batch.objects.exists()


def test_a_creator_who_is_no_longer_admin_replays_nothing_more(project, admin, runs):
    batch = make_batch(project, admin)
    Membership.objects.filter(user=admin).update(role=Membership.Role.VIEWER)

    assert batch_advance(batch_id=batch.pk, enqueue=False) is False

    assert not Run.objects.filter(replay_of__isnull=False).exists()
    errors = set(BatchItem.objects.filter(batch=batch).values_list("error", flat=True))
    assert errors == {f"{admin.get_username()} is no longer an admin of the project."}
    assert Batch.objects.get(pk=batch.pk).status == Batch.Status.CREATED


def test_a_regex_that_backtracks_too_long_stops_at_its_timeout():
    override = {"kind": "instruction", "match": "regex", "pattern": r"(a+)+b", "replacement": ""}
    steps = [Step(pk=1, round=0, index=0, instruction="a" * 30000 + "!")]

    edits, problem = batch_services.override_edits(override, steps=steps, workers=[])

    assert edits == []
    assert problem == "The expression took over 50 ms on the instruction of step 0.0."
