"""replay_state: the dirty set of a replay (edited steps and everything that reads them), what is
reused, and which rounds are kept only if their predecessor ends the same."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.replay import SourceRound, StepEdit, replay_state
from orchestrator.engine.types import ALL, PlanRecord, StepRecord, StepSpec, Workflow


def source_round(number: int, accesses, *, failed: frozenset[int] = frozenset()) -> SourceRound:
    specs = tuple(StepSpec(0, f"Step {i}.", access) for i, access in enumerate(accesses))
    workflow = Workflow(specs)
    steps = tuple(
        StepRecord(
            round=number,
            index=i,
            spec=spec,
            worker_name="w",
            model="m",
            reads=workflow.reads(i),
            status="failed" if i in failed else "succeeded",
            response=f"response {number}.{i}",
            reused_from=100 * number + i,
        )
        for i, spec in enumerate(specs)
    )
    plan = PlanRecord(round=number, strategy="conductor", workflow=workflow, reused_from=number)
    return SourceRound(plan=plan, steps=steps)


def dirty_of(state, round_=0) -> list[int]:
    return sorted(index for r, index in state.dirty if r == round_)


def test_chain_edit_dirties_the_step_and_everything_after_it():
    chain = source_round(0, [(), (0,), (1,), (2,)])

    assert dirty_of(replay_state(rounds=[chain], edits=[StepEdit(0, 3, instruction="x")])) == [3]
    state = replay_state(rounds=[chain], edits=[StepEdit(0, 1, instruction="x")])
    assert dirty_of(state) == [1, 2, 3]
    assert sorted(state.resume.steps) == [(0, 0)]
    assert state.resume.plans[0].workflow.steps[1].instruction == "x"
    assert state.resume.unrecorded == {0}


def test_all_reads_every_earlier_step_and_fresh_dirties_everything():
    fan_in = source_round(0, [(), (), (), ALL])

    assert dirty_of(replay_state(rounds=[fan_in], edits=[StepEdit(0, 1, worker=1)])) == [1, 3]
    assert dirty_of(replay_state(rounds=[fan_in], fresh=True)) == [0, 1, 2, 3]
    assert replay_state(rounds=[fan_in], fresh=True).resume.steps == {}


def test_an_access_edit_changes_the_edges_it_is_judged_by():
    rounds = [source_round(0, [(), (), (0,)])]

    state = replay_state(rounds=rounds, edits=[StepEdit(0, 2, access=(1,))])

    assert dirty_of(state) == [2]
    state = replay_state(
        rounds=rounds, edits=[StepEdit(0, 1, instruction="y"), StepEdit(0, 2, access=(1,))]
    )
    assert dirty_of(state) == [1, 2]


def test_steps_that_failed_in_the_source_run_again_with_their_readers():
    rounds = [source_round(0, [(), (0,), ()], failed=frozenset({1}))]

    assert dirty_of(replay_state(rounds=rounds)) == [1]


def test_each_later_round_is_kept_only_if_the_round_before_ends_the_same():
    rounds = [source_round(0, [(), (0,)]), source_round(1, [(), (0,)])]

    state = replay_state(rounds=rounds, edits=[StepEdit(0, 1, instruction="z")])

    assert state.resume.kept_if == {0: "response 0.1", 1: "response 1.1"}
    assert set(state.resume.plans) == {0, 1}
    assert (1, 0) in state.resume.steps and (1, 1) in state.resume.steps


def test_replan_from_keeps_the_steps_before_it_and_no_plan_of_its_round():
    rounds = [source_round(0, [(), (), (0, 1)])]

    state = replay_state(rounds=rounds, replan_from=(0, 2))

    assert state.replan == (0, tuple(step.spec for step in rounds[0].steps[:2]))
    assert 0 not in state.resume.plans
    assert sorted(state.resume.steps) == [(0, 0), (0, 1)]
    assert dirty_of(state) == [2]


@st.composite
def workflows_and_edits(draw):
    size = draw(st.integers(1, 12))
    accesses = []
    for index in range(size):
        if index and draw(st.booleans()) and draw(st.booleans()):
            accesses.append(ALL)
        else:
            accesses.append(
                tuple(sorted(draw(st.sets(st.integers(0, max(0, index - 1)), max_size=index))))
                if index
                else ()
            )
    edited = draw(st.sets(st.integers(0, size - 1), max_size=size))
    return accesses, edited


@settings(max_examples=200, deadline=None)
@given(workflows_and_edits())
def test_dirty_set_is_the_edited_steps_and_all_that_read_them_transitively(case):
    accesses, edited = case
    source = source_round(0, accesses)
    workflow = source.plan.workflow
    expected = set(edited)
    changed = True
    while changed:
        changed = False
        for index in range(len(accesses)):
            if index not in expected and any(read in expected for read in workflow.reads(index)):
                expected.add(index)
                changed = True

    state = replay_state(rounds=[source], edits=[StepEdit(0, i, instruction="e") for i in edited])

    assert set(dirty_of(state)) == expected
    assert {index for _, index in state.resume.steps} == set(range(len(accesses))) - expected
