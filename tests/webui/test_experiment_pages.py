"""The datasets and experiment pages through Django's test client: import with per-line errors,
the bundled suite, starting an experiment from a form, the scoreboard page, add to dataset."""

from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from orchestrator.models import Dataset, Experiment
from orchestrator.services import execution
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.runs import run_create


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_import_shows_every_bad_line_and_stores_nothing(project, reviewer):
    upload = SimpleUploadedFile("bad.jsonl", b'{"input": "ok?"}\n{"input": ""}\n[1]\n')
    response = logged_in(reviewer).post(
        reverse("datasets"), {"project": project.pk, "name": "Bad", "file": upload}
    )

    assert response.status_code == 400
    text = response.content.decode()
    assert "line 2: input: give a question" in text
    assert "line 3: give a JSON object, not list" in text
    assert not Dataset.objects.exists()


def test_import_a_good_file_opens_the_dataset(project, reviewer):
    upload = SimpleUploadedFile("good.csv", b"input,reference,tags\nWhat is 2+2?,4,math\n")
    response = logged_in(reviewer).post(
        reverse("datasets"), {"project": project.pk, "name": "Good", "file": upload}
    )
    dataset = Dataset.objects.get(name="Good")
    assert response.status_code == 302 and response.url == f"/datasets/{dataset.pk}/"
    page = logged_in(reviewer).get(response.url).content.decode()
    assert "What is 2+2?" in page and "?kind=csv" in page


def test_add_the_suite_and_start_an_experiment_from_its_page(
    project, reviewer, sim_pool, monkeypatch, django_capture_on_commit_callbacks
):
    started: list[int] = []
    monkeypatch.setattr(
        execution, "experiment_enqueue", lambda *, experiment_id: started.append(experiment_id)
    )
    client = logged_in(reviewer)
    response = client.post(reverse("dataset-suite"), {"project": project.pk})
    dataset = Dataset.objects.get(builtin="suite")
    assert response.url == f"/datasets/{dataset.pk}/"

    bad = client.post(response.url, {"pool": sim_pool.pk, "arms": "single:0,telepathy", "seed": 0})
    assert bad.status_code == 400 and "Unknown strategy" in bad.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/datasets/{dataset.pk}/",
            {"pool": sim_pool.pk, "arms": "single:0,moa", "sample": 4, "seed": 2},
        )
    experiment = Experiment.objects.get()
    assert response.url == f"/experiments/{experiment.pk}/"
    assert (experiment.total, started) == (8, [experiment.pk])

    page = client.get(response.url).content.decode()
    assert 'id="experiment-progress"' in page and 'max="8"' in page
    assert "vendor/chart.umd.js" in page and "js/experiment.js" in page
    constants = page.split('id="experiment-constants" type="application/json">')[1].split("<")[0]
    assert json.loads(constants)["unfinished"] == ["queued", "running"]


def test_viewers_see_no_experiment_form_and_no_add_to_dataset(project, viewer, sim_pool):
    dataset = dataset_ensure_suite(project=project)
    page = logged_in(viewer).get(f"/datasets/{dataset.pk}/").content.decode()
    assert 'id="experiment-form"' not in page
    run = run_create(pool=sim_pool, input="What is 1 + 1?", enqueue=False)
    assert 'id="add-to-dataset"' not in logged_in(viewer).get(f"/runs/{run.pk}/").content.decode()


def test_reviewers_get_add_to_dataset_on_the_run_page(project, reviewer, sim_pool, outsider):
    run = run_create(pool=sim_pool, input="What is 1 + 1?", enqueue=False)
    page = logged_in(reviewer).get(f"/runs/{run.pk}/").content.decode()
    assert 'id="add-to-dataset"' in page and f'data-run-id="{run.pk}"' in page
    dataset = dataset_ensure_suite(project=project)
    assert logged_in(outsider).get(f"/datasets/{dataset.pk}/").status_code == 404
