"""A field the API does not know is never ignored: every operation that takes a body (walked from
the OpenAPI schema, so a new one is covered the day it is added) answers 400 naming it and does
nothing, however deep in the body it is; an operation that takes no body refuses one."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings
from drf_spectacular.generators import SchemaGenerator

from orchestrator.models import AuditEntry, Membership, Pool, Run, Worker
from orchestrator.services.api_keys import api_key_create
from orchestrator.services.batches import batch_create
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.experiments import experiment_create, parse_arms
from orchestrator.services.review import comment_create, failure_kinds_ensure
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_member

UNKNOWN = "zz_not_a_field"
WRITES = ("post", "put", "patch", "delete")


def api_operations() -> list[tuple[str, str, bool]]:
    """(method, path, takes a body) for every write operation the schema documents."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (method, path, "requestBody" in operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in WRITES and path.startswith("/api/")
    ]


@pytest.fixture
def known_ids(project, project_admin, sim_pool):
    finished = run_create(pool=sim_pool, input="What is 17 * 23?", reference="391", enqueue=False)
    run_execute(run_id=finished.pk)
    queued = run_create(pool=sim_pool, input="What is 3 + 4?", enqueue=False)
    api_key, _ = api_key_create(user=project_admin, project=project, name="k")
    kinds = failure_kinds_ensure(project=project)
    comment = comment_create(actor=project_admin, run=finished, body="Why?")
    dataset = dataset_ensure_suite(project=project)
    experiment = experiment_create(
        dataset=dataset, arms=parse_arms("single:0", pool=sim_pool), sample=1, enqueue=False
    )
    batch = batch_create(
        project=project,
        actor=project_admin,
        filters={"status": "succeeded"},
        override={"kind": "instruction", "match": "literal", "pattern": "a", "replacement": "b"},
        enqueue=False,
    )
    member = make_member(project=project, role=Membership.Role.VIEWER)
    return {
        "run_id": queued.pk,
        "step_id": finished.steps.first().pk,
        "key_id": api_key.pk,
        "comment_id": comment.pk,
        "kind_id": kinds[-1].pk,
        "pool_id": sim_pool.pk,
        "worker_id": sim_pool.workers.first().pk,
        "project_slug": project.slug,
        "project": project.slug,
        "membership_id": member.memberships.get().pk,
        "dataset_id": dataset.pk,
        "experiment_id": experiment.pk,
        "batch_id": batch.pk,
    }


def _counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in (Run, AuditEntry, Pool, Worker)} | {
        "enabled": Worker.objects.filter(enabled=True).count(),
        "queued": Run.objects.filter(status=Run.Status.QUEUED).count(),
    }


@override_settings(CONDUCTOR_EXECUTION="inline")
def test_every_write_operation_refuses_a_field_it_does_not_take(api_as, project_admin, known_ids):
    operations = api_operations()
    assert len(operations) >= 30
    client = api_as(project_admin)
    before = _counts()
    refused = []
    for method, path, _takes_body in operations:
        url = re.sub(r"\{(\w+)\}", lambda m: str(known_ids[m.group(1)]), path)
        response = getattr(client, method)(url, {UNKNOWN: 1}, format="json")
        body = response.json() if response.content else None
        if response.status_code == 400 and UNKNOWN in (body or {}):
            refused.append((method, path))
        else:
            pytest.fail(f"{method.upper()} {path}: {response.status_code} {body}")
    assert len(refused) == len(operations)
    assert _counts() == before  # nothing was made, changed, disabled or audited


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        # The misspelling that once ran with the default options.
        ("/api/runs/", {"input": "2 + 2?", "options": {"worker": 1}}, "options"),
        ("/api/batches/", {"filters": {"verdcit": "wrong"}}, "filters.verdcit"),
        ("/api/batches/", {"override": {"kind": "worker", "form": "a"}}, "override.form"),
        ("/api/experiments/", {"arms": [{"strategy": "single", "opts": {}}]}, "arms[0].opts"),
        ("/api/runs/{run_id}/replays/", {"edits": [{"step": 1, "instr": "x"}]}, "edits[0].instr"),
    ],
)
def test_an_unknown_field_inside_a_body_is_named_where_it_is(
    api_as, project_admin, sim_pool, known_ids, path, body, named
):
    body = {"pool": sim_pool.pk, "project": known_ids["project"], **body}
    url = path.format(**known_ids)
    response = api_as(project_admin).post(url, body, format="json")
    assert response.status_code == 400, response.json()
    assert named in response.json(), response.json()
    assert "Unknown field" in response.json()[named][0]


def test_a_known_body_still_works(api_as, project_admin, sim_pool):
    response = api_as(project_admin).post(
        "/api/runs/",
        {"input": "What is 2 + 2?", "pool": sim_pool.pk, "strategy": "single"},
        format="json",
    )
    assert response.status_code == 201, response.json()
