"""An experiment in the browser: add the bundled suite, start an experiment on a sample of it,
watch the progress bar move to the end, open a scoreboard cell's runs and a head-to-head pair."""

from __future__ import annotations

import time

import pytest

from harness.server import LiveServer, log_in, start_live_server, wait_for_js

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def experiment_server(tmp_path_factory, _browser_available) -> LiveServer:
    """A server of its own: the experiment's runs stay out of other tests' run lists. Its
    simulated calls take ten times the other servers' latency, so the 24 runs last several of
    the page's one-second polls and the bar is seen between its ends however fast storing is."""
    server = start_live_server(
        tmp_path_factory.mktemp("experiment-server"),
        extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": "0.5"},
    )
    yield server
    server.stop()


@pytest.fixture
def page(browser, experiment_server: LiveServer):
    context = browser.new_context(
        base_url=experiment_server.url, viewport={"width": 1400, "height": 1000}
    )
    context.set_default_timeout(20_000)
    page = context.new_page()
    log_in(page, experiment_server)
    yield page
    context.close()


def test_start_an_experiment_watch_it_finish_and_open_its_runs(page):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.goto("/datasets/")
    with page.expect_navigation():
        page.click("button.suite-add")
    assert "Bundled suite" in page.inner_text("h1")

    page.fill("#id_arms", "single:0,moa")
    page.fill("#id_sample", "12")
    page.fill("#id_seed", "4")
    with page.expect_navigation():
        page.click("#experiment-start")
    assert "/experiments/" in page.url
    assert page.get_attribute("#experiment-progress", "max") == "24"

    # The bar moves while the runs go, then reaches the end.
    seen: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # Read together: the page may update between two separate reads.
        value, status = page.evaluate(
            "[document.getElementById('experiment-progress').value,"
            " document.getElementById('experiment-status').textContent.trim()]"
        )
        if not seen or int(value) != seen[-1]:
            seen.append(int(value))
        if status == "finished":
            break
        time.sleep(0.1)
    assert page.inner_text("#experiment-status") == "finished", seen
    assert seen[-1] == 24 and len(seen) >= 3, f"the bar did not move by steps: {seen}"
    assert page.inner_text("#experiment-progress-text") == "24 / 24 runs"
    assert page.is_hidden("#experiment-cancel")

    # The scoreboard has a row per arm with every item counted, and its best values marked.
    wait_for_js(page, "document.querySelectorAll('#scoreboard tbody tr').length === 2")
    wait_for_js(page, "document.getElementById('experiment-page').dataset.scoreboardDone === '24'")
    rows = page.locator("#scoreboard tbody tr")
    assert rows.nth(0).locator("th").inner_text().startswith("single:0")
    assert rows.nth(1).locator("th").inner_text().startswith("moa")
    assert page.locator("#scoreboard td.best").count() >= 1
    assert page.locator("#accuracy-cost-chart").bounding_box()["height"] > 50

    # A cell lists its runs; each opens the run's page.
    rows.nth(1).locator("td.accuracy button").click()
    wait_for_js(page, "document.getElementById('experiment-page').dataset.cellRuns === '12'")
    assert page.locator("#cell-runs li").count() == 12
    first_run = page.locator("#cell-runs li a").first.get_attribute("href")
    assert first_run.startswith("/runs/")

    # Head to head: where one arm was right and the other wrong, linked to the compare view.
    page.click("#h2h-go")
    wait_for_js(page, "document.getElementById('experiment-page').dataset.h2hItems !== undefined")
    counts = page.inner_text("#h2h-counts")
    assert counts.startswith("Both right")
    pairs = page.locator("#h2h-items li")
    assert pairs.count() >= 1, counts
    compare = pairs.first.locator("a.h2h-compare").get_attribute("href")
    assert compare.startswith("/compare/?runs=")
    run_a, run_b = compare.split("=")[1].split(",")
    assert run_a.isdigit() and run_b.isdigit() and run_a != run_b

    page.goto(first_run)
    page.wait_for_selector("#run-status.status-succeeded, #run-status.status-failed")
    assert not errors, errors
