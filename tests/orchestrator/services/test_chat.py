"""chat_run_create and API keys: what a /v1 request becomes, and who it may reach."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from orchestrator.models import ApiKey, Membership
from orchestrator.services.api_keys import api_key_authenticate, api_key_create, api_key_revoke
from orchestrator.services.chat import (
    DepthExceeded,
    ModelNotFound,
    chat_run_create,
    conversation_input,
    parse_model_name,
)
from tests.factories import make_member, make_pool, make_project, make_run, make_step

pytestmark = pytest.mark.django_db

ASK = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture
def key(project, reviewer, sim_pool):
    api_key, _ = api_key_create(user=reviewer, project=project)
    return api_key


def test_model_names_pick_a_strategy_and_its_one_argument():
    assert parse_model_name("demo").strategy == "conductor"
    assert parse_model_name("demo:moa").options == {}
    assert parse_model_name("demo:single:2").options == {"worker": 2}
    assert parse_model_name("demo:reflection:4").options == {"rounds": 4}
    assert parse_model_name("demo:moa:1").options == {"aggregator": 1}
    for bad in ("", "demo:nope", "demo:conductor:1", "demo:single:x", "a:b:c:d", ":moa"):
        with pytest.raises(ModelNotFound):
            parse_model_name(bad)


def test_the_last_user_message_is_the_question_and_the_rest_context():
    assert conversation_input(ASK) == "What is 2 + 2?"
    text = conversation_input(
        [
            {"role": "system", "content": "Be exact."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "ignored: after the question"},
        ]
    )
    assert text == (
        "Conversation so far:\n[system] Be exact.\n\n[user] Hello\n\n[assistant] Hi.\n\n"
        "What is 2 + 2?"
    )
    for bad in (
        [],
        [{"role": "assistant", "content": "x"}],
        [{"content": "no role"}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
    ):
        with pytest.raises(ValidationError):
            conversation_input(bad)


def test_a_run_is_made_on_the_keys_project_only(key, sim_pool, outsider):
    run = chat_run_create(
        api_key=key,
        model=f"{sim_pool.api_slug}:single:1",
        messages=ASK,
        worker_params={"temperature": 0.3},
        end_user="u-1",
    )
    assert (run.pool, run.strategy, run.strategy_options) == (sim_pool, "single", {"worker": 1})
    assert (run.created_by, run.worker_params, run.end_user) == (
        key.user,
        {"temperature": 0.3},
        "u-1",
    )
    assert run.depth == 0 and run.called_from is None

    elsewhere = make_pool(project=outsider.memberships.get().project, name="Elsewhere pool")
    with pytest.raises(ModelNotFound):
        chat_run_create(api_key=key, model=elsewhere.api_slug, messages=ASK)


def test_depth_is_limited_and_the_calling_step_linked_within_the_project(
    key, sim_pool, settings, outsider
):
    settings.CONDUCTOR_MAX_DEPTH = 2
    with pytest.raises(DepthExceeded):
        chat_run_create(api_key=key, model=sim_pool.api_slug, messages=ASK, depth=3)
    step = make_step(run=make_run(pool=sim_pool))
    nested = chat_run_create(
        api_key=key, model=sim_pool.api_slug, messages=ASK, depth=2, called_from_step=step.pk
    )
    assert (nested.depth, nested.called_from) == (2, step)
    foreign = make_step(run=make_run(pool=make_pool(project=outsider.memberships.get().project)))
    unlinked = chat_run_create(
        api_key=key, model=sim_pool.api_slug, messages=ASK, called_from_step=foreign.pk
    )
    assert unlinked.called_from is None  # another project's step is never linked


def test_a_key_is_refused_once_revoked_or_its_user_inactive_and_used_time_is_coarse(
    project, reviewer, viewer
):
    api_key, key = api_key_create(user=reviewer, project=project)
    assert api_key_authenticate(key=key).pk == api_key.pk
    first_use = ApiKey.objects.get(pk=api_key.pk).last_used_at
    assert api_key_authenticate(key=key) is not None
    assert ApiKey.objects.get(pk=api_key.pk).last_used_at == first_use  # no write per request
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=timezone.now() - timedelta(minutes=5))
    api_key_authenticate(key=key)
    assert ApiKey.objects.get(pk=api_key.pk).last_used_at > first_use
    for wrong in ("", "cs-", key + "x", key.upper(), "sk-" + key[3:]):
        assert api_key_authenticate(key=wrong) is None

    reviewer.is_active = False
    reviewer.save(update_fields=["is_active"])
    assert api_key_authenticate(key=key) is None
    reviewer.is_active = True
    reviewer.save(update_fields=["is_active"])
    api_key_revoke(user=reviewer, key_id=api_key.pk)
    assert api_key_authenticate(key=key) is None
    with pytest.raises(PermissionDenied):
        api_key_create(user=viewer, project=project)
    stranger = make_member(project=make_project(), role=Membership.Role.ADMIN)
    with pytest.raises(PermissionDenied):
        api_key_create(user=stranger, project=project)
