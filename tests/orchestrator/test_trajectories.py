"""Training export: runs made by the real engine (simulated models) and stored plans with parse
errors, read back as TRL's conversational prompt/completion records."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from orchestrator.models import Plan, Run
from orchestrator.services.runs import run_create, run_execute
from orchestrator.trajectories import TRAJECTORY_FIELDS, decision_reward
from tests.factories import make_pool

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume"),
]

# TRL's conversational prompt/completion format: "prompt" a list of messages ending before the
# answer, "completion" a list with the model's turn (trl docs, "Dataset formats").
ROLES = {"system", "user", "assistant"}


def assert_trl_record(row: dict) -> None:
    assert isinstance(row["prompt"], list) and row["prompt"]
    assert all(set(m) == {"role", "content"} and m["role"] in ROLES for m in row["prompt"])
    assert all(isinstance(m["content"], str) for m in row["prompt"])
    assert row["prompt"][-1]["role"] == "user"
    assert row["completion"] == [{"role": "assistant", "content": row["raw_output"]}]


def executed_run(pool, admin, question: str, reference: str) -> Run:
    run = run_create(
        pool=pool, input=question, reference=reference, created_by=admin, enqueue=False
    )
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def repaired_plan(run: Run) -> None:
    """The conductor's first output did not parse; the second did (as the engine stores it)."""
    plan = run.plans.get(round=0)
    good = plan.attempts[0]["raw"]
    system, user = plan.messages[:2]
    plan.messages = [
        system,
        user,
        {"role": "assistant", "content": "model_id = [0"},
        {"role": "user", "content": "Your workflow could not be read: unclosed list."},
    ]
    plan.attempts = [
        {"raw": "", "error": "timed out", "tokens_in": 0, "tokens_out": 0},  # a failed call
        {"raw": "model_id = [0", "error": "unclosed list", "tokens_in": 9, "tokens_out": 3},
        {"raw": good, "error": "", "tokens_in": 9, "tokens_out": 30},
    ]
    plan.save(update_fields=["messages", "attempts"])


@pytest.fixture
def runs(project, project_admin):
    pool = make_pool(project=project, workers=3)
    right = executed_run(pool, project_admin, "What is 17 * 23?", "391")
    wrong = executed_run(pool, project_admin, "What is 2 + 2?", "5")
    repaired_plan(right)
    return right, wrong


def export(client: APIClient, **query) -> list[dict]:
    response = client.get("/api/export/trajectories.jsonl", query)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/jsonl")
    text = b"".join(response).decode()
    return [json.loads(line) for line in text.splitlines()]


def test_each_decision_is_a_trl_record_with_its_reward(runs, project_admin):
    right, wrong = runs
    assert (right.score, wrong.score) == (1.0, 0.0)
    client = APIClient()
    client.force_authenticate(project_admin)
    rows = export(client)

    assert all(list(row) == list(TRAJECTORY_FIELDS) for row in rows)
    for row in rows:
        assert_trl_record(row)
    by_run = {run.pk: [row for row in rows if row["run_id"] == run.pk] for run in runs}
    first, second = by_run[right.pk][:2]
    # The unparsable output: reward 0, its error, no workflow; the repaired one learns from it.
    assert (first["round"], first["attempt"], first["reward"]) == (0, 0, 0.0)
    assert first["parse_error"] == "unclosed list" and first["workflow"] is None
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert second["prompt"][2:] == [
        {"role": "assistant", "content": "model_id = [0"},
        {"role": "user", "content": "Your workflow could not be read: unclosed list."},
    ]
    stored = Plan.objects.get(run=right, round=0).workflow
    assert [(s["worker"], s["instruction"]) for s in second["workflow"]] == [
        (s["worker"], s["instruction"]) for s in stored
    ]
    assert [s["access_all"] for s in second["workflow"]] == [s["access"] == "all" for s in stored]
    assert second["reward"] == 1.0 and second["answer"] == right.answer
    assert second["reference"] == "391"
    assert {row["reward"] for row in by_run[wrong.pk]} == {0.5}


def json_types(value, path="") -> set[tuple[str, str]]:
    """(path, JSON type) of every value in a record, lists and objects walked into."""
    if isinstance(value, dict):
        found = {(path, "object")}
        for key, item in value.items():
            found |= json_types(item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        found = {(path, "array")}
        for item in value:
            found |= json_types(item, f"{path}[]")
        return found
    kind = {bool: "boolean", int: "number", float: "number", str: "string"}.get(type(value), "null")
    return {(path, kind)}


def test_every_field_has_one_type_on_every_line(runs, project_admin):
    """What a columnar loader (the datasets library reads JSON Lines with Arrow) needs."""
    client = APIClient()
    client.force_authenticate(project_admin)
    seen: dict[str, set[str]] = {}
    for row in export(client):
        for path, kind in json_types(row):
            seen.setdefault(path, set()).add(kind)
    mixed = {path: kinds - {"null"} for path, kinds in seen.items() if len(kinds - {"null"}) > 1}
    assert mixed == {}
    assert seen[".workflow[].access_all"] == {"boolean"}


def test_filters_and_partial_credit_apply_and_other_projects_stay_out(
    runs, project_admin, outsider
):
    right, wrong = runs
    client = APIClient()
    client.force_authenticate(project_admin)
    rows = export(client, score_max=0.5, partial_credit=0.0)
    assert {row["run_id"] for row in rows} == {wrong.pk}
    assert {row["reward"] for row in rows} == {0.0}
    outside = APIClient()
    outside.force_authenticate(outsider)
    assert export(outside) == []
    anonymous = APIClient().get("/api/export/trajectories.jsonl")
    assert anonymous.status_code in (401, 403)


def test_the_command_writes_the_same_lines(runs, project_admin, tmp_path):
    client = APIClient()
    client.force_authenticate(project_admin)
    path = tmp_path / "out.jsonl"
    call_command("export_trajectories", "--output", str(path), stderr=io.StringIO())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == export(client)


def test_reward_is_zero_unparsed_and_scaled_by_partial_credit():
    assert decision_reward(parsed=False, score=1.0, partial_credit=0.5) == 0.0
    assert decision_reward(parsed=True, score=1.0, partial_credit=0.5) == 1.0
    assert decision_reward(parsed=True, score=0.0, partial_credit=0.5) == 0.5
    assert decision_reward(parsed=True, score=0.0, partial_credit=0.0) == 0.0
    assert decision_reward(parsed=True, score=None, partial_credit=0.5) is None


def test_a_v1_key_exports_its_own_projects_runs_only(runs, project, project_admin):
    from orchestrator.models import Membership
    from orchestrator.services.api_keys import api_key_create, api_key_revoke
    from tests.factories import make_project

    other = make_project(name="Second")
    Membership.objects.create(project=other, user=project_admin, role=Membership.Role.ADMIN)
    elsewhere = executed_run(make_pool(project=other), project_admin, "What is 1 + 1?", "2")
    api_key, key = api_key_create(user=project_admin, project=project)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert {row["run_id"] for row in export(client)} == {run.pk for run in runs}
    assert export(client, project=other.pk) == []
    session = APIClient()
    session.force_authenticate(project_admin)
    assert elsewhere.pk in {row["run_id"] for row in export(session)}

    api_key_revoke(user=project_admin, key_id=api_key.pk)
    response = client.get("/api/export/trajectories.jsonl")
    assert response.status_code in (401, 403)  # 403 while session auth is listed first
    assert "revoked" in response.json()["detail"]
