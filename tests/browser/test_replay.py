"""Edit and replay from the run page: an admin edits a step of a finished run, replays it, and
watches only the affected steps run live on the replay's page, the others drawn as reused, with
the lineage back to the source."""

from __future__ import annotations

import time

from harness.server import RunMaker, wait_for_js
from tests.browser.pages import record_frames, step_states


def test_edit_a_step_replay_and_watch_only_the_affected_steps_run(slow_page, slow_server):
    page = slow_page
    make_run = RunMaker(page, slow_server)
    # Summit, the slowest worker of the demo pool (about two seconds a step on this server).
    source_id = make_run(
        "What is 17 * 23?", strategy="reflection", strategy_options={"rounds": 3, "worker": 4}
    )
    source = make_run.wait(source_id)
    assert source["status"] == "succeeded", source["error"]
    steps = source["steps"]
    assert len(steps) == 4
    second = steps[1]

    frames = record_frames(page)
    page.goto(f"/runs/{source_id}/#step-{second['id']}")
    page.click("#replay-edit-open")
    page.fill(
        "#replay-instruction", "Review the answer above once more, slowly. End with Answer: ..."
    )
    page.select_option("#replay-worker", label="Forge (simulated)")
    with page.expect_navigation():
        page.click("#replay-submit")

    replay_id = int(page.url.rstrip("/").split("/")[-1])
    assert replay_id != source_id
    # The lineage strip leads back to the source.
    assert page.get_attribute("#lineage-source", "href") == f"/runs/{source_id}/"
    # The edited step and those reading it run live, drawn running one after the other; the
    # first step is drawn reused all along.
    wait_for_js(page, "window.runPage.graph.cy.nodes('.step[status = \"running\"]').length > 0")
    seen_running: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = page.evaluate(
            "[runPage.store.run.status, runPage.graph.cy.nodes('.step[status = \"running\"]')"
            ".map((node) => node.data('step'))]"
        )
        seen_running.update(state[1])
        if state[0] == "succeeded":
            break
        time.sleep(0.05)
    replay = make_run.get(replay_id)
    assert replay["status"] == "succeeded", replay["error"]
    first_id = replay["steps"][0]["id"]
    assert replay["steps"][0]["reused_from"] == steps[0]["id"]
    assert page.evaluate(f"runPage.graph.cy.getElementById('s{first_id}').data('reused')") is True
    replay = make_run.get(replay_id)
    ran = [step["id"] for step in replay["steps"] if step["reused_from"] is None]
    assert ran == [step["id"] for step in replay["steps"][1:]]
    assert seen_running and seen_running <= set(ran), "only the affected steps were drawn running"
    assert len(seen_running) >= 2, "the page followed the replay live, step after step"
    started = [f["step"]["id"] for f in frames if f.get("type") == "step.started"]
    assert started and set(started) <= set(ran), "no reused step was started"
    assert replay["totals"]["model_calls"] == 3
    assert [status for _, status in step_states(page)] == ["succeeded"] * 4
    for step in replay["steps"][1:]:
        assert (
            page.evaluate(f"runPage.graph.cy.getElementById('s{step['id']}').data('reused')")
            is False
        )
    edits = {edit["field"]: edit for edit in replay["edits"]}
    assert edits["instruction"]["after"].startswith("Review the answer above once more")
    assert edits["worker"]["after"]["name"] == "Forge (simulated)"
    assert replay["steps"][1]["worker"] == "Forge (simulated)"

    # The source's page now lists the replay, and the family page holds both.
    page.goto(f"/runs/{source_id}/")
    assert page.get_attribute(f'.lineage-replay[data-run-id="{replay_id}"]', "href") == (
        f"/runs/{replay_id}/"
    )
    page.click("#lineage-family")
    rows = page.eval_on_selector_all(
        "#family-table tbody tr", "rows => rows.map(r => r.dataset.runId)"
    )
    assert rows == [str(source_id), str(replay_id)]


def test_replan_from_a_step_keeps_the_instruction_typed_in_the_form(browser_page, make_run):
    page = browser_page
    source_id = make_run("What is 17 * 23?", strategy="conductor")
    source = make_run.wait(source_id)
    assert source["status"] == "succeeded", source["error"]
    step = source["steps"][0]

    page.goto(f"/runs/{source_id}/#step-{step['id']}")
    page.click("#replay-edit-open")
    page.fill("#replay-instruction", "Work it out in two lines. End with Answer: ...")
    with page.expect_navigation():
        page.click("#replay-replan")

    replay = make_run.get(int(page.url.rstrip("/").split("/")[-1]))
    fields = [edit["field"] for edit in replay["edits"]]
    assert fields == ["instruction", "replan_from"]
    assert replay["edits"][0]["after"] == "Work it out in two lines. End with Answer: ..."


def test_unticking_all_while_every_earlier_step_stays_ticked_is_no_edit(browser_page, make_run):
    page = browser_page
    source_id = make_run("What is 17 * 23?", strategy="moa")
    source = make_run.wait(source_id)
    assert source["status"] == "succeeded", source["error"]
    aggregator = source["steps"][-1]
    assert aggregator["access"] == "all"

    page.goto(f"/runs/{source_id}/#step-{aggregator['id']}")
    page.click("#replay-edit-open")
    page.uncheck("#replay-access-all")  # every earlier step stays ticked
    page.click("#replay-submit")

    assert "Change the instruction, the worker or what it reads first" in page.inner_text(
        "#replay-status"
    )
    assert page.url.rstrip("/").endswith(f"/runs/{source_id}/#step-{aggregator['id']}".rstrip("/"))
