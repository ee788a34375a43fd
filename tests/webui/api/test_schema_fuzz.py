"""Every API operation, driven from its OpenAPI schema by Schemathesis, against the real app.

Requests go to the WSGI application in this process (same database transaction as the test),
authenticated with a project admin's token. Schemathesis generates valid and invalid
parameters and bodies for every operation and runs all its checks on each response, among them:
no 5xx, the body matches the documented schema, the status is one the schema documents, invalid
input is refused, a request without the token or with a wrong one is refused. Runs created by
``POST /api/runs/`` are never executed: their start waits for a commit that never comes.

Bounded: EXAMPLE_BUDGET examples per generation mode and variant, shared by the operations (at
least MIN_EXAMPLES each), so the run takes about as long however many operations the API has.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import positive_data_acceptance

from orchestrator.models import Run
from orchestrator.services.api_keys import api_key_create
from orchestrator.services.batches import batch_create
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.experiments import experiment_create, parse_arms
from orchestrator.services.review import comment_create, failure_kinds_ensure
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_member, make_pool, make_user

EXAMPLE_BUDGET = 800
MIN_EXAMPLES = 10
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
# A schema-valid run request is still refused (400) when its pool is not one of the user's or
# its options do not fit the pool: the schema cannot say which ids exist. Every other check
# still applies to it, and the variant with a real pool shows valid requests are accepted.
# The same for a key request naming a project that is not the user's.
DATA_DEPENDENT = {("POST", "/api/runs/"), ("POST", "/api/keys/")}
# A replay's edits name steps and workers by id, which the schema cannot know either.
DATA_DEPENDENT |= {("POST", "/api/runs/{run_id}/replays/")}
# Compare: a schema-valid list of ids is still a 404 when one is not a run the user can see, or
# a 400 when it names a run twice; the variant with real runs shows valid requests are accepted.
DATA_DEPENDENT |= {("GET", "/api/compare/")}
# Review: a label names a failure kind of the run's project, an assignee a reviewer of it, a
# fixing run one of its runs, a comment's step one of the run's steps, a project one of the
# user's; only its author edits a comment; a review is reopened only once resolved.
DATA_DEPENDENT |= {
    ("POST", "/api/runs/{run_id}/labels/"),
    ("POST", "/api/runs/{run_id}/comments/"),
    ("PUT", "/api/runs/{run_id}/assignee/"),
    ("PUT", "/api/runs/{run_id}/resolution/"),
    ("DELETE", "/api/runs/{run_id}/resolution/"),
    ("PATCH", "/api/comments/{comment_id}/"),
    ("GET", "/api/review/queue/"),
    ("GET", "/api/review/insights/"),
    ("GET", "/api/analytics/"),
    ("GET", "/api/failure-kinds/"),
    ("POST", "/api/failure-kinds/"),
    ("PATCH", "/api/failure-kinds/{kind_id}/"),
    ("DELETE", "/api/failure-kinds/{kind_id}/"),
}
# Pools, workers and members: a name must be free in its project, a key variable a valid name,
# call parameters free of secrets and small, a username must exist, reordering must list every
# worker once, the last admin keeps the role: rules on the rows, not the schema.
DATA_DEPENDENT |= {
    ("POST", "/api/pools/"),
    ("PATCH", "/api/pools/{pool_id}/"),
    ("POST", "/api/pools/{pool_id}/workers/"),
    ("PATCH", "/api/pools/{pool_id}/workers/{worker_id}/"),
    ("POST", "/api/pools/{pool_id}/workers/reorder/"),
    ("POST", "/api/projects/{project_slug}/members/"),
    ("PATCH", "/api/projects/{project_slug}/members/{membership_id}/"),
}
# The same for datasets and experiments: which project, dataset, run or arm ids exist, whether
# an imported file's lines are good and whether a dataset's name is taken are not in the schema.
DATA_DEPENDENT |= {
    ("POST", "/api/datasets/"),
    ("POST", "/api/datasets/suite/"),
    ("POST", "/api/datasets/{dataset_id}/items/"),
    ("POST", "/api/experiments/"),
    ("GET", "/api/experiments/{experiment_id}/runs/"),
    ("GET", "/api/experiments/{experiment_id}/head-to-head/"),
}
# A batch request is refused (400) when its override names a worker no pool has, or its filters
# match no run.
DATA_DEPENDENT |= {("POST", "/api/batches/")}


@dataclass
class Figures:
    operations: set[str] = field(default_factory=set)
    cases: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def wsgi_app():
    """The site's WSGI application, keeping the test's connection (and transaction) open across
    requests, as Django's own test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield WSGIHandler()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def stored_runs(sim_pool, project):
    """Runs to look at: a finished conductor run (plans, steps), a failed one, a queued one."""
    finished = run_create(pool=sim_pool, input="What is 17 * 23?", reference="391", enqueue=False)
    run_execute(run_id=finished.pk)
    broke = make_pool(project=project, workers=1, token_budget=1)
    failed = run_create(pool=broke, input="What is 2 + 2?", strategy="moa", enqueue=False)
    run_execute(run_id=failed.pk)
    queued = run_create(pool=sim_pool, input="What is 3 + 4?", enqueue=False)
    return [Run.objects.get(pk=run.pk) for run in (finished, failed, queued)]


def _with_body_values(values: dict[str, Any]):
    def apply(case):
        if isinstance(case.body, dict):
            case.body = {**case.body, **values}
        return case

    return apply


def _with_query_values(values: dict[str, Any]):
    def apply(case):
        case.query = {**(case.query or {}), **values}
        return case

    return apply


def test_every_operation_keeps_to_its_schema(
    wsgi_app, project, project_admin, sim_pool, stored_runs
):
    token = Token.objects.create(user=project_admin)
    schema = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)
    # The admin's token on every request and no made-up credentials, so the auth check can tell
    # that the same request without the token, or with a wrong one, is refused.
    schema.config.update(headers={"Authorization": f"Token {token.key}"})
    # DRF refuses NUL characters in text with a 400 (PostgreSQL cannot store them), which the
    # schema does not say; generating them would only find that.
    schema.config.generation.update(with_security_parameters=False, allow_x00=False)
    api_key, _ = api_key_create(user=project_admin, project=project, name="fuzzed")
    kinds = failure_kinds_ensure(project=project)
    comment = comment_create(actor=project_admin, run=stored_runs[1], body="Why did it fail?")
    make_user(username="fuzz-invitee")
    dataset = dataset_ensure_suite(project=project)
    experiment = experiment_create(
        dataset=dataset,
        arms=parse_arms("single:0,single:1", pool=sim_pool),
        sample=2,
        tags=["lookup"],
        enqueue=False,
    )
    batch = batch_create(
        project=project,
        actor=project_admin,
        filters={"status": "succeeded"},
        override={"kind": "instruction", "match": "literal", "pattern": "a", "replacement": "b"},
        enqueue=False,
    )
    known_ids = {
        "batch_id": batch.pk,
        "run_id": stored_runs[0].pk,
        "step_id": stored_runs[0].steps.first().pk,
        "key_id": api_key.pk,
        "comment_id": comment.pk,
        "kind_id": kinds[-1].pk,
        "pool_id": sim_pool.pk,
        "worker_id": sim_pool.workers.first().pk,
        "project_slug": project.slug,
        "membership_id": make_member(project=project, role="viewer").memberships.get().pk,
        "dataset_id": dataset.pk,
        "experiment_id": experiment.pk,
    }
    figures = Figures()
    started = time.perf_counter()

    operations = [result.ok() for result in schema.get_all_operations()]
    max_examples = max(MIN_EXAMPLES, EXAMPLE_BUDGET // len(operations))
    for operation in operations:
        label = f"{operation.method.upper()} {operation.path}"
        figures.operations.add(label)
        data_dependent = (operation.method.upper(), operation.path) in DATA_DEPENDENT
        excluded = [positive_data_acceptance] if data_dependent else []
        path_names = [parameter.name for parameter in operation.path_parameters]
        # (name, modes, fixed path parameters, change to each generated case)
        variants: list[tuple[str, tuple, dict[str, Any] | None, Any]] = [
            ("generated", MODES, None, None)
        ]
        if path_names:  # also on rows that exist, not only on ids no one has
            existing = {name: known_ids[name] for name in path_names}
            variants.append(("existing", MODES, existing, None))
        if operation.body:  # also valid requests on a pool or project the user may use
            real = {
                "/api/keys/": {"project": project.slug},
                "/api/failure-kinds/": {"project": project.slug},
                "/api/pools/": {"project": project.slug},
                "/api/projects/{project_slug}/members/": {"username": "fuzz-invitee"},
                "/api/datasets/": {"project": project.pk},
                "/api/datasets/suite/": {"project": project.pk},
                "/api/datasets/{dataset_id}/items/": {"run": stored_runs[0].pk},
                "/api/experiments/": {"dataset": dataset.pk},
                "/api/batches/": {"project": project.pk},
            }.get(operation.path, {"pool": sim_pool.pk})
            variants.append(("real rows", MODES[:1], None, _with_body_values(real)))
        if operation.path == "/api/compare/":  # also on runs that exist
            runs = f"{stored_runs[0].pk},{stored_runs[1].pk}"
            variants.append(("real rows", MODES[:1], None, _with_query_values({"runs": runs})))
        if operation.path == "/api/analytics/":  # also on the admin's own project
            real_project = _with_query_values({"project": project.slug})
            variants.append(("real rows", MODES[:1], None, real_project))
        for variant, modes, path_parameters, transform in variants:
            for mode in modes:
                strategy = operation.as_strategy(
                    generation_mode=mode, path_parameters=path_parameters
                )
                if transform is not None:
                    strategy = strategy.map(transform)

                @given(case=strategy)
                @settings(
                    max_examples=max_examples,
                    deadline=None,
                    database=None,
                    derandomize=True,
                    suppress_health_check=list(HealthCheck),
                )
                def check(case):
                    figures.cases += 1
                    response = case.call_and_validate(excluded_checks=excluded)  # noqa: B023 (run below, in this iteration)
                    figures.statuses[response.status_code] = (
                        figures.statuses.get(response.status_code, 0) + 1
                    )

                try:
                    check()
                except Unsatisfiable:
                    # Nothing to make invalid (no parameters, or only a fixed existing id).
                    assert mode == schemathesis.GenerationMode.NEGATIVE, label
                except (FailureGroup, Exception) as error:  # noqa: BLE001 (all reported below)
                    figures.failures[f"{label} ({mode.value}, {variant})"] = str(error)

    elapsed = time.perf_counter() - started
    summary = (
        f"Schemathesis: {len(figures.operations)} operations, {figures.cases} cases, "
        f"{len(figures.failures)} failures in {elapsed:.1f}s; statuses "
        f"{dict(sorted(figures.statuses.items()))}"
    )
    print(summary)
    assert len(figures.operations) >= 7, summary
    assert any(200 <= status < 300 for status in figures.statuses), summary
    details = "\n\n".join(f"{name}:\n{text[:3000]}" for name, text in figures.failures.items())
    assert not figures.failures, f"{summary}\n\n{details}"
