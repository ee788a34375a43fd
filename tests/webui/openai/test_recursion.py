"""A pool whose worker is a pool of the same server, through /v1, with litellm as the client."""

from __future__ import annotations

import os

import pytest

from tests.webui.openai.v1server import V1Server

QUESTION = "What is 17 * 23?"


def litellm_completion(v1: V1Server, model: str):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm.completion(
        model=f"openai/{model}",
        api_base=v1.base_url,
        api_key=v1.key,
        messages=[{"role": "user", "content": QUESTION}],
        num_retries=0,
        max_retries=0,
        timeout=120,
    )


def test_a_pool_calls_another_pool_and_the_nested_run_hangs_off_the_calling_step(v1):
    response = litellm_completion(v1, "recursive:single")
    outer_id = int(response.id.rsplit("-", 1)[1])
    found = v1.query(
        "from orchestrator.models import Run, Step\n"
        f"outer = Run.objects.get(pk={outer_id})\n"
        "step = Step.objects.get(run=outer)\n"
        "nested = list(step.nested_runs.values('id', 'depth', 'status', 'answer', 'input'))\n"
        "result = {'outer': [outer.status, outer.depth, outer.answer], 'step': step.response,"
        " 'nested': nested}"
    )
    assert found["outer"][:2] == ["succeeded", 0]
    assert response.choices[0].message.content == found["outer"][2]
    [nested] = found["nested"]
    assert nested["depth"] == 1 and nested["status"] == "succeeded"
    # The nested run answered the calling step's instruction, and its answer is the step's.
    assert QUESTION in nested["input"]
    assert found["step"] == nested["answer"] != ""


def test_a_pool_that_calls_itself_is_stopped_at_the_depth_limit(v1):
    import litellm

    with pytest.raises(litellm.exceptions.InternalServerError) as error:
        litellm_completion(v1, "loop:single")
    assert "/runs/" in str(error.value)
    depths = v1.query(
        "from orchestrator.models import Run\n"
        "result = sorted(set(Run.objects.filter(pool__name='Loop').values_list('depth', "
        "'status')))"
    )
    # Depth 0 (the client's call), 1 and 2 ran and failed; a third level was refused.
    assert depths == [[0, "failed"], [1, "failed"], [2, "failed"]]
    deepest_error = v1.query(
        "from orchestrator.models import Run\n"
        "result = Run.objects.filter(pool__name='Loop', depth=2).first().error"
    )
    assert "Nested too deep" in deepest_error and "the limit is 2" in deepest_error


def test_the_calling_step_links_to_its_nested_run_in_the_api_and_the_page(v1):
    import httpx

    response = litellm_completion(v1, "recursive:single")
    outer_id = int(response.id.rsplit("-", 1)[1])
    token = v1.server.manage("drf_create_token", "admin").stdout.split()[2]
    api = httpx.Client(base_url=v1.server.url, headers={"Authorization": f"Token {token}"})
    [step] = api.get(f"/api/runs/{outer_id}/").json()["steps"]
    [nested] = api.get(f"/api/steps/{step['id']}/").json()["nested_runs"]
    assert nested["url"] == f"/runs/{nested['id']}/" and nested["status"] == "succeeded"
    detail = api.get(f"/api/runs/{nested['id']}/").json()
    assert (detail["called_from"], detail["depth"]) == (step["id"], 1)
