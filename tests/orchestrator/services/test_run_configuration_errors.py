"""A worker that cannot work as configured fails its run at once, saying why."""

from __future__ import annotations

import pytest

from orchestrator.models import Run, Step
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_pool, make_worker

pytestmark = pytest.mark.django_db

UNSET = "CONDUCTOR_TEST_KEY_NOBODY_SET"


def test_a_worker_whose_key_variable_is_unset_fails_the_run_once_naming_it(
    project, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.delenv(UNSET, raising=False)
    pool = make_pool(project=project, workers=0)
    make_worker(
        pool=pool,
        position=0,
        model="openai/gpt-x",
        api_base="http://127.0.0.1:9/v1",  # never reached: nothing is sent without the key
        api_key_env=UNSET,
        params={},
    )
    run = run_create(pool=pool, input="What is 2 + 2?", strategy="single", enqueue=False)

    with django_capture_on_commit_callbacks(execute=True):
        run_execute(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == Run.Status.FAILED
    step = Step.objects.get(run=run)
    assert step.status == Step.Status.FAILED
    assert step.error.startswith(f"environment variable {UNSET} is not set")
    assert UNSET in run.error
    assert step.attempts == 1  # not retried: another attempt would fail the same way
