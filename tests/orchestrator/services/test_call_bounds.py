"""Every model call is bounded: a run's conductor and worker calls carry max_tokens (the pool's
defaults, a worker's own, or the call parameters, which win), seen on a real local
OpenAI-compatible server."""

from __future__ import annotations

import pytest

from orchestrator.engine.types import DEFAULT_MAX_TOKENS
from orchestrator.services.runs import run_create
from tests.factories import make_pool, make_worker
from tests.openai_server import FakeOpenAI, running_openai_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def server():
    with running_openai_server() as url:
        yield url


def sent_to(model: str) -> list[dict]:
    return [r["body"] for r in FakeOpenAI.requests if r["body"]["model"] == model]


def test_a_pool_bounds_conductor_and_worker_calls_by_default(project, server, execute):
    pool = make_pool(project=project, workers=0)
    assert (pool.conductor_max_tokens, pool.worker_max_tokens) == (DEFAULT_MAX_TOKENS,) * 2
    make_worker(pool=pool, position=0, model="openai/tiny", api_base=server, params={})
    run = execute(run_create(pool=pool, input="Say hi.", strategy="single", enqueue=False))
    assert run.status == "succeeded"
    assert [body["max_tokens"] for body in sent_to("tiny")] == [1024]


def test_a_worker_s_own_bound_beats_the_pool_s_and_params_beat_both(project, server, execute):
    pool = make_pool(project=project, workers=0, worker_max_tokens=300)
    make_worker(pool=pool, position=0, model="openai/a", api_base=server, params={})
    make_worker(pool=pool, position=1, model="openai/b", api_base=server, max_tokens=50)
    make_worker(
        pool=pool,
        position=2,
        model="openai/c",
        api_base=server,
        max_tokens=50,
        params={"max_tokens": 7, "temperature": 0},
    )
    make_worker(
        pool=pool,
        position=3,
        model="openai/d",
        api_base=server,
        params={"max_completion_tokens": 9},
    )
    run = execute(
        run_create(
            pool=pool,
            input="Say hi.",
            strategy="moa",
            strategy_options={"proposers": [1, 2, 3], "aggregator": 0},
            enqueue=False,
        )
    )
    assert run.status == "succeeded", run.error
    assert [body["max_tokens"] for body in sent_to("a")] == [300]
    assert [body["max_tokens"] for body in sent_to("b")] == [50]
    assert [body["max_tokens"] for body in sent_to("c")] == [7]
    # Another name for the same bound is the worker's own choice too: no max_tokens beside it.
    (d,) = sent_to("d")
    assert d["max_completion_tokens"] == 9 and "max_tokens" not in d


def test_empty_means_no_bound_but_the_server_s(project, server, execute):
    pool = make_pool(project=project, workers=0, worker_max_tokens=None)
    make_worker(pool=pool, position=0, model="openai/tiny", api_base=server, params={})
    execute(run_create(pool=pool, input="Say hi.", strategy="single", enqueue=False))
    (body,) = sent_to("tiny")
    assert "max_tokens" not in body


def test_the_run_s_own_parameters_win(project, server, execute):
    pool = make_pool(project=project, workers=0)
    make_worker(pool=pool, position=0, model="openai/tiny", api_base=server, max_tokens=50)
    run = run_create(
        pool=pool,
        input="Say hi.",
        strategy="single",
        enqueue=False,
        extra={"worker_params": {"max_tokens": 12}},
    )
    execute(run)
    assert [body["max_tokens"] for body in sent_to("tiny")] == [12]


def test_conductor_calls_are_bounded_unless_their_params_say(project, server, execute):
    pool = make_pool(
        project=project,
        workers=0,
        conductor_model="openai/planner",
        conductor_api_base=server,
        conductor_params={},
    )
    make_worker(pool=pool, position=0)
    execute(run_create(pool=pool, input="Say hi.", enqueue=False))
    calls = sent_to("planner")
    # The echo is no workflow: the conductor is asked again, every call bounded.
    assert len(calls) == 3 and {body["max_tokens"] for body in calls} == {1024}

    FakeOpenAI.requests.clear()
    pool.conductor_params = {"max_tokens": 2048}
    pool.conductor_max_tokens = 100
    pool.save()
    execute(run_create(pool=pool, input="Say hi.", enqueue=False))
    assert {body["max_tokens"] for body in sent_to("planner")} == {2048}
