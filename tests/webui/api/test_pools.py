"""The pools API: pools of the user's projects, enabled workers, key variable names for admins."""

from __future__ import annotations

from django.urls import reverse

from orchestrator.models import Worker

POOLS_URL = reverse("api-pool-list")


def test_lists_enabled_workers_in_order(api_as, sim_pool, viewer):
    Worker.objects.filter(pool=sim_pool, position=1).update(enabled=False)
    body = api_as(viewer).get(POOLS_URL).json()

    assert [pool["id"] for pool in body] == [sim_pool.pk]
    workers = body[0]["workers"]
    expected = list(
        Worker.objects.filter(pool=sim_pool, enabled=True)
        .order_by("position")
        .values_list("name", flat=True)
    )
    assert [worker["name"] for worker in workers] == expected and len(expected) == 4
    assert body[0]["is_simulated"] is True
    assert body[0]["can_run"] is False


def test_only_admins_see_key_variable_names_and_never_a_key(
    api_as, sim_pool, viewer, project_admin, monkeypatch
):
    monkeypatch.setenv("SECRET_FOR_TEST", "sk-do-not-leak")
    Worker.objects.filter(pool=sim_pool).update(api_key_env="SECRET_FOR_TEST")

    as_viewer = api_as(viewer).get(POOLS_URL)
    as_admin = api_as(project_admin).get(POOLS_URL)

    assert {w["api_key_env"] for w in as_viewer.json()[0]["workers"]} == {None}
    assert {w["api_key_env"] for w in as_admin.json()[0]["workers"]} == {"SECRET_FOR_TEST"}
    assert as_admin.json()[0]["can_run"] is True
    for response in (as_viewer, as_admin):
        assert b"sk-do-not-leak" not in response.content


def test_pools_of_other_projects_are_not_listed(api_as, sim_pool, outsider):
    assert api_as(outsider).get(POOLS_URL).json() == []


def test_a_pools_limits_are_shown(api_as, sim_pool, viewer):
    sim_pool.cost_budget = None
    sim_pool.save(update_fields=["cost_budget"])
    pool = api_as(viewer).get(POOLS_URL).json()[0]
    assert (pool["max_steps"], pool["max_rounds"]) == (5, 2)
    assert (pool["token_budget"], pool["cost_budget"]) == (200_000, None)


def test_a_worker_whose_key_variable_is_unset_is_flagged_before_any_run(
    api_as, sim_pool, project_admin, monkeypatch
):
    monkeypatch.delenv("KEY_NOBODY_SET", raising=False)
    monkeypatch.setenv("KEY_THAT_IS_SET", "sk-set-and-never-shown")
    Worker.objects.create(
        pool=sim_pool, position=10, name="Unset", model="openai/gpt-x",
        api_key_env="KEY_NOBODY_SET", description="d",
    )  # fmt: skip
    Worker.objects.create(
        pool=sim_pool, position=11, name="Set", model="openai/gpt-x",
        api_key_env="KEY_THAT_IS_SET", description="d",
    )  # fmt: skip

    response = api_as(project_admin).get(POOLS_URL)
    flags = {w["name"]: w["key_missing"] for w in response.json()[0]["workers"]}

    assert flags["Unset"] is True and flags["Set"] is False
    assert not any(flag for name, flag in flags.items() if name not in ("Unset", "Set"))
    assert response.json()[0]["conductor_key_missing"] is False  # the simulated conductor
    assert b"sk-set-and-never-shown" not in response.content


def test_the_pool_admin_page_warns_of_an_unset_key(client, sim_pool, superuser, monkeypatch):
    monkeypatch.delenv("KEY_NOBODY_SET", raising=False)
    Worker.objects.create(
        pool=sim_pool, position=10, name="Unset", model="openai/gpt-x",
        api_key_env="KEY_NOBODY_SET", description="d",
    )  # fmt: skip
    client.force_login(superuser)
    page = client.get(reverse("admin:orchestrator_pool_change", args=[sim_pool.pk]))
    assert page.status_code == 200
    assert "NOT SET on this server: KEY_NOBODY_SET" in page.content.decode()
