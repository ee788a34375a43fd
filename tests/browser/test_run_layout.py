"""The run page reads at every size: no sideways scroll at 1024×700, a phone leads with the
header and the step list, the graph names its steps and lets the wheel scroll the page, and axe
finds nothing on the runs list, a run page with a step open, or the login page."""

from __future__ import annotations

import pytest

from harness.server import RunMaker, log_in, wait_for_js
from tests.browser.pages import axe_violations

pytestmark = pytest.mark.browser

QUESTION = (
    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?"
)


@pytest.fixture(scope="module")
def finished_runs(browser, live_server):
    """A conductor run and a reflection run of a suite question, finished."""
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    log_in(page, live_server)
    runs = RunMaker(page, live_server)
    ids = {strategy: runs(QUESTION, strategy=strategy) for strategy in ("conductor", "reflection")}
    for run_id in ids.values():
        runs.wait(run_id)
    context.close()
    return ids


def page_at(browser, live_server, width, height):
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": width, "height": height}
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    log_in(page, live_server)
    return page


def graph_ready(page):
    page.wait_for_selector("#run-graph[data-state=ready]")


def test_no_sideways_scroll_at_1024(browser, live_server, finished_runs):
    page = page_at(browser, live_server, 1024, 700)
    for path in ("/", f"/runs/{finished_runs['conductor']}/"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("document.documentElement.scrollWidth") <= 1024, path
    # With a step's details open too: the graph re-fits beside or under them.
    step = page.locator("#step-list li").first.get_attribute("data-step-id")
    page.goto(f"/runs/{finished_runs['conductor']}/#step-{step}")
    page.locator("#run-panel .response").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024
    page.context.close()


def test_a_phone_shows_the_header_and_the_step_list_first(browser, live_server, finished_runs):
    page = page_at(browser, live_server, 390, 844)
    page.goto(f"/runs/{finished_runs['conductor']}/")
    page.wait_for_selector("#step-list li")
    top = lambda selector: page.locator(selector).bounding_box()["y"]  # noqa: E731
    assert top(".run-header") < top("#steps-section") < top(".run-graph-section")
    assert top("#steps-section") < top("#timeline-section")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.is_visible("#graph-fullscreen")
    page.context.close()


def test_the_panel_never_covers_the_navigation(browser, live_server, finished_runs):
    for width, height in ((1440, 900), (1024, 700)):
        page = page_at(browser, live_server, width, height)
        page.goto(f"/runs/{finished_runs['conductor']}/")
        page.locator("#step-list li button").first.click()
        page.locator("#run-panel .response").wait_for()
        nav = page.locator(".site-nav").bounding_box()
        panel = page.locator("#run-panel").bounding_box()
        overlap = min(nav["x"] + nav["width"], panel["x"] + panel["width"]) > max(
            nav["x"], panel["x"]
        ) and min(nav["y"] + nav["height"], panel["y"] + panel["height"]) > max(
            nav["y"], panel["y"]
        )
        assert not overlap, (width, nav, panel)
        if width == 1440:
            # Beside the panel, the graph fits itself into the room that is left.
            wait_for_js(
                page,
                "(() => { const cy = window.runPage.graph.cy; const box = cy.nodes().renderedBoundingBox();"
                " return box.x1 >= -1 && box.x2 <= cy.width() + 1 && box.y1 >= -1 && box.y2 <= cy.height() + 1; })()",
                timeout=5_000,
            )
            graph = page.locator("#run-graph").bounding_box()
            assert graph["x"] + graph["width"] <= panel["x"]
        page.context.close()


def test_graph_nodes_carry_step_numbers_and_fixed_strategies_have_no_conductor(
    browser, live_server, finished_runs
):
    page = page_at(browser, live_server, 1440, 900)
    page.goto(f"/runs/{finished_runs['conductor']}/")
    graph_ready(page)
    labels = page.evaluate("window.runPage.graph.cy.nodes('.step').map((n) => n.data('label'))")
    assert labels and all(label.split(" · ")[0].count(".") == 1 for label in labels)
    plans = page.evaluate("window.runPage.graph.cy.nodes('.plan').map((n) => n.data('label'))")
    assert plans and all("conductor" in label for label in plans)

    page.goto(f"/runs/{finished_runs['reflection']}/")
    graph_ready(page)
    assert page.evaluate("window.runPage.graph.cy.nodes('.plan').length") == 0
    assert page.evaluate("window.runPage.graph.cy.nodes('.step').length") > 0
    page.context.close()


def test_the_wheel_scrolls_the_page_over_the_graph_unless_asked_to_zoom(
    browser, live_server, finished_runs
):
    page = page_at(browser, live_server, 1024, 700)
    page.goto(f"/runs/{finished_runs['conductor']}/")
    graph_ready(page)
    page.locator("#run-graph").scroll_into_view_if_needed()
    box = page.locator("#run-graph").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 20)
    zoom = page.evaluate("window.runPage.graph.cy.zoom()")
    scrolled = page.evaluate("window.scrollY")
    page.mouse.wheel(0, 200)
    wait_for_js(page, f"window.scrollY > {scrolled}")
    assert page.evaluate("window.runPage.graph.cy.zoom()") == zoom
    # Focused (clicked or tabbed to), the wheel zooms the graph instead.
    page.focus("#run-graph")
    scrolled = page.evaluate("window.scrollY")
    page.mouse.wheel(0, -200)
    wait_for_js(page, f"window.runPage.graph.cy.zoom() > {zoom}")
    assert page.evaluate("window.scrollY") == scrolled
    page.context.close()


def test_axe_finds_nothing_on_the_list_a_run_with_a_panel_and_the_login_page(
    browser, live_server, finished_runs
):
    page = page_at(browser, live_server, 1440, 900)
    page.goto("/")
    page.wait_for_load_state("networkidle")
    assert axe_violations(page) == []

    page.goto(f"/runs/{finished_runs['conductor']}/")
    graph_ready(page)
    page.locator("#step-list li button").first.click()
    page.locator("#run-panel .response").wait_for()
    assert axe_violations(page) == []
    page.context.close()

    context = browser.new_context(base_url=live_server.url)
    login = context.new_page()
    login.goto("/accounts/login/")
    assert axe_violations(login) == []
    context.close()
