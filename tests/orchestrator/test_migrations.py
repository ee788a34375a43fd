"""Migrations that change stored data do what they say to rows that existed before them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE_BUDGETS = [("orchestrator", "0003_step_cancelled_and_skipped")]
WITH_BUDGETS = [("orchestrator", "0004_pool_budgets_and_bounds")]


@pytest.mark.django_db(transaction=True)
def test_pools_made_before_budgets_get_the_default_budgets():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_BUDGETS)
    old_apps = executor.loader.project_state(BEFORE_BUDGETS).apps
    project = old_apps.get_model("orchestrator", "Project").objects.create(name="Old", slug="old")
    pools = old_apps.get_model("orchestrator", "Pool").objects
    unbounded = pools.create(project=project, name="Unbounded")
    chosen = pools.create(project=project, name="Chosen", token_budget=5000, cost_budget=0.5)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(WITH_BUDGETS)
    new_pools = (
        executor.loader.project_state(WITH_BUDGETS).apps.get_model("orchestrator", "Pool").objects
    )
    assert new_pools.values_list("token_budget", "cost_budget").get(pk=unbounded.pk) == (
        200_000,
        2.0,
    )
    assert new_pools.values_list("token_budget", "cost_budget").get(pk=chosen.pk) == (5000, 0.5)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
