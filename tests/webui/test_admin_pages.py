"""The pools, members and audit pages, and the project switcher, as a browser posts to them."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from orchestrator.models import AuditEntry, Membership, Pool, Worker
from tests.factories import make_member, make_pool, make_project, make_run, make_user
from tests.responses import body_of

pytestmark = pytest.mark.django_db


def form_data(pool: Pool, rows: list[dict], **changes) -> dict:
    """The pool page's form as posted: the pool's fields and one row per worker."""
    data = {
        "name": pool.name, "description": pool.description,
        "conductor_model": pool.conductor_model, "conductor_api_base": "",
        "conductor_api_key_env": "", "conductor_params": json.dumps(pool.conductor_params),
        "conductor_prompt_style": pool.conductor_prompt_style, "max_steps": pool.max_steps,
        "max_rounds": pool.max_rounds, "access_mode": pool.access_mode,
        "show_worker_names": "on", "step_timeout": pool.step_timeout,
        "token_budget": pool.token_budget or "", "cost_budget": pool.cost_budget or "",
        "conductor_output": pool.conductor_output,
        "conductor_json_dialect": pool.conductor_json_dialect,
        "plan_fallback": pool.plan_fallback,
        "conductor_max_tokens": pool.conductor_max_tokens or "",
        "worker_max_tokens": pool.worker_max_tokens or "",
        "conductor_max_concurrency": pool.conductor_max_concurrency or "",
        "workers-TOTAL_FORMS": len(rows), "workers-INITIAL_FORMS": 0,
        "workers-MIN_NUM_FORMS": 0, "workers-MAX_NUM_FORMS": 1000,
    }  # fmt: skip
    data.update(changes)
    for i, row in enumerate(rows):
        for key, value in row.items():
            data[f"workers-{i}-{key}"] = value
    return data


def row_of(worker: Worker, order: int, **changes) -> dict:
    row = {
        "id": worker.pk, "ORDER": order, "name": worker.name, "model": worker.model,
        "api_base": worker.api_base, "api_key_env": worker.api_key_env,
        "params": json.dumps(worker.params),
        "price_in": worker.price_in, "price_out": worker.price_out,
        "description": worker.description, "enabled": "on",
        "max_tokens": worker.max_tokens or "",
        "max_concurrency": worker.max_concurrency or "",
    }  # fmt: skip
    row.update(changes)
    return {k: v for k, v in row.items() if v is not None}


def test_an_admin_edits_a_pool_and_its_workers_in_one_form(client, project, project_admin):
    pool = make_pool(project=project, workers=2)
    first, second = pool.workers.order_by("position")
    client.force_login(project_admin)
    new = {"ORDER": 1, "name": "Local", "model": "openai/tiny", "api_base": "http://127.0.0.1:9/v1",
           "api_key_env": "LOCAL_KEY", "params": '{"temperature": 0.1}', "price_in": 0,
           "price_out": 0, "description": "A local model.", "enabled": "on"}  # fmt: skip
    rows = [row_of(first, 3, enabled=None), row_of(second, 2), new]
    response = client.post(
        reverse("pool-detail", args=[pool.pk]),
        form_data(pool, rows, max_rounds=4, conductor_prompt_style="compact"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    names = list(pool.workers.order_by("position").values_list("name", "enabled"))
    assert names == [("Local", True), (second.name, True), (first.name, False)]
    saved = Pool.objects.get(pk=pool.pk)
    assert (saved.max_rounds, saved.conductor_prompt_style) == (4, "compact")
    page = client.get(reverse("pool-detail", args=[pool.pk])).content.decode()
    assert '<option value="compact" selected>' in page
    assert "not set on this server: LOCAL_KEY" in page and "Test connection" in page
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"pool.update", "worker.create", "worker.disable", "pool.reorder"} <= actions


def test_an_admin_bounds_calls_on_the_pool_page(client, project, project_admin):
    pool = make_pool(project=project, workers=1)
    worker = pool.workers.get()
    client.force_login(project_admin)
    page = client.get(reverse("pool-detail", args=[pool.pk])).content.decode()
    assert 'name="conductor_max_tokens" value="1024"' in page
    assert 'name="worker_max_tokens" value="1024"' in page
    rows = [row_of(worker, 1, max_tokens=40)]
    response = client.post(
        reverse("pool-detail", args=[pool.pk]),
        form_data(pool, rows, conductor_max_tokens=300, worker_max_tokens=""),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    pool.refresh_from_db()
    worker.refresh_from_db()
    assert (pool.conductor_max_tokens, pool.worker_max_tokens, worker.max_tokens) == (300, None, 40)
    changes = {e.action: e.after for e in AuditEntry.objects.all()}
    assert changes["pool.update"] == {"conductor_max_tokens": 300, "worker_max_tokens": None}
    assert changes["worker.update"] == {"max_tokens": 40}
    chosen = client.post(
        reverse("pool-detail", args=[pool.pk]),
        form_data(
            pool,
            rows,
            conductor_output="json",
            conductor_json_dialect="ollama",
            plan_fallback="single",
            conductor_max_tokens=300,
            worker_max_tokens="",
        ),
    )
    assert chosen.status_code == 302
    pool.refresh_from_db()
    assert (pool.conductor_output, pool.conductor_json_dialect, pool.plan_fallback) == (
        "json",
        "ollama",
        "single",
    )
    bad = client.post(
        reverse("pool-detail", args=[pool.pk]), form_data(pool, rows, conductor_max_tokens=0)
    )
    assert (
        bad.status_code == 400 and 'data-error-for="conductor_max_tokens"' in bad.content.decode()
    )


def test_a_bad_row_is_shown_next_to_its_field_and_nothing_is_saved(client, project, project_admin):
    pool = make_pool(project=project, workers=1)
    client.force_login(project_admin)
    worker = pool.workers.get()
    rows = [row_of(worker, 1, params='{"api_key": "sk-typed-into-the-form"}')]
    response = client.post(
        reverse("pool-detail", args=[pool.pk]), form_data(pool, rows, max_steps=3)
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "a key never goes in the parameters" in page
    assert Pool.objects.get(pk=pool.pk).max_steps == 5 and not AuditEntry.objects.exists()


def test_a_viewer_sees_the_pool_read_only(client, sim_pool, viewer):
    client.force_login(viewer)
    page = client.get(reverse("pool-detail", args=[sim_pool.pk])).content.decode()
    assert 'id="pool-settings"' in page and 'id="usage-table"' in page
    assert "<form" not in page.split("<main", 1)[1] and "Test connection" not in page
    assert client.post(reverse("pool-detail", args=[sim_pool.pk]), {}).status_code == 403


def test_members_are_invited_changed_and_removed_but_not_the_last_admin(
    client, project, project_admin, viewer
):
    make_user(username="newcomer")
    client.force_login(project_admin)
    url = reverse("project-members", args=[project.slug])
    assert client.post(url, {"username": "newcomer", "role": "reviewer"}).status_code == 302
    refused = client.post(url, {"username": "nobody", "role": "viewer"})
    assert refused.status_code == 400 and "No active user" in refused.content.decode()
    membership = Membership.objects.get(user=viewer)
    client.post(
        reverse("project-member-role", args=[project.slug, membership.pk]), {"role": "admin"}
    )
    assert Membership.objects.get(pk=membership.pk).role == "admin"
    own = Membership.objects.get(user=project_admin)
    client.post(reverse("project-member-remove", args=[project.slug, membership.pk]))
    last = client.post(reverse("project-member-remove", args=[project.slug, own.pk]))
    assert last.status_code == 400 and "last admin" in last.content.decode()
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "membership.create", "membership.role", "membership.delete",
    ]  # fmt: skip


def test_the_audit_page_filters_and_exports_readable_changes(client, project, project_admin):
    pool = make_pool(project=project, workers=1)
    client.force_login(project_admin)
    api_changes = {"max_steps": 3}
    from orchestrator.services.pools import pool_update, worker_disable

    pool_update(pool=pool, actor=project_admin, values=api_changes)
    worker_disable(worker=pool.workers.get(), actor=make_member(project=project, role="admin",
                   username="=cmd|calc"))  # fmt: skip
    page = client.get(reverse("audit"), {"action": "pool.update"}).content.decode()
    assert "pool.update" in page and "worker.disable" not in page.split("<tbody>", 1)[1]
    assert "max_steps" in page
    export = client.get(reverse("audit-export"))
    rows = list(csv.reader(io.StringIO(body_of(export).decode())))
    assert rows[0][:3] == ["time", "actor", "action"]
    by_action = {row[2]: row for row in rows[1:]}
    assert by_action["pool.update"][6:] == ["max_steps", "5", "3"]
    # A cell a spreadsheet would run as a formula is quoted.
    assert by_action["worker.disable"][1] == "'=cmd|calc"


def test_the_audit_log_is_for_project_admins(client, project, viewer):
    client.force_login(viewer)
    assert client.get(reverse("audit")).status_code == 403
    assert client.get(reverse("audit-export")).status_code == 403


def test_a_user_of_several_projects_switches_and_lists_follow(client, project, viewer):
    other = make_project(name="Second")
    Membership.objects.create(project=other, user=viewer, role="admin")
    here, there = make_run(pool=make_pool(project=project)), make_run(pool=make_pool(project=other))
    client.force_login(viewer)
    both = client.get(reverse("runs")).content.decode()
    assert f"/runs/{here.pk}/" in both and f"/runs/{there.pk}/" in both
    assert 'id="project-switcher"' in both
    switched = client.post(reverse("project-switch"), {"project": other.slug, "next": "/pools/"})
    assert switched["Location"] == "/pools/"
    runs = client.get(reverse("runs")).content.decode()
    assert f"/runs/{there.pk}/" in runs and f"/runs/{here.pk}/" not in runs
    assert "Second" in client.get(reverse("pools")).content.decode()
    # Being admin of the current project shows its audit log; the other project is a 404.
    assert client.get(reverse("audit")).status_code == 200
    outside = make_project(name="Not yours")
    assert client.post(reverse("project-switch"), {"project": outside.slug}).status_code == 404
    assert (
        client.post(
            reverse("project-switch"), {"project": other.slug, "next": "https://evil.example/"}
        )["Location"]
        == "/"
    )
