"""The conductor's output form and its fallback, run end to end: a pool whose conductor writes
JSON constrained to the plan's schema (a real local HTTP server, the simulator), and a pool whose
conductor cannot write a plan, failing or falling back to its first worker, shown as a fallback
in the stored plan, the graph, the API and the runs list."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator import selectors
from orchestrator.models import Plan
from orchestrator.services.runs import run_create
from tests.factories import make_member, make_pool, make_worker
from tests.openai_server import FakeOpenAI, running_openai_server
from tests.orchestrator.providers.test_litellm_client import requested_schema
from tests.webui.api.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def server():
    with running_openai_server() as url:
        yield url


def planner_pool(project, server, **fields):
    """A pool whose conductor is the local server's ``planner``: free text unless a schema is
    asked for, then a one-step plan for the schema's last worker. Its workers echo."""
    pool = make_pool(
        project=project,
        workers=0,
        conductor_model="openai/planner",
        conductor_api_base=server,
        conductor_params={},
        **fields,
    )
    for position, name in enumerate(("first", "second")):
        make_worker(
            pool=pool, position=position, name=name, model=f"openai/{name}", api_base=server
        )
    return pool


def test_json_output_asks_for_the_plan_s_schema_and_runs_what_comes_back(project, server, execute):
    pool = planner_pool(project, server, conductor_output="json")
    run = execute(run_create(pool=pool, input="What is 2 + 2?", enqueue=False))
    assert run.status == "succeeded", run.error
    # Two rounds (the pool's default): the second may accept, with no steps.
    call, later = [r for r in FakeOpenAI.requests if r["body"]["model"] == "planner"]
    assert requested_schema(later["body"])[1]["properties"]["steps"]["minItems"] == 0
    dialect, schema = requested_schema(call["body"])
    assert schema["properties"]["steps"]["minItems"] == 1
    # A model with an API base speaks llama.cpp's dialect unless the pool says otherwise.
    assert dialect == "llamacpp"
    assert schema["properties"]["steps"]["items"]["properties"]["worker"]["enum"] == [0, 1]
    assert schema["properties"]["steps"]["maxItems"] == pool.max_steps
    assert '"steps"' in call["body"]["messages"][0]["content"]
    plans = Plan.objects.filter(run=run)
    assert {(p.form, p.constrained, p.fallback, p.error) for p in plans} == {
        ("json", "llamacpp", "", "")
    }
    # The plans named the enum's last worker: the second one answered.
    assert {step.worker_name for step in run.steps.all()} == {"second"}
    assert run.answer.startswith("echo: ")


def test_a_pool_names_its_dialect(project, server, execute):
    pool = planner_pool(project, server, conductor_output="json", conductor_json_dialect="openai")
    run = execute(run_create(pool=pool, input="What is 2 + 2?", enqueue=False))
    assert run.status == "succeeded", run.error
    call = next(r for r in FakeOpenAI.requests if r["body"]["model"] == "planner")
    assert requested_schema(call["body"])[0] == "openai"
    assert call["body"]["response_format"]["json_schema"]["strict"] is True
    assert {p.constrained for p in Plan.objects.filter(run=run)} == {"openai"}


def test_text_output_stays_the_lists_and_fails_when_the_conductor_cannot_write_them(
    project, server, execute
):
    pool = planner_pool(project, server)
    run = execute(run_create(pool=pool, input="What is 2 + 2?", enqueue=False))
    assert run.status == "failed" and "found no workflow" in run.error
    calls = [r for r in FakeOpenAI.requests if r["body"]["model"] == "planner"]
    assert len(calls) == 3 and all(requested_schema(c["body"]) is None for c in calls)
    plan = Plan.objects.get(run=run)
    assert (plan.workflow, plan.fallback, plan.form) == (None, "", "")


def test_the_single_fallback_answers_with_the_first_worker_marked_as_a_fallback(
    project, server, execute, project_admin
):
    pool = planner_pool(project, server, plan_fallback="single")
    run = execute(
        run_create(pool=pool, input="What is 2 + 2?", enqueue=False, created_by=project_admin)
    )
    assert run.status == "succeeded", run.error
    # Round 0 falls back to the first worker; round 1, again without a plan, keeps its answer.
    plan, later = Plan.objects.filter(run=run).order_by("round")
    assert plan.fallback == "single" and "found no workflow" in plan.error
    assert len(plan.attempts) == 3 and plan.form == ""
    assert later.fallback == "kept" and later.workflow == []
    (step,) = run.steps.all()
    assert step.worker_name == "first" and run.answer.startswith("echo: ")

    graph = selectors.run_graph(run=run)
    nodes = [n for n in graph["nodes"] if n["kind"] == "plan"]
    assert [n["status"] for n in nodes] == ["fallback", "fallback"]
    assert all("fallback, not the conductor's" in n["label"] for n in nodes)

    api = client_for(project_admin)
    detail = api.get(reverse("api-run-detail", args=[run.pk])).json()
    assert detail["fallback"] is True
    assert detail["plans"][0]["fallback"] == "single" and detail["plans"][0]["error"]
    listed = api.get(reverse("api-run-list")).json()["results"]
    assert [(r["id"], r["fallback"]) for r in listed] == [(run.pk, True)]

    api.force_login(project_admin)
    page = api.get(reverse("runs")).content.decode()
    assert 'class="fallback-badge"' in page


def test_the_simulated_conductor_writes_json_when_asked(project, execute):
    pool = make_pool(project=project, workers=2, conductor_output="json")
    run = execute(run_create(pool=pool, input="What is 17 * 23?", enqueue=False))
    assert run.status == "succeeded", run.error
    plans = list(Plan.objects.filter(run=run).order_by("round"))
    assert {(p.form, p.constrained) for p in plans} == {("json", "simulated")}
    assert plans[0].attempts[0]["raw"].startswith('{"steps": [')


def test_a_viewer_sees_the_output_form_in_the_pool_and_the_api(project, sim_pool):
    viewer = make_member(project=project, role="viewer", username="vera")
    api = client_for(viewer)
    body = api.get(reverse("api-pool-detail", args=[sim_pool.pk])).json()
    assert (body["conductor_output"], body["conductor_json_dialect"], body["plan_fallback"]) == (
        "text",
        "auto",
        "fail",
    )
