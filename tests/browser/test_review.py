"""Reviewing a run in real browsers: a reviewer labels a run and comments on a step, and another
reviewer's open page shows the label, and the comment as a badge on the step's graph node,
without reloading; a viewer sees the review and no control to change it."""

from __future__ import annotations

import pytest

from harness.server import wait_for_js

pytestmark = pytest.mark.browser

PASSWORD = "review-tests-pw-42"
COMMENT = '**Wrong** worker: <img src=x onerror="window.__pwned=1"> use `sim-math`.'


@pytest.fixture(scope="module")
def members(live_server) -> dict[str, str]:
    """A reviewer and a viewer of the demo project (the admin is the server's own)."""
    users = {"reviewer": "rita-reviewer", "viewer": "viktor-viewer"}
    live_server.shell(
        "from django.contrib.auth import get_user_model\n"
        "from orchestrator.models import Project\n"
        "from orchestrator.services.pools import membership_set\n"
        "project = Project.objects.order_by('pk').first()\n"
        f"for role, name in {users!r}.items():\n"
        "    user, _ = get_user_model().objects.get_or_create(username=name)\n"
        f"    user.set_password({PASSWORD!r})\n"
        "    user.save()\n"
        "    membership_set(project=project, user=user, role=role)\n"
    )
    return users


def page_as(browser, live_server, username: str):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert "/accounts/login/" not in page.url
    return page


def open_run(page, run_id: int, hash: str = "") -> None:
    page.goto(f"/runs/{run_id}/{hash}")
    page.wait_for_selector("#run-graph[data-state=ready]")
    page.wait_for_selector("#live-indicator[data-state=finished]")
    # A finished run's page keeps its socket open for review events.
    wait_for_js(page, "window.runPage.live.socket && window.runPage.live.socket.readyState === 1")


def test_a_label_and_a_step_comment_appear_live_on_another_reviewers_page(
    browser, browser_page, live_server, make_run, members
):
    run_id = make_run("What is 12 * 12?")
    run = make_run.wait(run_id)
    step_id = run["steps"][0]["id"]

    watcher = browser_page  # the admin, a second reviewer, with the run open before anything
    open_run(watcher, run_id)
    assert wait_for_js(watcher, f"window.runPage.review.badgeCount({step_id}) === 0", 1000)

    reviewer = page_as(browser, live_server, members["reviewer"])
    try:
        open_run(reviewer, run_id, f"#step-{step_id}")
        reviewer.check("#review-controls label:has-text('wrong worker') input")
        reviewer.wait_for_selector("#review-labels .label-chip:has-text('wrong worker')")
        reviewer.fill("#step-comment-form textarea", COMMENT)
        reviewer.click("#step-comment-form button[type=submit]")
        reviewer.wait_for_selector("#step-comments .comment strong:has-text('Wrong')")
    finally:
        reviewer.context.close()

    # The watcher's page learnt both over its socket, without a reload.
    watcher.wait_for_selector("#review-labels .label-chip:has-text('wrong worker')")
    wait_for_js(watcher, f"window.runPage.review.badgeCount({step_id}) === 1")
    assert watcher.evaluate("performance.getEntriesByType('navigation').length") == 1
    # The badge sits on the step's node; clicking it opens the step with its comment, whose
    # Markdown is drawn as text: the bold is bold, the image tag never became an element.
    offset = watcher.evaluate(
        f"(() => {{ const cy = window.runPage.graph.cy; const b = cy.getElementById('c{step_id}');"
        f" const n = cy.getElementById('s{step_id}');"
        " return [b.position('x') - n.position('x'), b.position('y') - n.position('y')]; })()"
    )
    assert 0 < offset[0] <= 90 and -25 <= offset[1] < 0  # the node's top-right corner
    watcher.locator("#run-graph").scroll_into_view_if_needed()
    point = watcher.evaluate(f"window.runPage.graph.clientPosition('c{step_id}')")
    watcher.mouse.click(point["x"], point["y"])
    watcher.wait_for_selector("#step-comments .comment")
    assert watcher.text_content("#run-panel-title").startswith("Step ")
    body = watcher.inner_html("#step-comments .comment-body")
    assert "<strong>Wrong</strong>" in body and "<img" not in body
    assert watcher.evaluate("window.__pwned") is None
    assert watcher.text_content("#step-comments .comment-head strong") == members["reviewer"]


def test_a_viewer_sees_the_review_and_no_control_to_change_it(
    browser, live_server, make_run, members
):
    run_id = make_run("What is 9 + 10?")
    run = make_run.wait(run_id)
    step_id = run["steps"][0]["id"]
    viewer = page_as(browser, live_server, members["viewer"])
    try:
        open_run(viewer, run_id, f"#step-{step_id}")
        viewer.wait_for_selector("#review-summary")
        viewer.wait_for_selector("#step-comments")
        for control in (
            "#review-controls",
            "#run-comment-form",
            "#step-comment-form",
            "#run-cancel-form",
            "#review-section input",
            "#review-section button",
            "#run-panel .comment-edit",
        ):
            assert viewer.locator(control).count() == 0, control
        # The queue offers the viewer no label keys either.
        viewer.goto("/review/")
        viewer.wait_for_selector("#runs-table")
        assert (
            viewer.evaluate(
                "JSON.parse(document.getElementById('queue-data').textContent).can_review"
            )
            == []
        )
    finally:
        viewer.context.close()
