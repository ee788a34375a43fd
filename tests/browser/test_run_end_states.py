"""How a run's end shows on its page: the Cancel button, cancelled and skipped steps, and a
failed run that says why it has no answer.

The live test uses a server whose simulated workers take about a second per step, so the run is
still going when the button is clicked.
"""

from __future__ import annotations

import pytest

from harness.server import LiveServer, RunMaker, wait_for_js
from tests.browser.pages import record_frames, step_states

pytestmark = pytest.mark.browser


def graph_states(page) -> dict[int, str]:
    return dict(
        page.evaluate(
            "window.runPage.graph.cy.nodes('.step').map((n) => [n.data('step'), n.data('status')])"
        )
    )


def test_cancel_button_stops_a_run_and_the_page_shows_every_step_closed(slow_page, slow_server):
    page = slow_page
    frames = record_frames(page)
    run_id = RunMaker(page, slow_server)(
        "What is 41 * 3?", strategy="reflection", strategy_options={"rounds": 5}
    )
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#live-indicator[data-state=live]")
    page.wait_for_selector("#step-list li[data-status=running]")
    assert page.is_visible("#run-cancel")
    cancels = []
    page.on(
        "request", lambda request: cancels.append(request.url) if "/cancel" in request.url else None
    )

    # A cancel cannot be undone: the button asks first, and "no" leaves the run going.
    questions = []

    def answer_no(dialog):
        questions.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", answer_no)
    page.click("#run-cancel")
    assert questions and questions[0].startswith("Cancel this run?")
    assert cancels == [] and page.is_enabled("#run-cancel")
    assert page.text_content("#run-cancel-message") == ""

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#run-cancel")

    page.wait_for_selector("#run-status.status-cancelled")
    page.wait_for_selector("#run-cancel-form", state="hidden")
    states = step_states(page)
    statuses = [status for _, status in states]
    # Whatever had finished stays; the step in flight was cancelled; the rest never ran.
    assert "running" not in statuses and "pending" not in statuses
    assert statuses.count("cancelled") == 1
    assert statuses[-1] == "skipped"
    first_closed = next(i for i, s in enumerate(statuses) if s in ("cancelled", "skipped"))
    assert set(statuses[:first_closed]) <= {"succeeded"}
    assert statuses[first_closed] == "cancelled"
    assert set(statuses[first_closed + 1 :]) == {"skipped"}
    # The graph draws the same states, with the legend naming them.
    wait_for_js(page, "window.runPage.graph.cy.nodes('.step[status = \"skipped\"]').length > 0")
    assert graph_states(page) == dict(states)
    legend = page.inner_text("#graph-legend")
    assert "cancelled" in legend and "skipped" in legend
    assert page.inner_text("#run-answer") == "No answer: the run was cancelled."
    # The panel of a skipped step says why it never ran.
    page.click(f"#step-list li[data-step-id='{states[-1][0]}'] button")
    page.locator("#run-panel .error-text").wait_for()
    assert page.inner_text("#run-panel .error-text") == "Not run: the run was cancelled"

    # The API agrees, and run.finished was the last event the page was sent.
    run = RunMaker(page, slow_server).get(run_id)
    assert run["status"] == "cancelled"
    assert [(s["id"], s["status"]) for s in run["steps"]] == states
    page.wait_for_timeout(1500)  # the cancelled step's model call has answered by now
    events = [frame for frame in frames if frame.get("type") != "snapshot"]
    assert events[-1]["type"] == "run.finished" and events[-1]["status"] == "cancelled"
    assert [event["type"] for event in events].count("run.finished") == 1
    closed = events[-1]["closed_steps"]
    assert closed["skipped"]["ids"] == [id for id, status in states if status == "skipped"]


def store_failed_run(server: LiveServer) -> int:
    """A run that failed at its second step, its third never started (stored as the recorder
    stores it)."""
    output = server.shell(
        "from django.utils import timezone\n"
        "from orchestrator.models import Plan, Pool, Run, Step\n"
        "pool = Pool.objects.order_by('pk').first()\n"
        "now = timezone.now()\n"
        "error = 'step 0.1 (Flaky) failed: provider said 400'\n"
        "run = Run.objects.create(project=pool.project, pool=pool, input='Add it up',"
        " status='failed', error=error, step_count=3, started_at=now, finished_at=now)\n"
        "plan = Plan.objects.create(run=run, round=0, strategy='reflection', workflow=[])\n"
        "for index, status, text in [(0, 'succeeded', ''), (1, 'failed', 'provider said 400'),"
        " (2, 'skipped', 'Not run: the run failed: ' + error)]:\n"
        "    Step.objects.create(run=run, plan=plan, round=0, index=index, instruction='Part',"
        " worker_index=0, worker_name='Flaky', model='sim/flaky', status=status, error=text,"
        " started_at=now if index < 2 else None, finished_at=now)\n"
        "print(run.pk)\n"
    )
    return int(output.split()[-1])


def test_a_failed_run_has_no_answer_and_says_why(browser_page, live_server):
    page = browser_page
    run_id = store_failed_run(live_server)

    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]")

    assert page.inner_text("#run-answer") == "No answer: the run failed (the error below says why)."
    assert page.inner_text("#run-error") == "step 0.1 (Flaky) failed: provider said 400"
    assert [status for _, status in step_states(page)] == ["succeeded", "failed", "skipped"]
    assert sorted(graph_states(page).values()) == ["failed", "skipped", "succeeded"]
    assert page.is_hidden("#run-cancel-form")  # a finished run cannot be cancelled
