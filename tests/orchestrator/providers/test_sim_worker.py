import asyncio
import re

import pytest

from orchestrator.engine.context import build_messages
from orchestrator.engine.grading import extract_answer, grade
from orchestrator.engine.strategies import AGGREGATE, PROPOSE, REFLECT, SOLVE
from orchestrator.engine.types import ALL, ModelError, RunSettings, StepSpec, WorkerInfo, Workflow
from orchestrator.providers.simulator import SimulatedWorker, load_suite
from orchestrator.providers.simulator.worker import role_for

TASKS = load_suite()
NON_CODE = [task for task in TASKS if task.domain != "code"]
CODE = [task for task in TASKS if task.domain == "code"]
DEFAULTS = RunSettings()


def worker(name: str, skill: float, **kwargs) -> SimulatedWorker:
    return SimulatedWorker(
        model=f"sim/{name}",
        skills={"arithmetic": skill, "countdown": skill, "code": skill, "lookup": skill},
        **kwargs,
    )


def messages(question, steps, index, responses, *, client, settings=DEFAULTS):
    info = WorkerInfo(name=client.model, model=client.model, description="", client=client)
    return build_messages(
        question=question,
        workflow=Workflow(tuple(StepSpec(0, instruction, access) for instruction, access in steps)),
        index=index,
        responses=responses,
        worker=info,
        settings=settings,
    )


def answer(client, question, steps, index=0, responses=None, **kwargs) -> str:
    return client.respond(
        messages(question, steps, index, responses or {}, client=client, **kwargs)
    )


def score(task, response: str) -> float:
    return grade(extract_answer(response, kind=task.grader), task.reference, task.grader)


def accuracy(tasks, responses) -> float:
    return sum(score(task, r) for task, r in zip(tasks, responses, strict=True)) / len(tasks)


# roles -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "instruction, role",
    [
        (SOLVE, "solve"),
        (PROPOSE, "solve"),
        (REFLECT, "verify"),
        (AGGREGATE, "combine"),
        (
            "Outline the approach for this function: the key idea and the edge cases. No code yet.",
            "plan",
        ),
        ("Work out an efficient algorithm for this.", "plan"),
        ("Implement the algorithm above in Python.", "solve"),
        ("Check the answer above and correct it if needed.", "verify"),
        ("What is the capital of France?", "solve"),
    ],
)
def test_role_comes_from_the_instruction_words(instruction, role):
    assert role_for(instruction) == role


# answers -----------------------------------------------------------------------------------------


def test_responses_are_labelled_simulated_and_end_with_an_answer():
    client = worker("tester", 0.7)
    for task in TASKS[::7]:
        response = answer(client, task.question, [(SOLVE, ())])
        assert response.startswith("[simulated sim/tester] ")
        if task.domain == "code":
            assert re.search(r"```python\n.+\n```$", response, re.DOTALL)
        else:
            assert re.search(r"\nAnswer: \S.*$", response)


def test_skill_sets_the_rate_of_correct_answers():
    perfect = [answer(worker("ace", 1.0), t.question, [(SOLVE, ())]) for t in NON_CODE]
    hopeless = [answer(worker("dud", 0.0), t.question, [(SOLVE, ())]) for t in NON_CODE]
    middling = [answer(worker("mid", 0.5), t.question, [(SOLVE, ())]) for t in NON_CODE]
    assert accuracy(NON_CODE, perfect) == 1.0
    assert accuracy(NON_CODE, hopeless) == 0.0
    assert 0.35 <= accuracy(NON_CODE, middling) <= 0.65


def test_same_call_same_reply_and_the_seed_changes_the_draws():
    task_list = NON_CODE[:60]
    first = [answer(worker("w", 0.5), t.question, [(SOLVE, ())]) for t in task_list]
    again = [answer(worker("w", 0.5), t.question, [(SOLVE, ())]) for t in task_list]
    reseeded = [answer(worker("w", 0.5, seed=7), t.question, [(SOLVE, ())]) for t in task_list]
    assert first == again
    assert first != reseeded


def test_a_verifier_that_sees_the_solution_beats_one_that_does_not():
    solver, verifier = worker("solver", 0.6), worker("checker", 0.7)
    steps = [
        (SOLVE, ()),
        ("Verify the solution above and correct any mistake. " + SOLVE[-40:], ALL),
    ]
    blind = [(SOLVE, ()), (steps[1][0], ())]
    with_access, without_access = [], []
    for task in NON_CODE:
        solved = answer(solver, task.question, steps)
        with_access.append(answer(verifier, task.question, steps, 1, {0: solved}))
        without_access.append(answer(verifier, task.question, blind, 1, {0: solved}))
    seen, unseen = accuracy(NON_CODE, with_access), accuracy(NON_CODE, without_access)
    assert seen - unseen >= 0.12, (seen, unseen)


def test_a_coder_that_sees_a_sound_plan_does_better(code_sandbox):
    planner, coder = worker("planner", 0.9), worker("coder", 0.4)
    plan_steps = [
        ("Outline the approach; no code yet.", ()),
        ("Implement the function following the plan above.", ALL),
    ]
    alone = [("Implement the function.", ())]
    planned, unplanned = [], []
    for task in CODE:
        plan = answer(planner, task.question, plan_steps)
        assert "Answer:" not in plan and "```" not in plan
        planned.append(answer(coder, task.question, plan_steps, 1, {0: plan}))
        unplanned.append(answer(coder, task.question, alone))
    with_plan, without_plan = accuracy(CODE, planned), accuracy(CODE, unplanned)
    assert with_plan - without_plan >= 0.15, (with_plan, without_plan)


def test_an_aggregator_picks_a_right_candidate_over_wrong_ones():
    right, wrong, judge = worker("right", 1.0), worker("wrong", 0.0), worker("judge", 0.5)
    steps = [(PROPOSE, ()), (PROPOSE, ()), (PROPOSE, ()), (AGGREGATE, ALL)]
    combined = []
    for task in NON_CODE:
        responses = {
            0: answer(wrong, task.question, steps, 0),
            1: answer(right, task.question, steps, 1),
            2: answer(wrong, task.question, steps, 2),
        }
        combined.append(answer(judge, task.question, steps, 3, responses))
    # One right candidate in three: chance alone gives a third; skill 0.5 should reach ~2/3.
    assert accuracy(NON_CODE, combined) >= 0.55


def test_reviewing_ones_own_answer_catches_fewer_mistakes():
    solver, reviewer = worker("same", 0.0), worker("same", 0.8)
    other = worker("other", 0.8)
    steps = [(SOLVE, ()), (REFLECT, (0,))]
    own, fresh = [], []
    for task in NON_CODE:
        solved = answer(solver, task.question, steps)
        own.append(answer(reviewer, task.question, steps, 1, {0: solved}))
        fresh.append(answer(other, task.question, steps, 1, {0: solved}))
    assert accuracy(NON_CODE, fresh) - accuracy(NON_CODE, own) >= 0.2


# outside the suite -------------------------------------------------------------------------------


def test_a_question_outside_the_suite_gets_an_honest_reply():
    response = answer(worker("w", 0.9), "Who will win the next election?", [(SOLVE, ())])
    assert "offline simulator" in response and "not a language model" in response
    assert "Answer:" not in response


def test_plain_arithmetic_outside_the_suite_is_still_evaluated():
    response = answer(worker("w", 0.9), "What is (17 + 4) * 3?", [(SOLVE, ())])
    assert "not one of them" in response
    assert response.endswith("Answer: 63")


def test_a_later_step_without_the_question_says_it_cannot_tell_the_task():
    task = TASKS[0]
    no_question = RunSettings(question_in_later_steps=False)
    steps = [(SOLVE, ()), ("Verify the answer above.", (0,))]
    solved = answer(worker("w", 0.9), task.question, steps)
    response = answer(worker("w", 0.9), task.question, steps, 1, {0: solved}, settings=no_question)
    assert "question is not in this step's context" in response
    assert "Answer:" not in response


# the client --------------------------------------------------------------------------------------


async def test_complete_counts_tokens_and_cost_from_message_lengths():
    client = worker("priced", 0.8, price_in=2.0, price_out=10.0)
    sent = messages(TASKS[0].question, [(SOLVE, ())], 0, {}, client=client)
    completion = await client.complete(sent, timeout=5)
    assert completion.text == client.respond(sent)
    expected_in = sum(-(-len(m["content"]) // 4) + 4 for m in sent)
    assert completion.tokens_in == expected_in
    assert completion.tokens_out == -(-len(completion.text) // 4)
    assert completion.cost == pytest.approx(
        (expected_in * 2.0 + completion.tokens_out * 10.0) / 1e6
    )


async def test_latency_is_simulated_and_scaled_by_the_environment(monkeypatch):
    client = worker("slowish", 0.8, latency=0.2)
    sent = messages(TASKS[0].question, [(SOLVE, ())], 0, {}, client=client)
    loop = asyncio.get_running_loop()
    started = loop.time()
    completion = await client.complete(sent, timeout=5)
    assert loop.time() - started >= 0.15 and 0.15 <= completion.latency <= 0.3
    monkeypatch.setenv("CONDUCTOR_SIM_LATENCY_SCALE", "0")
    started = loop.time()
    completion = await client.complete(sent, timeout=5)
    assert loop.time() - started < 0.05 and completion.latency == 0


async def test_a_call_slower_than_its_timeout_fails_as_a_retryable_model_error():
    client = worker("sluggish", 0.8, latency=1.0)
    sent = messages(TASKS[0].question, [(SOLVE, ())], 0, {}, client=client)
    with pytest.raises(ModelError) as failure:
        await client.complete(sent, timeout=0.05)
    assert failure.value.retryable
