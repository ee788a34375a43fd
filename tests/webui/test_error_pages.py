"""Error pages a person reads: a 404 names what is missing and says why it may be, a 403 says who
may and what the viewer's role is, both in the site's layout (its navigation); the experiments
index is in the navigation."""

from __future__ import annotations

from django.test import Client

from orchestrator.models import Experiment
from orchestrator.services.datasets import dataset_ensure_suite
from tests.factories import make_run


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def in_layout(page: str) -> bool:
    return 'class="site-nav"' in page and "Conductor Studio</a>" in page


def test_compare_with_a_run_that_is_not_there_names_it(viewer, sim_pool):
    run = make_run(pool=sim_pool)
    response = logged_in(viewer).get(f"/compare/?runs={run.pk},99999")

    assert response.status_code == 404
    page = response.content.decode()
    assert in_layout(page)
    assert "No run 99999 in your projects." in page
    assert f"run {run.pk}" not in page.split('id="error-what"')[1].split("</p>")[0]
    assert "does not exist, or it belongs to a project you are not a member of" in page


def test_a_run_page_of_another_project_names_the_run_not_its_existence(outsider, sim_pool):
    run = make_run(pool=sim_pool)
    response = logged_in(outsider).get(f"/runs/{run.pk}/")

    assert response.status_code == 404
    page = response.content.decode()
    assert in_layout(page) and f"No run {run.pk} in your projects." in page


def test_a_viewer_is_told_who_may_open_the_audit_log_and_their_own_role(viewer, project):
    response = logged_in(viewer).get("/audit/")

    assert response.status_code == 403
    page = response.content.decode()
    assert in_layout(page)
    assert "Only the project&#x27;s admins read its audit log." in page
    assert f"You are a <strong>viewer</strong> in the project “{project.name}”" in page
    assert f'href="/projects/{project.slug}/members/"' in page


def test_a_viewer_is_told_who_may_add_pools(viewer):
    response = logged_in(viewer).get("/pools/new/")

    assert response.status_code == 403
    page = response.content.decode()
    assert in_layout(page) and "Only a project&#x27;s admins may add pools." in page
    assert "<strong>viewer</strong>" in page


def test_the_experiments_index_lists_the_projects_experiments_and_is_in_the_navigation(
    project, viewer, reviewer, outsider, sim_pool
):
    dataset = dataset_ensure_suite(project=project, created_by=reviewer)
    experiment = Experiment.objects.create(project=project, dataset=dataset, name="Arms", total=8)

    client = logged_in(viewer)
    runs_page = client.get("/").content.decode()
    assert '<a href="/experiments/">Experiments</a>' in runs_page
    page = client.get("/experiments/").content.decode()
    assert 'href="/experiments/" aria-current="page">Experiments</a>' in page
    row = page.split(f'data-experiment-id="{experiment.pk}"')[1].split("</tr>")[0]
    assert f'href="/experiments/{experiment.pk}/"' in row and dataset.name in row
    assert "0 / 8" in row

    other = logged_in(outsider).get("/experiments/").content.decode()
    assert f'data-experiment-id="{experiment.pk}"' not in other and "No experiment yet." in other
