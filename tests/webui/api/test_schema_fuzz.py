"""Every API operation, driven from its OpenAPI schema by Schemathesis, against the real app.

Requests go to the WSGI application in this process (same database transaction as the test),
authenticated with a project admin's token. Schemathesis generates valid and invalid
parameters and bodies for every operation and runs all its checks on each response, among them:
no 5xx, the body matches the documented schema, the status is one the schema documents, invalid
input is refused, a request without the token or with a wrong one is refused. Runs created by
``POST /api/runs/`` are never executed: their start waits for a commit that never comes.

Bounded to well under a minute: MAX_EXAMPLES per operation, generation mode and variant.
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
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_pool

MAX_EXAMPLES = 40
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
# A schema-valid run request is still refused (400) when its pool is not one of the user's or
# its options do not fit the pool: the schema cannot say which ids exist. Every other check
# still applies to it, and the variant with a real pool shows valid requests are accepted.
# The same for a key request naming a project that is not the user's.
DATA_DEPENDENT = {("POST", "/api/runs/"), ("POST", "/api/keys/")}
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
    }
    figures = Figures()
    started = time.perf_counter()

    for result in schema.get_all_operations():
        operation = result.ok()
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
                "/api/batches/": {"project": project.pk},
            }.get(operation.path, {"pool": sim_pool.pk})
            variants.append(("real rows", MODES[:1], None, _with_body_values(real)))
        for variant, modes, path_parameters, transform in variants:
            for mode in modes:
                strategy = operation.as_strategy(
                    generation_mode=mode, path_parameters=path_parameters
                )
                if transform is not None:
                    strategy = strategy.map(transform)

                @given(case=strategy)
                @settings(
                    max_examples=MAX_EXAMPLES,
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
