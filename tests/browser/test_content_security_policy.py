"""Pages under the Content-Security-Policy in a real browser: nothing is refused, the run page
still draws its graph live, and logging out in another tab ends the live view at once."""

from __future__ import annotations

import re

import pytest

from harness.server import log_in, start_live_server

pytestmark = pytest.mark.browser

# Playwright adds this before any page script; the browser fires the event for every refusal.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI} ${event.sourceFile}:${event.lineNumber}`);
});
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory, _browser_available):
    """Simulated workers take a fraction of a second per step: a run is still going while the
    page watches it."""
    server = start_live_server(
        tmp_path_factory.mktemp("csp-server"), extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": "0.5"}
    )
    yield server
    server.stop()


@pytest.fixture
def context(browser, server):
    context = browser.new_context(base_url=server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(20_000)
    context.add_init_script(RECORD_VIOLATIONS)
    yield context
    context.close()


class Refusals:
    """Every CSP refusal a page reports, from its console and from the violation events."""

    def __init__(self) -> None:
        self.console: list[str] = []

    def watch(self, page) -> None:
        page.on(
            "console",
            lambda message: (
                self.console.append(message.text)
                if "Content Security Policy" in message.text
                else None
            ),
        )
        page.on("pageerror", lambda error: self.console.append(f"page error: {error}"))

    def of(self, page) -> list[str]:
        return self.console + page.evaluate("window.__cspViolations || []")


def test_pages_load_with_nothing_refused_and_the_graph_draws_live(context, server):
    refusals = Refusals()
    page = context.new_page()
    refusals.watch(page)
    log_in(page, server)
    assert refusals.of(page) == []
    response = page.goto("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]

    frames: list[str] = []
    page.on("websocket", lambda socket: socket.on("framereceived", lambda f: frames.append(f)))
    page.fill("#new-run-input", "What is 17 * 23 + 4?")
    with page.expect_navigation(url=re.compile(r"/runs/\d+/$")):
        page.click("#new-run-submit")
    page.wait_for_selector("#live-indicator[data-state=live]")
    page.wait_for_selector("#live-indicator[data-state=finished]", timeout=60_000)
    assert any('"step.finished"' in frame for frame in frames if isinstance(frame, str))
    drawn = page.evaluate("window.runPage.graph.cy.nodes('.step').length")
    listed = page.locator("#step-list li").count()
    assert drawn == listed and drawn >= 2
    # The details panel renders the response (Markdown) under the policy too.
    page.locator("#step-list li:first-child button").click()
    page.locator("#run-panel .response").wait_for()
    assert refusals.of(page) == []

    run_id = re.search(r"/runs/(\d+)/", page.url).group(1)
    admin_pages = (
        "/admin/",
        "/admin/orchestrator/pool/",
        f"/admin/orchestrator/run/{run_id}/change/",
    )
    for path in admin_pages:
        page.goto(path)
        assert refusals.of(page) == [], path


def test_logging_out_in_another_tab_ends_the_live_view(context, server):
    watching = context.new_page()
    log_in(watching, server)
    watching.fill("#new-run-input", "What is 48 * 52 - 7?")
    with watching.expect_navigation(url=re.compile(r"/runs/\d+/$")):
        watching.click("#new-run-submit")
    watching.wait_for_selector("#live-indicator[data-state=live]")

    other = context.new_page()
    other.goto("/")
    with other.expect_navigation():
        other.click(".site-user button[type=submit]")

    watching.wait_for_selector("#live-indicator[data-state=refused]", timeout=2_000)
