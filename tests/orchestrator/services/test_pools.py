"""Projects, memberships and pools kept in step with a definition in code (what seed_demo uses)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.models import Membership, Project, Run, Step, Worker
from orchestrator.providers.simulator import demo_pool
from orchestrator.services.pools import (
    membership_set,
    pool_sync_from_data,
    project_get_or_create,
)
from tests.factories import make_run, make_step, make_user

pytestmark = pytest.mark.django_db


def workers_in_order(pool) -> list[tuple[str, bool]]:
    return list(pool.workers.order_by("position").values_list("name", "enabled"))


def test_a_project_is_made_once_with_a_slug_of_its_name():
    project = project_get_or_create(name="Research Team")

    assert project.slug == "research-team"
    assert project_get_or_create(name="Research Team") == project
    assert Project.objects.count() == 1


def test_a_membership_is_given_then_its_role_changed_in_place():
    project = project_get_or_create(name="Team")
    user = make_user(username="mia")

    membership_set(project=project, user=user, role=Membership.Role.VIEWER)
    membership_set(project=project, user=user, role=Membership.Role.ADMIN)

    assert list(Membership.objects.values_list("user__username", "role")) == [("mia", "admin")]


def test_a_new_pool_is_stored_as_defined():
    project = project_get_or_create(name="Team")
    data = demo_pool(latency=0)

    pool, created = pool_sync_from_data(project=project, data=data)

    assert created
    assert (pool.project, pool.name, pool.conductor_model) == (
        project,
        data.name,
        data.conductor_model,
    )
    assert (pool.max_steps, pool.max_rounds, pool.access_mode) == (5, 2, "fine")
    assert workers_in_order(pool) == [(worker.name, True) for worker in data.workers]
    first = pool.workers.get(position=0)
    assert (first.model, first.params) == (data.workers[0].model, data.workers[0].params)


def test_syncing_again_updates_reorders_and_disables_what_is_no_longer_named():
    project = project_get_or_create(name="Team")
    data = demo_pool(latency=0)
    pool, _ = pool_sync_from_data(project=project, data=data)
    dropped = data.workers[0]
    run = make_run(pool=pool)
    make_step(run=run, worker=pool.workers.get(name=dropped.name))  # a stored step uses it
    kept = tuple(reversed(data.workers[1:]))
    changed = replace(kept[0], price_in=kept[0].price_in + 1)

    again, created = pool_sync_from_data(
        project=project, data=replace(data, max_steps=7, workers=(changed, *kept[1:]))
    )

    assert not created and again.pk == pool.pk
    assert again.max_steps == 7
    enabled = again.workers.filter(enabled=True).order_by("position")
    assert [worker.name for worker in enabled] == [worker.name for worker in kept]
    assert not Worker.objects.get(pool=pool, name=dropped.name).enabled
    assert Worker.objects.get(pool=pool, name=changed.name).price_in == changed.price_in
    # The worker is disabled, not deleted: the step that used it still names it.
    assert Step.objects.get(run=run).worker.name == dropped.name
    assert Run.objects.count() == 1


def test_a_pool_of_the_same_name_in_another_project_is_another_pool():
    data = demo_pool(latency=0)
    first, _ = pool_sync_from_data(project=project_get_or_create(name="A"), data=data)
    second, created = pool_sync_from_data(project=project_get_or_create(name="B"), data=data)

    assert created and first.pk != second.pk
    assert second.workers.count() == first.workers.count()
