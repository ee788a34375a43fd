"""The run page's timeline: a retried step drawn attempt by attempt, each failed attempt with its
error and the wait before the next one, as the step's panel lists them."""

from __future__ import annotations

import json

import pytest

from harness.server import LiveServer, wait_for_js
from tests.browser.pages import axe_violations

pytestmark = pytest.mark.browser

# Two failed calls, then one that succeeded: as the recorder stores a step retried with backoff
# (the second error is model text, shown as text).
ATTEMPT_LOG = [
    {"attempt": 1, "offset": 0.0, "seconds": 1.0, "error": "provider said 429", "backoff": 2.0},
    {
        "attempt": 2,
        "offset": 3.0,
        "seconds": 1.5,
        "error": "provider said 503: <b>overloaded</b>",
        "backoff": 4.0,
    },
    {"attempt": 3, "offset": 8.5, "seconds": 1.5, "error": "", "backoff": 0.0},
]


def store_retried_run(server: LiveServer) -> tuple[int, int]:
    """A finished run whose first step succeeded at its third attempt (10 s from its start to
    its end) and whose second step succeeded at once; returns the run's and the step's ids."""
    output = server.shell(
        "import datetime as dt, json\n"
        "from django.utils import timezone\n"
        "from orchestrator.models import Plan, Pool, Run, Step\n"
        "pool = Pool.objects.order_by('pk').first()\n"
        "start = timezone.now() - dt.timedelta(seconds=20)\n"
        "at = lambda seconds: start + dt.timedelta(seconds=seconds)\n"
        "run = Run.objects.create(project=pool.project, pool=pool, input='Add it up',"
        " status='succeeded', answer='42', step_count=2, model_calls=4, started_at=start,"
        " finished_at=at(12))\n"
        "plan = Plan.objects.create(run=run, round=0, strategy='reflection', workflow=[])\n"
        f"log = json.loads({json.dumps(json.dumps(ATTEMPT_LOG))})\n"
        "retried = Step.objects.create(run=run, plan=plan, round=0, index=0, instruction='Solve',"
        " worker_index=0, worker_name='Flaky', model='sim/flaky', status='succeeded',"
        " response='42', attempts=3, error=log[1]['error'], attempt_log=log, latency=1.5,"
        " started_at=at(0), finished_at=at(10))\n"
        "Step.objects.create(run=run, plan=plan, round=0, index=1, instruction='Check',"
        " worker_index=0, worker_name='Steady', model='sim/steady', status='succeeded',"
        " response='42', attempts=1, latency=2.0, started_at=at(10), finished_at=at(12))\n"
        "print(run.pk, retried.pk)\n"
    )
    run_id, step_id = output.split()[-2:]
    return int(run_id), int(step_id)


def marks_of(page, step_id: int) -> list[dict]:
    """The elements over the timeline for the step's segments, left to right."""
    return page.eval_on_selector_all(
        f"#run-timeline-marks [data-step='{step_id}']",
        "marks => marks.map((m) => ({kind: m.classList.contains('timeline-wait') ? 'wait'"
        " : m.classList.contains('timeline-attempt-failed') ? 'failed' : 'attempt',"
        " label: m.getAttribute('aria-label'), title: m.title,"
        " left: m.getBoundingClientRect().left, width: m.getBoundingClientRect().width}))",
    )


def test_a_retried_step_shows_each_attempt_its_error_and_the_wait_after_it(
    browser_page, live_server
):
    page = browser_page
    run_id, step_id = store_retried_run(live_server)
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]")

    # A small run's timeline is open from the start.
    wait_for_js(page, "document.querySelectorAll('#run-timeline-marks .timeline-mark').length > 0")
    assert page.evaluate("document.getElementById('timeline-section').open")

    marks = marks_of(page, step_id)
    assert [mark["kind"] for mark in marks] == ["failed", "wait", "failed", "wait", "attempt"]
    name = "Step 0.0 · Flaky"
    assert [mark["label"] for mark in marks] == [
        f"{name}: attempt 1 of 3 failed after 1.00 s: provider said 429",
        f"{name}: waited 2.00 s after attempt 1 before retrying",
        f"{name}: attempt 2 of 3 failed after 1.50 s: provider said 503: <b>overloaded</b>",
        f"{name}: waited 4.00 s after attempt 2 before retrying",
        f"{name}: attempt 3 of 3 succeeded after 1.50 s",
    ]
    assert [mark["title"] for mark in marks] == [mark["label"] for mark in marks]
    # In time order, side by side, each as long as it lasted (1 s, 2 s, 1.5 s, 4 s, 1.5 s).
    for earlier, later in zip(marks, marks[1:], strict=False):
        assert later["left"] == pytest.approx(earlier["left"] + earlier["width"], abs=1.5)
    unit = marks[0]["width"]
    assert [mark["width"] / unit for mark in marks] == pytest.approx([1, 2, 1.5, 4, 1.5], rel=0.05)
    # The step that succeeded at once stays one bar; the model's text stays text.
    assert page.locator("#run-timeline-marks .timeline-mark").count() == len(marks)
    assert page.locator("#run-timeline-marks b").count() == 0
    legend = page.inner_text(".timeline-legend")
    assert "failed attempt" in legend and "wait before the next attempt" in legend

    # A click on an attempt opens the step, whose panel lists the attempts with their errors.
    page.locator(f"#run-timeline-marks [data-step='{step_id}']").nth(2).click()
    attempts = page.locator("#run-panel .step-attempts > li")
    attempts.first.wait_for()
    assert attempts.count() == 3
    assert [line for line in attempts.nth(0).inner_text().splitlines() if line] == [
        "Attempt 1: failed after 1.00 s",
        "provider said 429",
        "Waited 2.00 s before retrying.",
    ]
    assert "provider said 503: <b>overloaded</b>" in attempts.nth(1).inner_text()
    assert attempts.nth(2).inner_text() == "Attempt 3: succeeded after 1.50 s"
    assert page.locator("#run-panel .step-attempts b").count() == 0
    assert axe_violations(page) == []


# A call that failed, its backoff, then 1.5 s in the queue for a slot before the call that
# succeeded: its offset is 1.5 s past the backoff's end.
QUEUED_LOG = [
    {"attempt": 1, "offset": 0.5, "seconds": 1.0, "error": "provider said 429", "backoff": 1.0},
    {"attempt": 2, "offset": 4.0, "seconds": 1.0, "error": "", "backoff": 0.0},
]


def test_a_step_s_wait_in_the_queue_is_drawn_apart_from_its_calls(browser_page, live_server):
    page = browser_page
    output = live_server.shell(
        "import datetime as dt, json\n"
        "from django.utils import timezone\n"
        "from orchestrator.models import Plan, Pool, Run, Step\n"
        "pool = Pool.objects.order_by('pk').first()\n"
        "start = timezone.now() - dt.timedelta(seconds=20)\n"
        "at = lambda seconds: start + dt.timedelta(seconds=seconds)\n"
        "run = Run.objects.create(project=pool.project, pool=pool, input='Add it up',"
        " status='succeeded', answer='42', step_count=1, model_calls=2, started_at=start,"
        " finished_at=at(6))\n"
        "plan = Plan.objects.create(run=run, round=0, strategy='single', workflow=[])\n"
        f"log = json.loads({json.dumps(json.dumps(QUEUED_LOG))})\n"
        "step = Step.objects.create(run=run, plan=plan, round=0, index=0, instruction='Solve',"
        " worker_index=0, worker_name='Busy', model='sim/busy', status='succeeded',"
        " response='42', attempts=2, attempt_log=log, latency=1.0, queued=2.0,"
        " started_at=at(0), finished_at=at(5))\n"
        "print(run.pk, step.pk)\n"
    )
    run_id, step_id = (int(part) for part in output.split()[-2:])
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]")
    wait_for_js(page, "document.querySelectorAll('#run-timeline-marks .timeline-mark').length > 0")
    marks = page.eval_on_selector_all(
        f"#run-timeline-marks [data-step='{step_id}']",
        "marks => marks.map((m) => ({kind: [...m.classList].find((c) => c !== 'timeline-mark'),"
        " label: m.getAttribute('aria-label'), width: m.getBoundingClientRect().width}))",
    )
    kinds = [mark["kind"] for mark in marks]
    assert kinds == [
        "timeline-queue",
        "timeline-attempt",
        "timeline-wait",
        "timeline-queue",
        "timeline-attempt",
    ]
    assert (
        marks[3]["label"] == "Step 0.0 · Busy: attempt 2 waited 1.50 s in the queue for a free slot"
    )
    unit = marks[1]["width"]  # the first call: 1 s
    assert [mark["width"] / unit for mark in marks] == pytest.approx([0.5, 1, 1, 1.5, 1], rel=0.08)
    assert "wait in the queue" in page.inner_text(".timeline-legend")
    page.locator(f"#run-timeline-marks [data-step='{step_id}']").nth(1).click()
    page.locator("#run-panel .panel-facts").first.wait_for()
    assert "2.00 s waiting for a free slot" in page.inner_text("#run-panel .panel-facts")
