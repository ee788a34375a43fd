"""Editing pools and workers in the app: validation before any write, audit entries with the
fields that changed, workers that stored runs used disabled instead of deleted, reordering."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from orchestrator.models import AuditEntry, Pool, Worker
from orchestrator.services.pools import (
    MAX_WORKERS_PER_POOL,
    pool_create,
    pool_save,
    pool_update,
    worker_create,
    worker_remove,
    worker_update,
    workers_reorder,
)
from tests.factories import make_pool, make_run, make_step, make_worker

pytestmark = pytest.mark.django_db

WORKER = {"name": "Echo", "model": "openai/echo", "description": "Answers briefly."}


def test_a_pool_is_created_with_an_audit_entry_of_its_settings(project, project_admin):
    pool = pool_create(
        project=project, actor=project_admin, values={"name": "Research", "max_steps": 4}
    )
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target_id, entry.actor_name) == (
        "pool.create",
        pool.pk,
        "ada-admin",
    )
    assert entry.after["name"] == "Research" and entry.after["max_steps"] == 4


def test_an_update_records_only_the_fields_that_changed(project, project_admin):
    pool = make_pool(project=project)
    pool_update(pool=pool, actor=project_admin, values={"max_steps": 7, "max_rounds": 2})
    entry = AuditEntry.objects.get(action="pool.update")
    assert (entry.before, entry.after) == ({"max_steps": 5}, {"max_steps": 7})
    pool_update(pool=pool, actor=project_admin, values={"max_steps": 7})
    assert AuditEntry.objects.filter(action="pool.update").count() == 1  # nothing changed


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 999}, "max_steps"),
        ({"step_timeout": 1e9}, "step_timeout"),
        ({"conductor_api_key_env": "sk-live-123"}, "conductor_api_key_env"),
        ({"conductor_params": {"api_key": "x"}}, "conductor_params"),
        ({"conductor_params": [1, 2]}, "conductor_params"),
        ({"conductor_params": {"a": "x" * 5000}}, "conductor_params"),
        ({"conductor_api_base": "file:///etc/passwd"}, "conductor_api_base"),
        ({"access_mode": "sometimes"}, "access_mode"),
        ({"name": ""}, "name"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_settings_are_refused_naming_the_field_and_nothing_changes(
    project, project_admin, values, field
):
    pool = make_pool(project=project)
    with pytest.raises(ValidationError) as refused:
        pool_update(pool=pool, actor=project_admin, values=values)
    assert field in refused.value.message_dict
    pool.refresh_from_db()
    assert pool.max_steps == 5 and not AuditEntry.objects.exists()


def test_two_pools_of_a_project_cannot_share_a_name(project, project_admin):
    make_pool(project=project, name="Taken")
    with pytest.raises(ValidationError) as refused:
        pool_create(project=project, actor=project_admin, values={"name": "Taken"})
    assert "name" in refused.value.message_dict


def test_a_worker_is_added_at_the_end_and_audited(project, project_admin):
    pool = make_pool(project=project, workers=2)
    worker = worker_create(pool=pool, actor=project_admin, values=WORKER)
    assert list(pool.workers.order_by("position", "id"))[-1] == worker
    assert AuditEntry.objects.get().after["model"] == "openai/echo"


def test_a_worker_secret_in_its_parameters_is_refused(project, project_admin):
    pool = make_pool(project=project, workers=0)
    for params in ({"api_key": "sk-abc"}, {"Extra-Headers": {"Authorization": "Bearer x"}}):
        with pytest.raises(ValidationError) as refused:
            worker_create(pool=pool, actor=project_admin, values={**WORKER, "params": params})
        assert "params" in refused.value.message_dict
    assert not pool.workers.exists()


def test_a_pool_holds_a_bounded_number_of_workers(project, project_admin):
    pool = make_pool(project=project, workers=MAX_WORKERS_PER_POOL)
    with pytest.raises(ValidationError):
        worker_create(pool=pool, actor=project_admin, values=WORKER)


def test_a_worker_stored_runs_used_is_disabled_not_deleted(project, project_admin):
    pool = make_pool(project=project, workers=0)
    used, unused = make_worker(pool=pool), make_worker(pool=pool)
    make_step(run=make_run(pool=pool), worker=used)

    assert worker_remove(worker=used, actor=project_admin) is False
    assert worker_remove(worker=unused, actor=project_admin) is True
    used.refresh_from_db()
    assert used.enabled is False and used.steps.count() == 1
    assert not Worker.objects.filter(pk=unused.pk).exists()
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert actions == {"worker.disable", "worker.delete"}


def test_enabling_and_disabling_are_audited_as_such(project, project_admin):
    pool = make_pool(project=project, workers=1)
    worker = pool.workers.get()
    worker_update(worker=worker, actor=project_admin, values={"enabled": False})
    worker_update(worker=worker, actor=project_admin, values={"enabled": True, "price_in": 3.0})
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "after"))
    assert entries == [
        ("worker.disable", {"enabled": False}),
        ("worker.update", {"enabled": True, "price_in": 3.0}),
    ]


def test_reordering_needs_every_worker_once(project, project_admin):
    pool = make_pool(project=project, workers=3)
    ids = list(pool.workers.order_by("position").values_list("pk", flat=True))
    with pytest.raises(ValidationError):
        workers_reorder(pool=pool, actor=project_admin, order=ids[:2])
    with pytest.raises(ValidationError):
        workers_reorder(pool=pool, actor=project_admin, order=[ids[0], ids[0], ids[1]])
    workers_reorder(pool=pool, actor=project_admin, order=ids[::-1])
    assert list(pool.workers.order_by("position").values_list("pk", flat=True)) == ids[::-1]
    entry = AuditEntry.objects.get(action="pool.reorder")
    assert entry.after["workers"] == entry.before["workers"][::-1]


def test_the_page_form_saves_pool_and_workers_all_or_nothing(project, project_admin):
    pool = make_pool(project=project, workers=2)
    first, second = pool.workers.order_by("position")
    rows = [
        {"id": second.pk, "name": second.name, "model": "sim/swift", "description": "d"},
        {"id": None, **WORKER, "params": {"api_key": "leak"}},
    ]
    with pytest.raises(ValidationError) as refused:
        pool_save(project=project, pool=pool, actor=project_admin,
                  values={"max_steps": 3}, workers=rows)  # fmt: skip
    assert "workers.1.params" in refused.value.message_dict
    assert Pool.objects.get(pk=pool.pk).max_steps == 5 and pool.workers.count() == 2

    rows[1]["params"] = {"temperature": 0.1}
    pool_save(
        project=project, pool=pool, actor=project_admin, values={"max_steps": 3}, workers=rows
    )
    names = list(pool.workers.order_by("position").values_list("name", flat=True))
    assert names == [second.name, "Echo", first.name]
    assert Pool.objects.get(pk=pool.pk).max_steps == 3
