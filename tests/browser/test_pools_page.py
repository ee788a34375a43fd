"""The pools page in a real browser: an admin makes a pool, adds a worker and tests its
connection against a local OpenAI-compatible server, then against a closed port; a viewer sees
the pool without any control to change it."""

from __future__ import annotations

import socket

import pytest

from harness.server import wait_for_js
from tests.openai_server import running_openai_server

POOL_NAME = "Zz browser pool"


@pytest.fixture
def openai_server():
    with running_openai_server() as url:
        yield url


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker_row(page, name: str):
    return page.locator("tr.worker-row").filter(has=page.locator(f"input[value='{name}']"))


def connection_shown(page, row) -> str:
    """Click the row's Test connection and return what it shows when the call is over (the
    server's first call through litellm imports it, which takes seconds)."""
    row.locator("button.test-connection").click()
    wait_for_js(
        page,
        "[...document.querySelectorAll('tr.worker-row .connection-result')]"
        ".some((o) => o.dataset.state === 'ok' || o.dataset.state === 'error')",
        timeout=90_000,
    )
    return row.locator(".connection-result").inner_text()


def save(page) -> None:
    with page.expect_navigation():
        page.click("#save-pool")
    assert page.locator(".field-error, .errorlist").count() == 0, page.content()[:3000]


def test_an_admin_adds_a_worker_and_tests_its_connection(browser_page, openai_server):
    page = browser_page
    page.goto("/pools/")
    page.click("#new-pool")
    page.fill("#id_name", POOL_NAME)
    # Not a simulated conductor, so the demo pool stays the default of the new-run form.
    page.fill("#id_conductor_model", "openai/tiny")
    page.fill("#id_conductor_api_base", openai_server)
    page.click("#add-worker")
    row = page.locator("tr.worker-row").last
    row.locator("input[name$='-name']").fill("Local echo")
    row.locator("input[name$='-model']").fill("openai/tiny")
    row.locator("input[name$='-api_base']").fill(openai_server)
    row.locator("textarea[name$='-params']").fill('{"temperature": 0}')
    row.locator("textarea[name$='-description']").fill("Repeats what it is asked.")
    save(page)

    row = worker_row(page, "Local echo")
    shown = connection_shown(page, row)
    assert shown.startswith("OK:") and "echo: This is a connection test" in shown
    assert "21 tokens in, 7 out" in shown and shown.endswith(" s")
    page.click("#test-conductor")
    wait_for_js(
        page,
        "document.querySelector('#test-conductor + output').dataset.state === 'ok'",
        timeout=90_000,
    )

    row.locator("input[name$='-api_base']").fill(f"http://127.0.0.1:{closed_port()}/v1")
    save(page)
    row = worker_row(page, "Local echo")
    shown = connection_shown(page, row)
    assert shown.startswith("Error:") and "Connection error" in shown


def test_a_viewer_sees_no_edit_or_pool_controls(browser, live_server, live_server_url):
    live_server.shell(
        "from orchestrator.models import Membership, Project\n"
        "from django.contrib.auth import get_user_model\n"
        "user, _ = get_user_model().objects.get_or_create(username='vic-viewer')\n"
        "user.set_password('viewer-password-1')\n"
        "user.save()\n"
        "Membership.objects.get_or_create(project=Project.objects.get(name='Default'), "
        "user=user, defaults={'role': 'viewer'})\n"
    )
    context = browser.new_context(base_url=live_server_url)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", "vic-viewer")
        page.fill("#id_password", "viewer-password-1")
        with page.expect_navigation():
            page.click("button[type=submit]")
        assert page.locator("#new-run").count() == 0
        page.click("nav.site-nav >> text=Pools")
        assert page.locator("#pools-table").is_visible()
        assert page.locator("#new-pool").count() == 0
        page.locator("#pools-table a").first.click()
        page.wait_for_selector("#pool-settings")
        for control in ("#pool-form", "#add-worker", ".test-connection", "#save-pool"):
            assert page.locator(control).count() == 0, control
        assert page.locator("main input, main select, main textarea, main button").count() == 0
        assert page.locator("nav.site-nav >> text=Audit").count() == 0
    finally:
        context.close()
