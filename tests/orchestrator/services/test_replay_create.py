"""replay_create and a replay's execution: which steps run again for each kind of edit, what is
reused, the totals, the events, the rounds after an edited one, replan_from, and the rules."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from orchestrator import providers
from orchestrator.engine.types import Completion, Message
from orchestrator.models import AuditEntry, Membership, Plan, Run, RunEvent, Step, Worker
from orchestrator.services.replay import replay_create
from orchestrator.services.runs import run_create
from tests.factories import make_member, make_pool

pytestmark = pytest.mark.django_db

QUESTION = "What is 6 times 7?"


@dataclass
class Script:
    """Scripted models: the conductor writes ``rounds[r]`` (three-list text) in round r; a worker
    answers from its own turn (the step's instruction) and what it read, so a replayed step's
    response is the same exactly when its input is. Every call is logged as (model, content)."""

    rounds: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def conductor_calls(self) -> int:
        return sum(model == "sim/conductor" for model, _ in self.calls)

    def worker_calls(self) -> list[str]:
        return [content for model, content in self.calls if model != "sim/conductor"]


class ScriptedClient:
    def __init__(self, model: str, script: Script) -> None:
        self.model = model
        self.script = script

    async def complete(self, messages: Sequence[Message], *, timeout: float) -> Completion:
        own = messages[-1]["content"]
        self.script.calls.append((self.model, own))
        if self.model == "sim/conductor":
            prompt = next(m["content"] for m in messages if "## Workers" in m["content"])
            round_ = 1 if "## Previous answer" in prompt else 0
            text = self.script.rounds[round_] if round_ < len(self.script.rounds) else ""
            return Completion(text or _lists([], [], []), tokens_in=100, tokens_out=10, cost=0.01)
        task = own.split("Your task:\n")[-1]
        if "SAME" in task:
            text = "Answer: 42"
        else:
            read = [m["content"] for m in messages[1:-1] if m["role"] == "assistant"]
            text = f"{self.model} did <{task}> reading {read}. Answer: 42"
        return Completion(text, tokens_in=10, tokens_out=5, cost=0.001)


def _lists(workers: list[int], tasks: list[str], access: list) -> str:
    return (
        f"```python\nmodel_id = {workers}\nsubtasks = {json.dumps(tasks)}\n"
        f"access_list = {json.dumps(access)}\n```"
    )


@pytest.fixture
def script(monkeypatch) -> Script:
    script = Script()
    monkeypatch.setattr(providers, "make_client", lambda model, **_: ScriptedClient(model, script))
    return script


@pytest.fixture
def pool(project):
    return make_pool(project=project, workers=3, max_steps=6, max_rounds=2)


@pytest.fixture
def admin(project):
    return make_member(project=project, role=Membership.Role.ADMIN)


def finished_run(pool, execute, **kwargs) -> Run:
    run = execute(run_create(pool=pool, input=QUESTION, enqueue=False, **kwargs))
    assert run.status == Run.Status.SUCCEEDED, run.error
    return run


def replay(source, admin, execute, script, **kwargs) -> Run:
    script.calls.clear()
    run = replay_create(source=source, actor=admin, enqueue=False, **kwargs)
    return execute(run)


def steps_of(run) -> list[Step]:
    return list(Step.objects.filter(run=run).order_by("round", "index"))


def ran_again(run) -> list[tuple[int, int]]:
    return [(s.round, s.index) for s in steps_of(run) if s.reused_from_id is None]


def step_at(run, round_, index) -> Step:
    return Step.objects.get(run=run, round=round_, index=index)


# Fixed strategies: a chain and a fan-in ---------------------------------------------------------


def test_editing_the_last_step_of_a_four_step_chain_makes_one_model_call(
    pool, admin, execute, script
):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 3})
    last = step_at(source, 0, 3)

    run = replay(
        source, admin, execute, script, edits=[{"step": last.pk, "instruction": "Check it twice."}]
    )

    assert run.status == Run.Status.SUCCEEDED, run.error
    assert len(script.calls) == 1
    assert ran_again(run) == [(0, 3)]
    assert run.model_calls == 1
    assert (run.tokens_in, run.tokens_out) == (10, 5), "reused steps are not counted again"
    reused = steps_of(run)[:3]
    assert [s.reused_from_id for s in reused] == [s.pk for s in steps_of(source)[:3]]
    assert [s.response for s in reused] == [s.response for s in steps_of(source)[:3]]
    assert all(s.status == Step.Status.SUCCEEDED for s in steps_of(run))
    assert step_at(run, 0, 3).instruction == "Check it twice."
    assert "Check it twice." in run.answer
    assert run.replay_of_id == source.pk and run.pool_id == source.pool_id


def test_editing_the_second_step_of_a_four_step_chain_makes_three_model_calls(
    pool, admin, execute, script
):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 3})
    second = step_at(source, 0, 1)
    other = Worker.objects.filter(pool=pool).exclude(pk=second.worker_id).first()

    run = replay(source, admin, execute, script, edits=[{"step": second.pk, "worker": other.pk}])

    assert len(script.calls) == 3
    assert ran_again(run) == [(0, 1), (0, 2), (0, 3)]
    assert step_at(run, 0, 1).worker_name == other.name
    assert run.model_calls == 3


def test_fan_in_edit_of_one_proposer_reruns_it_and_the_aggregator_only(
    pool, admin, execute, script
):
    source = finished_run(pool, execute, strategy="moa")  # 2 proposers, aggregator reads "all"
    assert len(steps_of(source)) == 3

    run = replay(
        source,
        admin,
        execute,
        script,
        edits=[{"step": step_at(source, 0, 1).pk, "instruction": "Propose differently."}],
    )

    assert ran_again(run) == [(0, 1), (0, 2)]
    assert len(script.calls) == 2


def test_an_access_edit_makes_the_step_read_what_it_names(pool, admin, execute, script):
    source = finished_run(pool, execute, strategy="moa")
    aggregator = step_at(source, 0, 2)

    run = replay(source, admin, execute, script, edits=[{"step": aggregator.pk, "access": [1]}])

    assert ran_again(run) == [(0, 2)]
    replayed = step_at(run, 0, 2)
    assert replayed.access == [1]
    assert replayed.reads == [step_at(run, 0, 1).pk]
    assert step_at(source, 0, 0).response not in json.dumps(replayed.messages)


def test_an_access_edit_naming_every_earlier_step_of_an_all_step_changes_nothing(
    pool, admin, execute, script
):
    source = finished_run(pool, execute, strategy="moa")  # the aggregator reads "all"
    aggregator = step_at(source, 0, 2)
    assert aggregator.access == "all"

    run = replay(source, admin, execute, script, edits=[{"step": aggregator.pk, "access": [0, 1]}])

    assert run.edits == []
    assert script.calls == []
    assert ran_again(run) == []


def test_an_all_edit_of_a_step_that_reads_every_earlier_step_changes_nothing(
    pool, admin, execute, script
):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 3})
    second = step_at(source, 0, 1)
    assert second.access == [0]

    run = replay(source, admin, execute, script, edits=[{"step": second.pk, "access": "all"}])

    assert run.edits == []
    assert script.calls == []


def test_replay_unchanged_calls_no_model_and_gives_the_same_answer(pool, admin, execute, script):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 3})

    run = replay(source, admin, execute, script, edits=[])

    assert run.status == Run.Status.SUCCEEDED
    assert script.calls == []
    assert run.answer == source.answer
    assert ran_again(run) == []
    assert (run.model_calls, run.tokens_in, run.cost) == (0, 0, 0.0)


def test_fresh_replay_runs_every_step_again(pool, admin, execute, script):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 3})

    run = replay(source, admin, execute, script, fresh=True)

    assert len(script.calls) == 4
    assert ran_again(run) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert run.model_calls == 4
    assert run.edits[0]["field"] == "fresh"


# The conductor: a tree, and rounds --------------------------------------------------------------

TREE = _lists(
    [0, 1, 0, 1, 2],
    ["Find a.", "Find b.", "Refine a.", "Refine b.", "Combine."],
    [[], [], [0], [1], [2, 3]],
)


def test_tree_leaf_edit_reruns_its_branch_and_the_root_only(pool, admin, execute, script):
    script.rounds = [TREE, ""]  # round 1 accepts
    source = finished_run(pool, execute)
    assert len(steps_of(source)) == 5

    run = replay(
        source,
        admin,
        execute,
        script,
        edits=[{"step": step_at(source, 0, 1).pk, "instruction": "Find b again."}],
    )

    assert ran_again(run) == [(0, 1), (0, 3), (0, 4)]
    # The final response changed, so the conductor is asked again about round 1 (it accepts).
    assert script.conductor_calls() == 1
    assert len(script.worker_calls()) == 3
    plan = Plan.objects.get(run=run, round=0)
    assert plan.reused_from_id == Plan.objects.get(run=source, round=0).pk
    assert plan.workflow[1]["instruction"] == "Find b again."
    assert run.model_calls == 4


ROUND_0 = _lists([0, 1], ["Solve it.", "SAME: give the final answer."], [[], [0]])
ROUND_1 = _lists([2, 0], ["Check it.", "Final answer."], [[], [0]])


def test_later_round_is_reused_when_the_final_response_comes_out_the_same(
    pool, admin, execute, script
):
    script.rounds = [ROUND_0, ROUND_1]
    source = finished_run(pool, execute)
    assert {s.round for s in steps_of(source)} == {0, 1}

    # The final step of round 0 runs again with new words and answers exactly as before.
    run = replay(
        source,
        admin,
        execute,
        script,
        edits=[{"step": step_at(source, 0, 1).pk, "instruction": "SAME, in other words."}],
    )

    assert step_at(run, 0, 1).response == step_at(source, 0, 1).response
    assert script.conductor_calls() == 0, "round 1 is kept: round 0 ended the same"
    assert ran_again(run) == [(0, 1)]
    assert len(script.calls) == 1
    assert step_at(run, 1, 1).reused_from_id == step_at(source, 1, 1).pk
    assert Plan.objects.get(run=run, round=1).reused_from_id == (
        Plan.objects.get(run=source, round=1).pk
    )
    assert run.answer == source.answer
    assert run.model_calls == 1


def test_later_round_is_planned_again_when_the_final_response_changes(pool, admin, execute, script):
    script.rounds = [ROUND_0, ROUND_1]
    source = finished_run(pool, execute)

    run = replay(
        source,
        admin,
        execute,
        script,
        edits=[{"step": step_at(source, 0, 1).pk, "instruction": "Give it in words."}],
    )

    assert ran_again(run) == [(0, 1), (1, 0), (1, 1)]
    assert script.conductor_calls() == 1
    assert len(script.worker_calls()) == 3
    assert Plan.objects.get(run=run, round=1).reused_from_id is None
    assert run.model_calls == 4


def test_edit_of_a_step_the_final_does_not_read_keeps_every_later_round(
    pool, admin, execute, script
):
    script.rounds = [TREE, ROUND_1]
    source = finished_run(pool, execute)

    run = replay(
        source,
        admin,
        execute,
        script,
        edits=[{"step": step_at(source, 1, 0).pk, "instruction": "Check it again."}],
    )

    assert ran_again(run) == [(1, 0), (1, 1)]
    assert script.conductor_calls() == 0


def test_replan_from_asks_the_conductor_for_the_rest_of_the_round(pool, admin, execute, script):
    script.rounds = [TREE, ""]
    source = finished_run(pool, execute)

    run = replay(source, admin, execute, script, replan_from=step_at(source, 0, 2).pk)

    conductor_prompts = [content for model, content in script.calls if model == "sim/conductor"]
    assert "The first 2 steps of this workflow are already written and done" in conductor_prompts[0]
    assert '"Find a.", "Find b."' in conductor_prompts[0]
    # It wrote the same workflow: the two steps before replan_from are reused, the rest run.
    assert ran_again(run) == [(0, 2), (0, 3), (0, 4)]
    assert Plan.objects.get(run=run, round=0).reused_from_id is None
    assert run.edits[0]["field"] == "replan_from"


def test_replan_from_an_edited_step_keeps_the_edit_and_replans_after_it(
    pool, admin, execute, script
):
    script.rounds = [TREE, ""]
    source = finished_run(pool, execute)
    third = step_at(source, 0, 2)

    run = replay(
        source,
        admin,
        execute,
        script,
        edits=[{"step": third.pk, "instruction": "Refine a, twice."}],
        replan_from=third.pk,
    )

    conductor_prompts = [content for model, content in script.calls if model == "sim/conductor"]
    assert "The first 3 steps of this workflow are already written and done" in conductor_prompts[0]
    assert "Refine a, twice." in conductor_prompts[0]
    assert [edit["field"] for edit in run.edits] == ["instruction", "replan_from"]
    # This conductor writes its first workflow again, so the step edited runs again as written.
    assert ran_again(run)[0] == (0, 2)


def test_an_edit_after_replan_from_is_refused(pool, admin, execute, script):
    script.rounds = [TREE, ""]
    source = finished_run(pool, execute)

    with pytest.raises(ValidationError) as refused:
        replay_create(
            source=source,
            actor=admin,
            enqueue=False,
            edits=[{"step": step_at(source, 0, 3).pk, "instruction": "Refine b, twice."}],
            replan_from=step_at(source, 0, 2).pk,
        )

    assert "edits[0].step" in refused.value.message_dict


# Events, audit, rules ---------------------------------------------------------------------------


def test_replay_events_show_reused_steps_as_succeeded_and_only_dirty_ones_running(
    pool, admin, execute, script
):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 3})
    run = replay(
        source,
        admin,
        execute,
        script,
        edits=[{"step": step_at(source, 0, 3).pk, "instruction": "Check it twice."}],
    )

    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("data", flat=True))
    assert [e["type"] for e in events] == [
        "run.status",  # queued
        "plan.created",
        "step.created",
        "step.created",
        "step.created",
        "step.created",
        "run.status",  # running
        "step.started",
        "step.finished",
        "run.finished",
    ]
    created = [e["step"] for e in events if e["type"] == "step.created"]
    assert [s["status"] for s in created] == ["succeeded"] * 3 + ["pending"]
    assert [s["reused_from"] is not None for s in created] == [True, True, True, False]
    assert events[-1]["totals"]["model_calls"] == 1


def test_edits_are_stored_as_data_and_audited(pool, admin, execute, script):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 3})
    step = step_at(source, 0, 2)
    other = Worker.objects.filter(pool=pool).exclude(pk=step.worker_id).first()

    run = replay_create(
        source=source,
        actor=admin,
        enqueue=False,
        edits=[{"step": step.pk, "instruction": "New words.", "worker": other.pk, "access": "all"}],
    )

    by_field = {edit["field"]: edit for edit in run.edits}
    assert set(by_field) == {"instruction", "worker", "access"}
    assert by_field["instruction"]["before"] == step.instruction
    assert by_field["instruction"]["after"] == "New words."
    assert by_field["worker"]["after"] == {"id": other.pk, "name": other.name}
    assert by_field["access"] == {
        **by_field["access"],
        "step": step.pk,
        "round": 0,
        "index": 2,
        "before": [1],
        "after": "all",
        "who": admin.username,
    }
    entry = AuditEntry.objects.get(action="replay.create")
    assert entry.target_id == run.pk and entry.after["edits"] == run.edits
    assert entry.actor == admin


def test_only_admins_may_replay(pool, admin, execute, script, project):
    source = finished_run(pool, execute, strategy="single")
    reviewer = make_member(project=project, role=Membership.Role.REVIEWER)

    with pytest.raises(PermissionDenied):
        replay_create(source=source, actor=reviewer, enqueue=False)
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    "make_edit, field",
    [
        (lambda steps, other: {"step": 10**9, "instruction": "x"}, "edits[0].step"),
        (lambda steps, other: {"step": other["step"], "instruction": "x"}, "edits[0].step"),
        (lambda steps, other: {"step": steps[1].pk, "worker": other["worker"]}, "edits[0].worker"),
        (lambda steps, other: {"step": steps[1].pk, "access": [1]}, "edits[0].access"),
        (lambda steps, other: {"step": steps[1].pk, "access": [2]}, "edits[0].access"),
        (lambda steps, other: {"step": steps[1].pk, "instruction": "  "}, "edits[0].instruction"),
        (lambda steps, other: {"step": steps[1].pk}, "edits[0]"),
    ],
    ids=["unknown-step", "other-run", "other-pool", "itself", "later", "empty", "nothing"],
)
def test_bad_edits_name_the_field_and_create_nothing(
    pool, admin, execute, script, project, make_edit, field
):
    source = finished_run(pool, execute, strategy="reflection", strategy_options={"rounds": 2})
    other_pool = make_pool(project=project, workers=1)
    other_run = finished_run(other_pool, execute, strategy="single")
    other = {
        "step": steps_of(other_run)[0].pk,
        "worker": Worker.objects.get(pool=other_pool).pk,
    }
    runs = Run.objects.count()

    with pytest.raises(ValidationError) as raised:
        replay_create(
            source=source, actor=admin, enqueue=False, edits=[make_edit(steps_of(source), other)]
        )

    assert field in raised.value.message_dict
    assert Run.objects.count() == runs
    assert not AuditEntry.objects.filter(action="replay.create").exists()
