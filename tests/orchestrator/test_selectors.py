"""Selectors: project isolation, filters, and a constant number of queries per page."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from orchestrator import selectors, wire
from orchestrator.models import Membership, Run, Step
from tests.factories import make_member, make_plan, make_pool, make_project, make_run, make_step

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_pool(outsider):
    return make_pool(project=outsider.memberships.get().project)


def ids(runs) -> list[int]:
    return [run.pk for run in runs]


def test_users_see_only_their_projects_runs_newest_first(sim_pool, other_pool, viewer, outsider):
    first, second = make_run(pool=sim_pool), make_run(pool=sim_pool)
    elsewhere = make_run(pool=other_pool)

    assert ids(selectors.run_list(user=viewer)) == [second.pk, first.pk]
    assert ids(selectors.run_list(user=outsider)) == [elsewhere.pk]


def test_superusers_see_every_project_and_members_of_two_see_both(
    sim_pool, other_pool, viewer, superuser
):
    mine, theirs = make_run(pool=sim_pool), make_run(pool=other_pool)
    assert ids(selectors.run_list(user=superuser)) == [theirs.pk, mine.pk]

    Membership.objects.create(project=other_pool.project, user=viewer)
    assert ids(selectors.run_list(user=viewer)) == [theirs.pk, mine.pk]
    assert ids(selectors.run_list(user=viewer, project=other_pool.project_id)) == [theirs.pk]


def test_naming_a_project_of_someone_else_shows_nothing(sim_pool, other_pool, viewer):
    make_run(pool=other_pool)
    assert ids(selectors.run_list(user=viewer, project=other_pool.project)) == []


def test_anonymous_users_see_nothing(sim_pool):
    from django.contrib.auth.models import AnonymousUser

    make_run(pool=sim_pool)
    assert ids(selectors.run_list(user=AnonymousUser())) == []
    assert list(selectors.pools_for(user=AnonymousUser())) == []


def test_filters(sim_pool, project, viewer):
    second_pool = make_pool(project=project)
    failed = make_run(pool=sim_pool, status=Run.Status.FAILED, input="Count the primes", score=0.0)
    graded = make_run(
        pool=second_pool, strategy="moa", status=Run.Status.SUCCEEDED, answer="Paris", score=1.0
    )
    make_step(run=graded, worker_name="Sage (simulated)")
    make_step(run=failed, worker_name="Swift (simulated)")
    old = make_run(pool=sim_pool, strategy="single", score=0.5)
    Run.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=30))
    week_ago = timezone.now() - dt.timedelta(days=7)

    def listed(**filters) -> list[int]:
        return ids(selectors.run_list(user=viewer, **filters))

    assert listed(status="failed") == [failed.pk]
    assert listed(pool=second_pool) == listed(pool=second_pool.pk) == [graded.pk]
    assert listed(strategy="single") == [old.pk]
    assert listed(worker="Sage (simulated)") == [graded.pk]
    assert listed(worker="Nobody") == []
    assert listed(created_after=week_ago) == [graded.pk, failed.pk]
    assert listed(created_before=week_ago) == [old.pk]
    assert listed(score_min=0.5) == [graded.pk, old.pk]
    assert listed(score_max=0.5) == [failed.pk, old.pk]
    assert listed(score_min=0.4, score_max=0.6) == [old.pk]
    assert listed(q="PRIMES") == [failed.pk]
    assert listed(q="paris") == [graded.pk]
    assert listed(status="succeeded", strategy="moa", q="Paris") == [graded.pk]


def test_a_run_used_by_a_worker_in_two_steps_is_listed_once(sim_pool, viewer):
    run = make_run(pool=sim_pool)
    make_step(run=run, index=0, worker_name="Forge (simulated)")
    make_step(run=run, index=1, worker_name="Forge (simulated)")
    assert ids(selectors.run_list(user=viewer, worker="Forge (simulated)")) == [run.pk]


@pytest.mark.parametrize("count", [3, 30])
def test_a_page_costs_the_same_queries_however_many_runs(
    sim_pool, viewer, django_assert_num_queries, count
):
    for _ in range(count):
        make_run(pool=sim_pool, created_by=viewer)

    with django_assert_num_queries(2):  # the user's projects, then the page with pool and creator
        page = list(selectors.run_list(user=viewer)[:50])
        shown = [(run.pool.name, run.created_by.username, run.input) for run in page]
    assert len(shown) == count


def test_run_get_and_detail_respect_projects(sim_pool, viewer, outsider, django_assert_num_queries):
    run = make_run(pool=sim_pool)
    make_plan(run=run)
    make_step(run=run, index=0)
    make_step(run=run, index=1)

    assert selectors.run_get(user=viewer, run_id=run.pk) == run
    assert selectors.run_get(user=outsider, run_id=run.pk) is None
    assert selectors.run_detail(user=outsider, run_id=run.pk) is None
    with django_assert_num_queries(4):  # projects, run, plans, steps
        detail = selectors.run_detail(user=viewer, run_id=run.pk)
        assert [s.index for s in detail.steps.all()] == [0, 1] and len(detail.plans.all()) == 1


def test_step_get_respects_projects(sim_pool, viewer, outsider):
    step = make_step(run=make_run(pool=sim_pool))
    assert selectors.step_get(user=viewer, step_id=step.pk) == step
    assert selectors.step_get(user=outsider, step_id=step.pk) is None


def test_pools_for_and_runnable_pools(sim_pool, project, viewer, reviewer, outsider):
    sim_pool.workers.filter(position=0).update(enabled=False)

    pools = list(selectors.pools_for(user=viewer))
    assert pools == [sim_pool]
    assert len(pools[0].enabled_workers) == sim_pool.workers.count() - 1
    assert list(selectors.pools_runnable_by(user=viewer)) == []
    assert list(selectors.pools_runnable_by(user=reviewer)) == [sim_pool]
    assert list(selectors.pools_for(user=outsider)) == []


def test_roles(project, viewer, reviewer, project_admin, outsider, superuser, sim_pool):
    run = make_run(pool=sim_pool)
    assert selectors.user_role(user=viewer, project=project) == "viewer"
    assert selectors.user_role(user=outsider, project=project) is None
    assert selectors.user_role(user=superuser, project=project.pk) == "admin"
    assert [
        selectors.user_can_run(user=u, project=project) for u in (viewer, reviewer, project_admin)
    ] == [
        False,
        True,
        True,
    ]
    assert selectors.user_can_view(user=viewer, run=run)
    assert not selectors.user_can_view(user=outsider, run=run)
    assert selectors.user_roles(user=viewer) == {project.pk: "viewer"}
    other = make_project()
    roles = selectors.user_roles(user=superuser)
    assert roles[other.pk] == roles[project.pk] == "admin"


def test_run_graph_has_a_node_per_step_and_an_edge_per_read(sim_pool):
    run = make_run(pool=sim_pool)
    make_plan(run=run, workflow=[{"worker": 0, "instruction": "a", "access": []}] * 3)
    first = make_step(run=run, index=0)
    second = make_step(run=run, index=1)
    third = make_step(run=run, index=2, access="all", reads=[first.pk, second.pk])

    graph = selectors.run_graph(run=run)

    step_nodes = {node["id"] for node in graph["nodes"] if node["id"].startswith("s")}
    assert step_nodes == {f"s{first.pk}", f"s{second.pk}", f"s{third.pk}"}
    edges = {(edge["source"], edge["target"]) for edge in graph["edges"]}
    assert {(f"s{first.pk}", f"s{third.pk}"), (f"s{second.pk}", f"s{third.pk}")} <= edges
    assert graph["step_count"] == 3


def test_a_member_of_a_new_project_sees_its_runs(sim_pool, project):
    newcomer = make_member(project=project)
    run = make_run(pool=sim_pool)
    assert ids(selectors.run_list(user=newcomer)) == [run.pk]


def test_viewable_pairs_keeps_members_and_superusers_of_existing_runs(
    sim_pool, viewer, outsider, superuser
):
    from orchestrator.selectors import viewable_pairs
    from tests.factories import make_run

    run = make_run(pool=sim_pool)
    pairs = {(viewer.pk, run.pk), (outsider.pk, run.pk), (superuser.pk, run.pk), (viewer.pk, 0)}
    assert viewable_pairs(pairs) == {(viewer.pk, run.pk), (superuser.pk, run.pk)}
    type(viewer).objects.filter(pk=viewer.pk).update(is_active=False)
    assert viewable_pairs(pairs) == {(superuser.pk, run.pk)}


def embedded_steps(state: wire.PageState) -> list[dict]:
    """The steps of a page state, as objects (the page embeds them as a table)."""
    table = state["state"]["steps"]
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


def test_run_page_state_is_one_snapshot_with_its_seq_and_the_same_graph(sim_pool):
    run = make_run(pool=sim_pool)
    make_plan(run=run, workflow=[{"worker": 0, "instruction": "a", "access": []}] * 2)
    first = make_step(run=run, index=0)
    second = make_step(run=run, index=1, access="all", reads=[first.pk])
    Run.objects.filter(pk=run.pk).update(last_seq=7)
    run.refresh_from_db()

    state = selectors.run_page_state(run=run)

    # The socket resumes after this seq, so it is the run's seq at the moment of the read.
    assert state["seq"] == 7
    assert [step["id"] for step in embedded_steps(state)] == [first.pk, second.pk]
    # The graph is the one the API serves for the same run: one layout, not a second kind.
    assert state["graph"] == wire.page_graph(selectors.run_graph(run=run))
    assert state["geometry"]["column_width"] > 0


def test_the_page_state_holds_each_step_once_with_its_access_and_the_graphs_positions(sim_pool):
    run = make_run(pool=sim_pool, strategy="conductor")
    make_plan(run=run, strategy="conductor", workflow=[{"worker": 0, "instruction": "a"}] * 3)
    first = make_step(run=run, index=0)
    second = make_step(run=run, index=1, access=[0], reads=[first.pk])
    third = make_step(run=run, index=2, access="all", reads=[first.pk, second.pk])

    state = selectors.run_page_state(run=run)
    graph = selectors.run_graph(run=run)

    steps = embedded_steps(state)
    assert [(s["access"], s["reads"]) for s in steps] == [
        ([], []),
        ([0], [first.pk]),
        ("all", [first.pk, second.pk]),
    ]
    # The graph names each step by id at the position the API's graph gives it, and no more.
    flat = state["graph"]["steps"]
    embedded = {flat[i]: (flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)}
    assert embedded == {
        node["step"]: (node["x"], node["y"]) for node in graph["nodes"] if node["kind"] == "step"
    }
    assert set(embedded) == {first.pk, second.pk, third.pk}
    assert [node["kind"] for node in state["graph"]["nodes"]] == ["plan"]
    edges = [[edge["source"], edge["target"], edge["kind"]] for edge in graph["edges"]]
    assert state["graph"]["edges"] == edges
    assert [f"s{first.pk}", f"s{third.pk}", "reads_all"] in edges


def folded_run(sim_pool, *, status: str, last_round_status: str = "succeeded") -> Run:
    """A run of three rounds of three steps; one step of round 0 failed."""
    run = make_run(pool=sim_pool, status=status, step_count=9)
    for number in range(3):
        make_plan(run=run, round=number, workflow=[{"worker": 0, "instruction": "a"}] * 3)
        for index in range(3):
            step_status = "failed" if (number, index) == (0, 1) else "succeeded"
            if number == 2:
                step_status = last_round_status
            make_step(run=run, round=number, index=index, status=step_status)
    return run


def test_a_folded_page_embeds_the_steps_of_its_open_rounds_only(sim_pool, monkeypatch):
    monkeypatch.setattr("orchestrator.graph.COLLAPSE_ABOVE", 4)
    run = folded_run(sim_pool, status="running", last_round_status="running")

    state = selectors.run_page_state(run=run)

    assert state["graph"]["collapsed"]
    # Rounds 0 and 1 have ended: their boxes and counts are in the graph, their steps are not
    # in the page; round 2 still runs and can grow, so its steps are.
    assert [entry["round"] for entry in state["folded"]] == [0, 1]
    failed = Step.objects.get(run=run, round=0, index=1)
    assert state["folded"][0]["not_succeeded"] == {"failed": [failed.pk]}
    assert state["folded"][1]["not_succeeded"] == {}
    assert {step["round"] for step in embedded_steps(state)} == {2}
    assert [group["statuses"] for group in state["graph"]["groups"]][:2] == [
        {"succeeded": 2, "failed": 1},
        {"succeeded": 3},
    ]
    # Opening a folded round fetches its steps, as the snapshot would have had them.
    opened = selectors.run_round_steps(run=run, round=0)
    assert opened["seq"] == run.last_seq
    assert opened["steps"] == wire.step_table(
        step for step in selectors.run_snapshot(run=run)["steps"] if step["round"] == 0
    )
    assert len(selectors.run_round_steps(run=run)["steps"]["rows"]) == 9


def test_a_finished_folded_run_embeds_no_step(sim_pool, monkeypatch):
    monkeypatch.setattr("orchestrator.graph.COLLAPSE_ABOVE", 4)
    run = folded_run(sim_pool, status="succeeded")

    state = selectors.run_page_state(run=run)

    assert [entry["round"] for entry in state["folded"]] == [0, 1, 2]
    assert state["state"]["steps"]["rows"] == []
    assert len(state["state"]["plans"]) == 3
