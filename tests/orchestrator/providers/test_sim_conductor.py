import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.plan import parse_workflow
from orchestrator.engine.prompts import conductor_messages, repair_message
from orchestrator.engine.types import ALL, RunSettings, WorkerInfo
from orchestrator.providers import make_client
from orchestrator.providers.simulator import SimulatedConductor, demo_pool, load_suite
from orchestrator.providers.simulator.solving import mistake, solve
from orchestrator.providers.simulator.worker import role_for

TASKS = load_suite()
POOL = demo_pool(latency=0)
WORKERS = [
    WorkerInfo(name=w.name, model=w.model, description=w.description, client=make_client(w.model))
    for w in POOL.workers
]
CONDUCTOR = SimulatedConductor()
DEFAULTS = RunSettings()
PROFILE = {i: w.model.removeprefix("sim/") for i, w in enumerate(POOL.workers)}


def plan(question, *, settings=DEFAULTS, workers=WORKERS, round=0, previous=None, extra=()):
    messages = conductor_messages(
        question=question, workers=workers, settings=settings, round=round, previous_answer=previous
    )
    raw = CONDUCTOR.respond([*messages, *extra])
    workflow = parse_workflow(
        raw, pool_size=len(workers), max_steps=settings.max_steps, access_mode=settings.access_mode
    )
    return raw, workflow


def roles(workflow):
    return [role_for(step.instruction) for step in workflow.steps]


def test_every_suite_task_gets_a_parseable_workflow_of_the_described_shape():
    for task in TASKS:
        raw, workflow = plan(task.question)
        assert raw.startswith("[simulated sim/conductor] "), task.id
        shape = roles(workflow)
        access = [step.access for step in workflow.steps]
        if task.domain == "lookup":
            assert shape == ["solve"], task.id
        elif task.domain == "arithmetic":
            assert shape == ["solve", "verify"] and access == [(), ALL], task.id
        elif task.domain == "countdown":
            assert shape == ["solve", "solve", "combine"] and access == [(), (), ALL], task.id
        else:
            assert shape == ["plan", "solve", "verify"] and access[:2] == [(), ALL], task.id


def test_workers_are_chosen_by_the_skills_in_their_descriptions():
    by_domain = {}
    for task in TASKS:
        _, workflow = plan(task.question)
        by_domain.setdefault(task.domain, set()).add(
            tuple(PROFILE[s.worker] for s in workflow.steps)
        )
    assert by_domain["lookup"] == {("sage",)}  # best at lookups, and cheap
    assert by_domain["arithmetic"] == {("abacus", "summit")}  # strongest first, next best checks
    assert by_domain["code"] == {("forge", "summit", "forge")}  # the programmer plans and reviews


def test_unreadable_descriptions_count_as_average_and_still_give_a_workflow():
    anonymous = [
        WorkerInfo(name=f"w{i}", model="openai/x", description="A helpful model.", client=w.client)
        for i, w in enumerate(WORKERS[:3])
    ]
    for task in TASKS[::11]:
        _, workflow = plan(task.question, workers=anonymous)
        assert workflow.steps


@pytest.mark.parametrize("max_steps", [1, 2, 3])
def test_the_step_limit_in_the_prompt_is_respected(max_steps):
    settings = RunSettings(max_steps=max_steps)
    for task in TASKS[::5]:
        _, workflow = plan(task.question, settings=settings)
        assert 1 <= len(workflow.steps) <= max_steps


def test_binary_access_mode_uses_only_all_or_none():
    binary = RunSettings(access_mode="binary")
    fine_code = plan(next(t for t in TASKS if t.domain == "code").question)[1]
    assert fine_code.steps[2].access == (1,)  # fine mode: the reviewer reads the code only
    for task in TASKS:
        _, workflow = plan(task.question, settings=binary)
        assert all(step.access in ((), ALL) for step in workflow.steps), task.id


def test_a_correct_previous_answer_is_accepted():
    for task in TASKS[::3]:
        right = solve(task).answer
        previous = (
            f"```python\n{right}\n```" if task.domain == "code" else f"Work.\nAnswer: {right}"
        )
        raw, workflow = plan(task.question, round=1, previous=previous)
        assert workflow.accepts, (task.id, raw)


def test_a_previous_answer_that_fails_a_cheap_check_gets_a_repair_workflow():
    countdown = [t for t in TASKS if t.domain == "countdown"]
    for task in countdown:
        near_miss = mistake(task, 0.0).answer
        raw, workflow = plan(task.question, round=1, previous=f"Answer: {near_miss}")
        assert (
            len(workflow.steps) >= 2 and "The previous answer" in workflow.steps[0].instruction
        ), raw
    code = next(t for t in TASKS if t.domain == "code")
    _, workflow = plan(code.question, round=1, previous="I would use a loop.")
    assert "has no fenced code block" in workflow.steps[0].instruction
    arithmetic = next(t for t in TASKS if t.domain == "arithmetic")
    _, workflow = plan(arithmetic.question, round=1, previous="It is about forty.")
    assert 'has no final "Answer:" line' in workflow.steps[0].instruction


def test_a_question_outside_the_suite_still_gets_a_workflow_and_says_so():
    raw, workflow = plan("Summarise the plot of Hamlet in two sentences.")
    assert "not a suite task" in raw
    assert len(workflow.steps) == 1
    raw, workflow = plan("Summarise Hamlet.", round=1, previous="I only answer my suite.")
    assert workflow.accepts, raw


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["system", "user", "assistant"]),
                "content": st.text(max_size=300),
            }
        ),
        max_size=6,
    )
)
def test_any_messages_get_a_labelled_reply_never_an_exception(messages):
    assert CONDUCTOR.respond(messages).startswith("[simulated sim/conductor] ")
    assert WORKERS[0].client.respond(messages).startswith("[simulated sim/swift] ")


def test_a_repair_turn_is_answered_with_a_usable_workflow():
    task = TASKS[70]
    _, first = plan(task.question)
    _, again = plan(
        task.question, extra=[{"role": "assistant", "content": "oops"}, repair_message("bad")]
    )
    assert again == first


def test_without_a_conductor_prompt_it_says_what_it_needs():
    reply = CONDUCTOR.respond([{"role": "user", "content": "Hello"}])
    assert "simulated conductor" in reply and "## Workers" in reply


def test_the_conductor_is_deterministic():
    assert [plan(t.question)[0] for t in TASKS[::9]] == [plan(t.question)[0] for t in TASKS[::9]]
