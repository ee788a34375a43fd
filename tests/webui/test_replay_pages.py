"""The replay parts of the pages: the run page's replay data block (admins only get the workers)
and the lineage, and the family page with each member's edits, status and totals."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from orchestrator.models import Membership, Step
from orchestrator.services.replay import replay_create
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_member, make_project

pytestmark = pytest.mark.django_db


@pytest.fixture
def family(sim_pool, project_admin):
    source = run_create(
        pool=sim_pool,
        input="What is 17 * 23?",
        strategy="reflection",
        strategy_options={"rounds": 2},
        enqueue=False,
    )
    run_execute(run_id=source.pk)
    source.refresh_from_db()
    last = Step.objects.filter(run=source).order_by("index").last()
    replay = replay_create(
        source=source,
        actor=project_admin,
        enqueue=False,
        edits=[{"step": last.pk, "instruction": "Check <b>it</b> twice."}],
    )
    run_execute(run_id=replay.pk)
    return source, replay


def data_block(html: str, name: str):
    match = re.search(rf'<script id="{name}" type="application/json">(.*?)</script>', html, re.S)
    assert match, name
    return json.loads(match.group(1))


def test_run_page_gives_admins_the_pool_workers_and_the_family(client, family, project_admin):
    source, replay = family
    client.force_login(project_admin)

    html = client.get(reverse("run-detail", args=[source.pk])).content.decode()

    context = data_block(html, "replay-context")
    assert context["can_replay"] is True
    assert [w["name"] for w in context["workers"]] == list(
        source.pool.workers.filter(enabled=True)
        .order_by("position", "id")
        .values_list("name", flat=True)
    )
    assert [r["id"] for r in context["family"]["runs"]] == [source.pk, replay.pk]
    assert 'id="run-lineage"' in html and 'id="replay-csrf"' in html


def test_reviewers_see_the_lineage_but_no_replay_controls(client, family, project):
    source, replay = family
    client.force_login(make_member(project=project, role=Membership.Role.REVIEWER))

    html = client.get(reverse("run-detail", args=[replay.pk])).content.decode()

    context = data_block(html, "replay-context")
    assert context["can_replay"] is False and context["workers"] == []
    assert 'id="replay-csrf"' not in html
    assert "reused from the source run" in html  # the legend of a replay's graph


def test_family_page_lists_members_with_edits_status_and_totals(client, family, project):
    source, replay = family
    client.force_login(make_member(project=project, role=Membership.Role.VIEWER))

    response = client.get(reverse("run-family", args=[replay.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    rows = re.findall(r'<tr data-run-id="(\d+)"', html)
    assert rows == [str(source.pk), str(replay.pk)]
    assert "Check &lt;b&gt;it&lt;/b&gt; twice." in html  # the edit, as text
    assert f"/compare/?runs={source.pk},{replay.pk}" in html
    replay.refresh_from_db()
    assert replay.model_calls == 1


def test_family_page_of_a_run_one_cannot_see_is_a_404(client, family):
    source, _ = family
    client.force_login(make_member(project=make_project(), role=Membership.Role.ADMIN))

    assert client.get(reverse("run-family", args=[source.pk])).status_code == 404
