"""The datasets and experiments API: upload (multipart and JSON), per-line errors, export, the
bundled suite, an item from a run; start an experiment, follow its progress, read its
scoreboard, a cell's runs and a head to head; who may do what."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from orchestrator.models import Dataset, Experiment, Run
from orchestrator.services import execution
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.experiments import experiment_execute
from orchestrator.services.runs import run_create, run_execute

DATASETS = reverse("api-dataset-list")
EXPERIMENTS = reverse("api-experiment-list")
GOOD = b'{"input": "What is 6 * 7?", "reference": "42", "tags": ["math"]}\n{"input": "Capital of Peru?", "reference": "Lima"}\n'


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(
        execution, "experiment_enqueue", lambda *, experiment_id: calls.append(experiment_id)
    )
    return calls


def test_upload_a_file_then_export_it(api_as, project, reviewer):
    upload = SimpleUploadedFile("questions.jsonl", GOOD, content_type="application/octet-stream")
    response = api_as(reviewer).post(
        DATASETS, {"project": project.pk, "name": "Mine", "file": upload}, format="multipart"
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["item_count"], body["project"]) == ("Mine", 2, project.pk)
    exported = api_as(reviewer).get(
        reverse("api-dataset-export", args=[body["id"]]) + "?kind=jsonl"
    )
    lines = [
        json.loads(line) for line in b"".join(exported.streaming_content).decode().splitlines()
    ]
    assert lines[0] == {
        "input": "What is 6 * 7?",
        "reference": "42",
        "grader": "numeric",
        "tags": ["math"],
    }
    detail = api_as(reviewer).get(reverse("api-dataset-detail", args=[body["id"]])).json()
    assert [item["input"] for item in detail["items"]] == ["What is 6 * 7?", "Capital of Peru?"]


def test_a_csv_export_opens_safely_in_a_spreadsheet_and_imports_as_it_was(
    api_as, project, reviewer
):
    items = [
        {"input": '=HYPERLINK("http://x.invalid","click")', "reference": "-3", "tags": ["f"]},
        {"input": "+1 and @SUM(A1)?", "reference": "'quoted'", "tags": []},
    ]
    client = api_as(reviewer)
    first = client.post(
        DATASETS,
        {
            "project": project.pk,
            "name": "Formulas",
            "format": "jsonl",
            "content": "\n".join(json.dumps(item) for item in items),
        },
        format="json",
    )
    assert first.status_code == 201, first.json()
    exported = client.get(reverse("api-dataset-export", args=[first.json()["id"]]) + "?kind=csv")
    text = b"".join(exported.streaming_content).decode()
    cells = [line.split(",")[0] for line in text.splitlines()[1:]]
    assert cells[0].startswith("\"'=HYPERLINK") and cells[1] == "'+1 and @SUM(A1)?"
    upload = SimpleUploadedFile("back.csv", text.encode(), content_type="text/csv")
    again = client.post(
        DATASETS, {"project": project.pk, "name": "Again", "file": upload}, format="multipart"
    )
    assert again.status_code == 201, again.json()
    detail = client.get(reverse("api-dataset-detail", args=[again.json()["id"]])).json()
    assert [(i["input"], i["reference"]) for i in detail["items"]] == [
        (item["input"], item["reference"]) for item in items
    ]


def test_bad_lines_are_listed_and_nothing_is_stored(api_as, project, reviewer):
    content = "input,reference\nfine?,yes\n,no question\nok?,a,b\n"
    response = api_as(reviewer).post(
        DATASETS,
        {"project": project.pk, "name": "Bad", "format": "csv", "content": content},
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {
        "file": ["line 3: input: give a question", "line 4: 3 cells, but the header has 2"]
    }
    assert not Dataset.objects.exists()


def test_a_file_too_large_is_refused_before_it_is_read(api_as, project, reviewer, settings):
    settings.CONDUCTOR_DATASET_MAX_BYTES = 50
    upload = SimpleUploadedFile("big.csv", b"input\n" + b"x" * 100)
    response = api_as(reviewer).post(
        DATASETS, {"project": project.pk, "name": "Big", "file": upload}, format="multipart"
    )
    assert response.status_code == 400
    assert "Too large: 106 bytes; the limit is 50 bytes" in response.json()["file"][0]


def test_viewers_and_outsiders_may_not_import(api_as, project, viewer, outsider):
    payload = {"project": project.pk, "name": "V", "format": "jsonl", "content": GOOD.decode()}
    assert api_as(viewer).post(DATASETS, payload, format="json").status_code == 403
    response = api_as(outsider).post(DATASETS, payload, format="json")
    assert response.status_code == 400 and "project" in response.json()
    assert not Dataset.objects.exists()


def test_add_a_run_to_a_dataset_with_its_answer_marked_right(
    api_as, project, sim_pool, reviewer, viewer
):
    dataset = dataset_ensure_suite(project=project)
    run = run_create(pool=sim_pool, input="What is 17 * 23?", strategy="single", enqueue=False)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    url = reverse("api-dataset-add-item", args=[dataset.pk])

    assert api_as(viewer).post(url, {"run": run.pk}, format="json").status_code == 403
    response = api_as(reviewer).post(
        url, {"run": run.pk, "answer_as_reference": True, "tags": ["from-runs"]}, format="json"
    )

    assert response.status_code == 201, response.json()
    item = response.json()
    assert (item["input"], item["reference"], item["source_run"]) == (run.input, run.answer, run.pk)
    assert item["tags"] == ["from-runs"]
    dataset.refresh_from_db()
    assert dataset.item_count == item["position"] + 1
    # Without a reference and not marked right, the item has no reference.
    plain = api_as(reviewer).post(url, {"run": run.pk}, format="json").json()
    assert (plain["reference"], plain["grader"]) == ("", "")


def test_start_an_experiment_follow_it_and_read_its_scoreboard(
    api_as, project, sim_pool, reviewer, outsider, enqueued, django_capture_on_commit_callbacks
):
    dataset = dataset_ensure_suite(project=project)
    payload = {
        "dataset": dataset.pk,
        "arms": [
            {"strategy": "single", "pool": sim_pool.pk, "options": {"worker": 0}},
            {"strategy": "moa", "pool": sim_pool.pk, "options": {}, "label": "mixture"},
        ],
        "sample": 5,
        "seed": 1,
        "tags": ["lookup", "arithmetic"],
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(reviewer).post(EXPERIMENTS, payload, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["status"], body["progress"]) == ("queued", {"done": 0, "total": 10})
    assert [arm["label"] for arm in body["arms"]] == ["single:0", "mixture"]
    assert enqueued == [body["id"]]
    experiment = Experiment.objects.get(pk=body["id"])

    with django_capture_on_commit_callbacks(execute=True):
        experiment_execute(experiment_id=experiment.pk)

    progress = api_as(reviewer).get(reverse("api-experiment-progress", args=[experiment.pk])).json()
    assert progress == {
        "id": experiment.pk,
        "status": "finished",
        "done": 10,
        "total": 10,
        "error": "",
    }
    detail = api_as(reviewer).get(reverse("api-experiment-detail", args=[experiment.pk])).json()
    rows = detail["scoreboard"]["arms"]
    assert [row["runs"] for row in rows] == [5, 5]
    arm = rows[0]["arm"]
    runs = (
        api_as(reviewer)
        .get(reverse("api-experiment-runs", args=[experiment.pk]) + f"?arm={arm}&tag=lookup")
        .json()
    )
    tagged = [
        run.pk
        for run in Run.objects.filter(trial__arm_id=arm).select_related("trial__item")
        if "lookup" in run.trial.item.tags
    ]
    assert tagged and {run["id"] for run in runs["results"]} == set(tagged)
    assert len(runs["results"]) == rows[0]["tags"]["lookup"]["runs"]
    h2h = (
        api_as(reviewer)
        .get(
            reverse("api-experiment-head-to-head", args=[experiment.pk])
            + f"?a={arm}&b={rows[1]['arm']}"
        )
        .json()
    )
    assert sum(h2h["counts"].values()) == 5
    bad = api_as(reviewer).get(
        reverse("api-experiment-head-to-head", args=[experiment.pk]) + f"?a={arm}&b=999999"
    )
    assert bad.status_code == 400 and "b" in bad.json()

    # Someone of another project sees nothing of it.
    assert (
        api_as(outsider).get(reverse("api-experiment-detail", args=[experiment.pk])).status_code
        == 404
    )
    assert api_as(outsider).get(EXPERIMENTS).json() == []


def test_experiment_input_errors_name_their_field(
    api_as, project, sim_pool, reviewer, viewer, enqueued
):
    dataset = dataset_ensure_suite(project=project)
    arm = {"strategy": "single", "pool": sim_pool.pk}
    cases = [
        ({"dataset": 999999, "arms": [arm]}, "dataset"),
        ({"dataset": dataset.pk, "arms": []}, "arms"),
        ({"dataset": dataset.pk, "arms": [{**arm, "pool": 999999}]}, "arms[0].pool"),
        ({"dataset": dataset.pk, "arms": [{**arm, "options": {"worker": 50}}]}, "arms"),
        ({"dataset": dataset.pk, "arms": [arm, {**arm, "strategy": "nope"}]}, "arms[1].strategy"),
        ({"dataset": dataset.pk, "arms": [{**arm, "option": {"worker": 1}}]}, "arms[0].option"),
        ({"dataset": dataset.pk, "arms": [arm], "sample": 0}, "sample"),
    ]
    for payload, field in cases:
        response = api_as(reviewer).post(EXPERIMENTS, payload, format="json")
        assert response.status_code == 400 and field in response.json(), (payload, response.json())
    response = api_as(viewer).post(
        EXPERIMENTS,
        {"dataset": dataset.pk, "arms": [arm], "sample": 2, "tags": ["lookup"]},
        format="json",
    )
    assert response.status_code == 403
    assert not Experiment.objects.exists() and enqueued == []


def test_cancel_and_resume_through_the_api(
    api_as, project, sim_pool, reviewer, viewer, enqueued, django_capture_on_commit_callbacks
):
    dataset = dataset_ensure_suite(project=project)
    payload = {
        "dataset": dataset.pk,
        "arms": [{"strategy": "single", "pool": sim_pool.pk}],
        "sample": 3,
        "tags": ["lookup"],
    }
    with django_capture_on_commit_callbacks(execute=True):
        experiment_id = api_as(reviewer).post(EXPERIMENTS, payload, format="json").json()["id"]
    cancel = reverse("api-experiment-cancel", args=[experiment_id])
    resume = reverse("api-experiment-resume", args=[experiment_id])

    assert api_as(viewer).post(cancel).status_code == 403
    assert api_as(reviewer).post(cancel).json()["status"] == "cancelled"
    with django_capture_on_commit_callbacks(execute=True):
        assert api_as(reviewer).post(resume).json()["status"] == "queued"
    assert enqueued == [experiment_id, experiment_id]
