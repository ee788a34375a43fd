"""A key planted in the server's environment is found nowhere it could leak to: not in a page,
an API response, a stored row of any table, an audit entry or a log line, after a pool ran
through a provider that fails (and echoes the key it was given) and one that succeeds, and
after its connections were tested."""

from __future__ import annotations

import logging

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from orchestrator.models import AuditEntry, Run
from orchestrator.services.runs import run_create, run_execute
from tests.openai_server import FakeOpenAI, running_openai_server
from tests.responses import body_of

pytestmark = pytest.mark.django_db

PLANTED_VARIABLE = "CONDUCTOR_PLANTED_KEY"
PLANTED = "sk-planted-9f8e7d6c5b4a39281706-never-shown"


@pytest.fixture
def server():
    with running_openai_server() as url:
        yield url


def every_stored_value() -> str:
    """Every row of every table, as text."""
    return "\n".join(
        repr(row) for model in apps.get_models() for row in model.objects.values_list()
    )


def test_a_planted_key_is_in_no_page_response_row_audit_entry_or_log(
    server, project, project_admin, monkeypatch, caplog, capsys
):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(PLANTED_VARIABLE, PLANTED)
    api = APIClient()
    api.force_authenticate(project_admin)
    pool = api.post(
        reverse("api-pool-list"),
        {"project": project.slug, "name": "Planted", "conductor_params": {"latency": 0}},
        format="json",
    ).json()
    common = {"api_base": server, "api_key_env": PLANTED_VARIABLE, "description": "d"}
    # "guarded" refuses any key but its own and says which key it got (a 401): a failing
    # provider that echoes the key. "tiny" answers.
    failing = api.post(
        reverse("api-worker-create", args=[pool["id"]]),
        {"name": "Failing", "model": "openai/guarded", **common},
        format="json",
    ).json()
    working = api.post(
        reverse("api-worker-create", args=[pool["id"]]),
        {"name": "Working", "model": "openai/tiny", **common},
        format="json",
    ).json()
    api.patch(
        reverse("api-worker-detail", args=[pool["id"], working["id"]]),
        {"price_in": 1.0},
        format="json",
    )

    from orchestrator.models import Pool

    stored_pool = Pool.objects.get(pk=pool["id"])
    runs = []
    for worker in (0, 1):
        run = run_create(
            pool=stored_pool,
            input="What is 2 + 2?",
            strategy="single",
            strategy_options={"worker": worker},
            enqueue=False,
        )
        run_execute(run_id=run.pk)
        runs.append(Run.objects.get(pk=run.pk))
    assert [run.status for run in runs] == ["failed", "succeeded"]
    # The key did go out, and the failing provider did send it back.
    assert any(r["authorization"] == f"Bearer {PLANTED}" for r in FakeOpenAI.requests)
    assert "401" in runs[0].error

    responses = [
        api.post(reverse("api-worker-test-connection", args=[pool["id"], failing["id"]])),
        api.post(reverse("api-worker-test-connection", args=[pool["id"], working["id"]])),
        api.post(reverse("api-pool-test-connection", args=[pool["id"]])),
        api.get(reverse("api-pool-list")),
        api.get(reverse("api-pool-detail", args=[pool["id"]])),
        api.get(reverse("api-pool-usage", args=[pool["id"]])),
        api.get(reverse("api-audit-list", args=[project.slug])),
        api.get(reverse("api-audit-export", args=[project.slug])),
    ]
    assert responses[0].json()["ok"] is False and "401" in responses[0].json()["error"]
    assert responses[1].json()["ok"] is True
    for run in runs:
        responses.append(api.get(reverse("api-run-detail", args=[run.pk])))
        for step in run.steps.all():
            responses.append(api.get(reverse("api-step-detail", args=[step.pk])))
    page = Client()
    page.force_login(project_admin)
    for url in (
        reverse("runs"),
        reverse("pools"),
        reverse("pool-detail", args=[pool["id"]]),
        reverse("audit"),
        reverse("audit-export"),
        *(reverse("run-detail", args=[run.pk]) for run in runs),
    ):
        responses.append(page.get(url))

    for response in responses:
        assert response.status_code == 200, response
        assert PLANTED.encode() not in body_of(response), response.request["PATH_INFO"]
    assert AuditEntry.objects.filter(target_type="worker").count() >= 3
    assert PLANTED not in every_stored_value()
    assert PLANTED_VARIABLE in every_stored_value()  # the name is stored, the value never
    logged = "\n".join(record.getMessage() for record in caplog.records)
    output = capsys.readouterr()
    assert PLANTED not in logged + output.out + output.err
