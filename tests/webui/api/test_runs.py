"""The runs API: create, list with filters, detail, graph, cancel; who may do what."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from orchestrator import selectors, wire
from orchestrator.models import Run
from orchestrator.services import execution
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_plan, make_pool, make_run, make_step

QUESTION = (
    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?"
)
RUNS_URL = reverse("api-run-list")


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(execution, "run_enqueue", lambda *, run_id: calls.append(run_id))
    return calls


def test_post_creates_a_run_and_answers_at_once(
    api_as, sim_pool, reviewer, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(reviewer).post(
            RUNS_URL,
            {"input": QUESTION, "pool": sim_pool.pk, "strategy": "moa", "reference": "50"},
            format="json",
        )

    assert response.status_code == 201, response.json()
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert body["status"] == "queued" and run.status == Run.Status.QUEUED
    assert body["url"] == f"http://testserver/runs/{run.pk}/"
    assert body["ws"] == f"/ws/runs/{run.pk}/"
    assert body["strategy"] == "moa" and body["pool"] == {"id": sim_pool.pk, "name": sim_pool.name}
    assert run.created_by == reviewer and run.reference == "50" and run.grader == "numeric"
    assert enqueued == [run.pk]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"pool": None}, "pool"),
        ({"pool": 999_999}, "pool"),
        ({"strategy": "oracle"}, "strategy"),
        ({"strategy": "single", "strategy_options": {"worker": 99}}, "strategy_options"),
        ({"strategy": "single", "strategy_options": {"temperature": 1}}, "strategy_options"),
        ({"grader": "vibes"}, "grader"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api_as, sim_pool, reviewer, payload, field):
    data = {"input": QUESTION, "pool": sim_pool.pk, **payload}
    data = {key: value for key, value in data.items() if value is not None}
    response = api_as(reviewer).post(RUNS_URL, data, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not Run.objects.exists()


def test_viewers_may_not_create_runs(api_as, sim_pool, viewer):
    response = api_as(viewer).post(
        RUNS_URL, {"input": QUESTION, "pool": sim_pool.pk}, format="json"
    )
    assert response.status_code == 403
    assert not Run.objects.exists()


def test_a_pool_of_another_project_is_unknown(api_as, sim_pool, outsider):
    response = api_as(outsider).post(
        RUNS_URL, {"input": QUESTION, "pool": sim_pool.pk}, format="json"
    )
    assert response.status_code == 400 and "pool" in response.json()


def test_anonymous_requests_are_refused(sim_pool):
    client = APIClient()
    assert client.get(RUNS_URL).status_code in (401, 403)
    assert client.post(RUNS_URL, {"input": QUESTION, "pool": sim_pool.pk}).status_code in (401, 403)


def test_token_auth_works(sim_pool, reviewer, enqueued):
    token = Token.objects.create(user=reviewer)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    response = client.post(RUNS_URL, {"input": QUESTION, "pool": sim_pool.pk}, format="json")
    assert response.status_code == 201
    assert client.get(RUNS_URL).json()["results"][0]["id"] == response.json()["id"]


def test_list_is_newest_first_and_only_the_users_projects(api_as, sim_pool, viewer, outsider):
    older = make_run(pool=sim_pool, input="older")
    newer = make_run(pool=sim_pool, input="newer")
    other_pool = make_pool(project=outsider.memberships.get().project)
    make_run(pool=other_pool, input="elsewhere")

    body = api_as(viewer).get(RUNS_URL).json()

    assert [run["id"] for run in body["results"]] == [newer.pk, older.pk]
    assert body["next"] is None and body["previous"] is None and body["page"] == 1
    assert [run["input"] for run in api_as(outsider).get(RUNS_URL).json()["results"]] == [
        "elsewhere"
    ]


def test_list_filters(api_as, sim_pool, viewer):
    failed = make_run(pool=sim_pool, status=Run.Status.FAILED, input="the failing one", score=0.0)
    good = make_run(
        pool=sim_pool, status=Run.Status.SUCCEEDED, strategy="moa", answer="Answer: 50", score=1.0
    )
    make_step(run=good, worker_name="Abacus (simulated)")
    old = make_run(pool=sim_pool, strategy="single")
    Run.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=10))
    client = api_as(viewer)

    def ids(**params) -> list[int]:
        response = client.get(RUNS_URL, params)
        assert response.status_code == 200, response.json()
        return [run["id"] for run in response.json()["results"]]

    assert ids(status="failed") == [failed.pk]
    assert ids(strategy="moa") == [good.pk]
    assert ids(worker="Abacus (simulated)") == [good.pk]
    assert ids(q="FAILING") == [failed.pk]
    assert ids(q="answer: 50") == [good.pk]
    assert ids(score_min=0.5) == [good.pk]
    assert ids(score_max=0.5) == [failed.pk]
    assert ids(pool=sim_pool.pk) == ids() == [good.pk, failed.pk, old.pk]
    since = (timezone.now() - dt.timedelta(days=1)).isoformat()
    assert old.pk not in ids(created_after=since) and len(ids(created_after=since)) == 2
    assert ids(created_before=since) == [old.pk]


def test_bad_filters_are_a_400_naming_the_field(api_as, viewer):
    response = api_as(viewer).get(RUNS_URL, {"status": "sleeping", "score_min": "high"})
    assert response.status_code == 400
    assert {"status", "score_min"} <= set(response.json())


def test_list_pages(api_as, sim_pool, viewer):
    runs = [make_run(pool=sim_pool) for _ in range(5)]
    client = api_as(viewer)
    first = client.get(RUNS_URL, {"page_size": 2}).json()
    second = client.get(first["next"]).json()
    last = client.get(second["next"]).json()

    newest_first = [run.pk for run in reversed(runs)]
    assert [r["id"] for r in first["results"] + second["results"] + last["results"]] == newest_first
    assert last["next"] is None and second["previous"] is not None
    assert client.get(RUNS_URL, {"page": 0}).status_code == 400


@pytest.mark.parametrize("value", ["²", "x", "-1", "1.5"])
def test_a_page_that_is_not_a_plain_whole_number_is_a_400(api_as, viewer, value):
    for name in ("page", "page_size"):
        response = api_as(viewer).get(RUNS_URL, {name: value})
        assert response.status_code == 400
        assert name in response.json()


def test_detail_has_plans_and_steps(api_as, sim_pool, viewer):
    run = run_create(pool=sim_pool, input=QUESTION, strategy="moa", enqueue=False)
    run_execute(run_id=run.pk)

    response = api_as(viewer).get(reverse("api-run-detail", args=[run.pk]))

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "succeeded" and body["answer"]
    assert body["plans"][0]["workflow"][-1]["access"] == "all"
    assert len(body["steps"]) == body["totals"]["step_count"] == len(body["plans"][0]["workflow"])
    assert body["steps"][-1]["response"] == body["answer"]
    assert "messages" not in body["steps"][0]


def test_runs_of_other_projects_are_404(api_as, sim_pool, outsider):
    run = make_run(pool=sim_pool)
    step = make_step(run=run)
    client = api_as(outsider)
    assert client.get(reverse("api-run-detail", args=[run.pk])).status_code == 404
    assert client.get(reverse("api-run-graph", args=[run.pk])).status_code == 404
    assert client.get(reverse("api-run-steps", args=[run.pk])).status_code == 404
    assert client.post(reverse("api-run-cancel", args=[run.pk])).status_code == 404
    assert client.get(reverse("api-step-detail", args=[step.pk])).status_code == 404


def test_graph(api_as, sim_pool, viewer):
    run = make_run(pool=sim_pool)
    make_plan(
        run=run,
        workflow=[
            {"worker": 0, "instruction": "a", "access": []},
            {"worker": 1, "instruction": "b", "access": "all"},
        ],
    )
    first = make_step(run=run, index=0)
    second = make_step(run=run, index=1, access="all")
    second.reads = [first.pk]
    second.save(update_fields=["reads"])

    response = api_as(viewer).get(reverse("api-run-graph", args=[run.pk]))

    assert response.status_code == 200
    graph = response.json()
    node_ids = {node["id"] for node in graph["nodes"]}
    assert {f"s{first.pk}", f"s{second.pk}"} <= node_ids
    assert any(
        edge["source"] == f"s{first.pk}" and edge["target"] == f"s{second.pk}"
        for edge in graph["edges"]
    )


def test_a_rounds_steps_with_the_seq_they_are_current_to(api_as, sim_pool, viewer):
    run = make_run(pool=sim_pool, last_seq=12)
    first = make_step(run=run, round=0, index=0, response="not in the list")
    later = [make_step(run=run, round=1, index=index) for index in range(2)]
    make_step(run=run, round=2, index=0)
    url = reverse("api-run-steps", args=[run.pk])

    one_round = api_as(viewer).get(url, {"round": 1}).json()
    every_step = api_as(viewer).get(url).json()

    def steps(body: dict) -> list[dict]:  # a table: the keys once, a row per step
        table = body["steps"]
        return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]

    assert one_round["seq"] == 12
    assert [step["id"] for step in steps(one_round)] == [step.pk for step in later]
    assert [step["id"] for step in steps(every_step)][:3] == [first.pk] + [s.pk for s in later]
    assert "response" not in steps(every_step)[0]
    assert every_step["graph"] is None
    # Asked with its layout, the round comes as the graph API lays it out, in the page's form.
    opened = api_as(viewer).get(url, {"round": 1, "graph": "true"}).json()
    assert opened["steps"] == one_round["steps"]
    assert opened["graph"] == wire.page_graph(selectors.run_graph(run=run, round=1))
    assert opened["graph"]["steps"][::3] == [step.pk for step in later]
    assert api_as(viewer).get(url, {"round": -1}).status_code == 400


def test_step_detail_has_the_exact_messages_and_response(api_as, sim_pool, viewer):
    run = make_run(pool=sim_pool)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    step = make_step(
        run=run, messages=messages, response="<script>alert(1)</script> 4", status="succeeded"
    )

    body = api_as(viewer).get(reverse("api-step-detail", args=[step.pk])).json()

    assert body["messages"] == messages
    assert body["response"] == "<script>alert(1)</script> 4"
    assert body["run"] == run.pk and body["id"] == step.pk


def test_cancel(api_as, sim_pool, viewer, reviewer):
    run = make_run(pool=sim_pool)
    url = reverse("api-run-cancel", args=[run.pk])

    assert api_as(viewer).post(url).status_code == 403
    response = api_as(reviewer).post(url)

    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED


def test_schema_generates(api_as, viewer):
    response = api_as(viewer).get(reverse("api-schema"))
    assert response.status_code == 200
    text = response.content.decode()
    assert "/api/runs/{run_id}/graph/" in text and "/api/steps/{step_id}/" in text


def test_schema_has_no_warnings(tmp_path):
    from django.core.management import call_command

    call_command(
        "spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yml")
    )
    assert "runs_create" in (tmp_path / "schema.yml").read_text()


@pytest.mark.parametrize("count", [2, 20])
def test_a_list_page_costs_the_same_queries_however_many_runs(
    api_as, sim_pool, viewer, django_assert_num_queries, count
):
    for _ in range(count):
        make_run(pool=sim_pool, created_by=viewer, status=Run.Status.FAILED, error="boom")
    client = api_as(viewer)

    with django_assert_num_queries(2):  # the user's projects, then one page of runs
        response = client.get(RUNS_URL)

    assert len(response.json()["results"]) == count
    assert response.json()["results"][0]["error"] == "boom"


def test_a_stored_plan_attempt_missing_keys_reads_with_defaults(api_as, sim_pool, viewer):
    run = make_run(pool=sim_pool)
    make_plan(run=run, attempts=[{"raw": "[]"}, {"error": "no JSON found", "cost": 0.5}])

    response = api_as(viewer).get(reverse("api-run-detail", args=[run.pk]))

    assert response.status_code == 200
    assert response.json()["plans"][0]["attempts"] == [
        {
            "raw": "[]",
            "error": "",
            "tokens_in": 0,
            "tokens_out": 0,
            "cost": 0.0,
            "latency": 0.0,
            "queued": 0.0,
        },
        {
            "raw": "",
            "error": "no JSON found",
            "tokens_in": 0,
            "tokens_out": 0,
            "cost": 0.5,
            "latency": 0.0,
            "queued": 0.0,
        },
    ]


def test_a_retried_steps_attempts_are_in_the_api_and_its_schema(api_as, sim_pool, viewer):
    run = make_run(pool=sim_pool)
    log = [
        {
            "attempt": 1,
            "offset": 0.0,
            "seconds": 0.25,
            "error": "provider said 429",
            "backoff": 0.5,
        },
        {"attempt": 2, "offset": 0.75, "seconds": 0.5, "error": "", "backoff": 0.0},
    ]
    step = make_step(run=run, status="succeeded", attempts=2, attempt_log=log)
    # Stored JSON from the admin may lack keys: they read with defaults, not as a 500.
    other = make_step(run=run, index=1, status="failed", attempt_log=[{"error": "boom"}])
    client = api_as(viewer)

    detail = client.get(reverse("api-step-detail", args=[step.pk])).json()
    steps = client.get(reverse("api-run-detail", args=[run.pk])).json()["steps"]
    schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json").content.decode()

    assert detail["attempt_log"] == log
    assert steps[0]["attempt_log"] == log
    assert steps[1]["attempt_log"] == [
        {"attempt": 0, "offset": 0.0, "seconds": 0.0, "error": "boom", "backoff": 0.0}
    ]
    assert other.pk == steps[1]["id"]
    assert "attempt_log" in schema and "StepAttemptOutput" in schema


def test_the_list_writes_each_run_as_the_declared_fields_give_it(api_as, sim_pool, reviewer):
    """The runs list's hand-written serialisation gives what DRF's field-by-field one gives,
    for runs queued, running, finished with and without a score, failed, and without a creator."""
    from webui.api.serializers import RunSummaryOutputSerializer

    now = timezone.now()
    make_run(pool=sim_pool)
    make_run(pool=sim_pool, status=Run.Status.RUNNING, started_at=now, created_by=reviewer)
    make_run(
        pool=sim_pool,
        status=Run.Status.SUCCEEDED,
        answer="Working.\nAnswer: 50",
        grader="number",
        score=1.0,
        tokens_in=12,
        tokens_out=34,
        cost=0.25,
        model_calls=3,
        wall_time=1.5,
        step_count=2,
        last_seq=9,
        started_at=now,
        finished_at=now + dt.timedelta(seconds=1, microseconds=5),
        created_by=reviewer,
    )
    make_run(pool=sim_pool, status=Run.Status.SUCCEEDED, answer="42", finished_at=now)
    make_run(pool=sim_pool, status=Run.Status.FAILED, error="<b>boom</b>", finished_at=now)
    response = api_as(reviewer).get(RUNS_URL)
    assert response.status_code == 200
    listed = response.json()["results"]
    assert len(listed) == 5
    request = response.wsgi_request
    for run, shown in zip(
        Run.objects.filter(pk__in=[r["id"] for r in listed]).order_by("-created_at", "-id"),
        listed,
        strict=True,
    ):
        serializer = RunSummaryOutputSerializer(context={"request": request})
        by_fields = serializer.field_by_field(run)
        assert shown == by_fields
        assert list(serializer.to_representation(run)) == list(by_fields)  # same key order


def test_the_detail_writes_the_run_its_plans_and_steps_as_the_declared_fields_give_them(
    api_as, sim_pool, reviewer
):
    """The run detail's hand-written serialisation gives what DRF's field-by-field one gives:
    a finished run with a creator, a replay's edits, plans with and without a workflow (stored
    attempts missing keys take the declared defaults), steps done, failed with a retry log,
    pending, and reused."""
    from webui.api.serializers import RunDetailOutputSerializer

    now = timezone.now()
    source = make_run(pool=sim_pool)
    run = make_run(
        pool=sim_pool,
        status=Run.Status.SUCCEEDED,
        answer="Working.\nAnswer: 50",
        grader="number",
        reference="50",
        score=0.5,
        strategy_options={"rounds": 2},
        edits=[{"step": 1, "field": "instruction", "before": "a", "after": "b"}],
        replay_of=source,
        wall_time=2.5,
        started_at=now,
        finished_at=now + dt.timedelta(seconds=2, microseconds=7),
        created_by=reviewer,
        end_user="someone",
    )
    make_plan(
        run=run,
        messages=[{"role": "user", "content": "Plan <this>"}],
        attempts=[{"raw": "{}", "tokens_in": 3, "cost": 0.5}, {"error": "bad JSON"}],
        workflow=[{"worker": 1, "instruction": "Add.", "access": "all"}],
    )
    make_plan(run=run, round=1, workflow=None, error="no attempt could be used")
    first = make_step(
        run=run,
        status="succeeded",
        response="50",
        access="all",
        tokens_in=5,
        cost=0.125,
        latency=0.75,
        started_at=now,
        finished_at=now + dt.timedelta(seconds=1),
    )
    make_step(
        run=run,
        index=1,
        status="failed",
        access=[0],
        reads=[first.pk],
        attempts=2,
        error="timeout",
        attempt_log=[{"attempt": 1, "seconds": 1.5, "error": "timeout"}, {"attempt": 2}],
        reused_from=first,
    )
    make_step(run=run, round=1, index=0)
    response = api_as(reviewer).get(reverse("api-run-detail", args=[run.pk]))
    assert response.status_code == 200
    shown = response.json()
    assert [plan["round"] for plan in shown["plans"]] == [0, 1]
    assert [(step["round"], step["index"]) for step in shown["steps"]] == [(0, 0), (0, 1), (1, 0)]
    serializer = RunDetailOutputSerializer(context={"request": response.wsgi_request})
    by_fields = serializer.field_by_field(selectors.run_detail(user=reviewer, run_id=run.pk))
    assert shown == by_fields
    written = serializer.to_representation(selectors.run_detail(user=reviewer, run_id=run.pk))
    assert list(written) == list(by_fields)  # same key order
    assert [list(plan) for plan in written["plans"]] == [list(p) for p in by_fields["plans"]]
    assert [list(step) for step in written["steps"]] == [list(s) for s in by_fields["steps"]]


@pytest.mark.parametrize(
    ("grader", "reference"), [("numeric", "four"), ("code", "4"), ("choice", "Paris")]
)
def test_a_reference_its_grader_cannot_read_is_a_400_naming_the_field(
    api_as, project_admin, sim_pool, grader, reference
):
    from orchestrator.models import Run

    response = api_as(project_admin).post(
        "/api/runs/",
        {"pool": sim_pool.pk, "input": "What is 2 + 2?", "reference": reference, "grader": grader},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "reference" in response.json()
    assert not Run.objects.exists()


def test_a_page_size_above_the_most_a_page_holds_is_a_400(api_as, reviewer):
    response = api_as(reviewer).get("/api/runs/?page_size=118230")
    assert response.status_code == 400
    assert "page_size" in response.json()
    assert api_as(reviewer).get("/api/runs/?page_size=200").status_code == 200
