"""The compare page in a real browser: two runs that differ in one step's instruction, the change
marked on the graphs and in the aligned table, its word diff on a click; and the runs list's
Compare action."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from harness.server import wait_for_js

pytestmark = pytest.mark.browser

COMPARE_PAGE = re.compile(r"/compare/\?runs=(\d+),(\d+)$")


def stored_pair(live_server, *, token: str) -> dict:
    """A finished run and its replay stored in the server's database: three steps each, the
    second step's instruction (and so its response) changed. Returns ids of runs and steps."""
    code = f"""
import json
from orchestrator.models import Pool, Run, Step
pool = Pool.objects.filter(conductor_model__startswith="sim/").order_by("id").first()
made = {{"runs": [], "steps": []}}
source = None
for number, middle in enumerate(("Add 17 and 23 carefully.", "Multiply 17 and 23.")):
    run = Run.objects.create(
        project=pool.project, pool=pool, input="{token} What is 17 * 23?", status="succeeded",
        answer=("40" if number == 0 else "391"), step_count=3, model_calls=4, replay_of=source,
    )
    source = source or run
    steps = []
    for index, (instruction, response) in enumerate((
        ("Read the question.", "Two numbers: 17 and 23."),
        (middle, "40" if number == 0 else "391"),
        ("Give the final answer.", "40" if number == 0 else "391"),
    )):
        step = Step.objects.create(
            run=run, round=0, index=index, instruction=instruction, worker_index=0,
            worker_name="Swift", model="sim/swift", access=[index - 1] if index else [],
            reads=[steps[-1].pk] if steps else [], status="succeeded", response=response,
            tokens_in=10, tokens_out=5,
        )
        steps.append(step)
    made["runs"].append(run.pk)
    made["steps"].append([step.pk for step in steps])
print(json.dumps(made))
"""
    return json.loads(live_server.shell(code).strip().splitlines()[-1])


def test_the_changed_step_is_marked_and_its_word_diff_shown(browser_page, live_server):
    page = browser_page
    made = stored_pair(live_server, token=uuid.uuid4().hex[:8])
    source, replay = made["runs"]
    changed_step = made["steps"][1][1]

    # As a replay's page links to it: the source first, then the replay.
    page.goto(f"{live_server.url}/compare/?runs={source},{replay}")
    page.wait_for_selector("#compare-page[data-state=ready]")

    assert page.text_content("[data-count-for=changed]") == "(2)"
    assert page.text_content("[data-count-for=same]") == "(1)"
    changes = page.eval_on_selector_all(
        "#compare-steps tbody tr", "rows => rows.map((row) => row.dataset.change)"
    )
    assert changes == ["same", "changed", "changed"]
    marked = page.evaluate(
        """() => window.comparePage.graphs.map(({ view }) =>
            view.cy.nodes('.step').map((node) => [node.data('step'), node.classes().filter(
                (name) => name.startsWith('change-'))[0]]))"""
    )
    assert marked[1][1] == [changed_step, "change-changed"]
    assert marked[1][0][1] == "change-same"

    # A click on the changed node of the replay's graph, as a user would.
    point = page.evaluate(f"window.comparePage.graphs[1].view.clientPositionOf({changed_step})")
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector("#compare-panel:not([hidden])")
    assert page.text_content("#compare-panel-title") == "Step 0.1: changed"
    section = page.locator(f'#compare-panel section[data-run="{replay}"]')
    assert section.locator("del.diff-delete").all_text_contents()[:2] == ["Add", " carefully"]
    assert section.locator("ins.diff-insert").first.text_content() == "Multiply"
    instruction = section.locator(".diff-text").first.text_content()
    assert instruction == "AddMultiply 17 and 23 carefully."
    # The diff is text: the page made no element out of the step's words.
    assert section.locator(".diff-text").first.evaluate("p => p.children.length") == 3
    # The outcome table shows the answers' difference.
    assert "differs" in page.get_attribute(
        '#compare-outcome tr[data-key="answer"] td:nth-child(3)', "class"
    )


def test_the_runs_list_compares_the_ticked_rows(browser_page, live_server):
    page = browser_page
    token = uuid.uuid4().hex[:8]
    source, replay = stored_pair(live_server, token=token)["runs"]

    page.goto(f"{live_server.url}/?q={token}")
    button = page.locator("#compare-selected")
    assert button.is_disabled()
    page.check(f'input.compare-pick[value="{source}"]')
    assert button.is_disabled()
    page.check(f'input.compare-pick[value="{replay}"]')
    assert button.is_enabled() and button.text_content() == "Compare 2 selected"
    button.click()

    page.wait_for_url(COMPARE_PAGE)
    page.wait_for_selector("#compare-page[data-state=ready]")
    # The list is newest first: the replay, then its source.
    assert [int(i) for i in COMPARE_PAGE.search(page.url).groups()] == [replay, source]
    assert wait_for_js(page, "window.comparePage.rows.length") == 3
