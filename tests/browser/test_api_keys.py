"""API keys on the account page, used by a real OpenAI client; a step's link to its nested run."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from harness.server import log_in
from tests.webui.openai.v1server import DEMO_MODEL, start_v1_server

QUESTION = [{"role": "user", "content": "What is 17 * 23?"}]


def v1_client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=60)


def test_a_key_made_on_the_account_page_works_once_shown_and_stops_when_revoked(
    browser_page, live_server_url
):
    page = browser_page
    page.goto("/")
    page.click("nav.site-nav >> text=Account")
    page.fill("#id_name", "notebook")
    page.click("#create-key")
    key = page.input_value("#new-key")
    assert key.startswith("cs-")
    page.click("#copy-key")
    # Copied, or told how to copy it (the clipboard answers asynchronously).
    page.wait_for_function("document.querySelector('#copy-status').textContent.trim() !== ''")
    assert page.text_content("#copy-status").strip() in {
        "Copied.",
        "Select the key and copy it yourself.",
    }
    row = page.locator("#key-table tbody tr", has_text="notebook").first
    assert row.locator(".key-last-used").inner_text() == "never"

    completion = v1_client(live_server_url, key).chat.completions.create(
        model=DEMO_MODEL, messages=QUESTION
    )
    assert completion.choices[0].message.content.rstrip().endswith("Answer: 391")

    page.goto("/account/")
    assert page.locator("#new-key").count() == 0  # shown once only
    assert key not in page.content()
    row = page.locator("#key-table tbody tr", has_text="notebook").first
    assert row.locator(".key-last-used").inner_text() != "never"

    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        row.locator("button", has_text="Revoke").click()
    row = page.locator("#key-table tbody tr", has_text="notebook").first
    assert row.locator(".key-state").inner_text().startswith("revoked")
    with pytest.raises(openai.AuthenticationError):
        v1_client(live_server_url, key).models.list()


@pytest.fixture(scope="module")
def v1_server(tmp_path_factory, _browser_available):
    made = start_v1_server(Path(tmp_path_factory.mktemp("v1-browser")))
    yield made
    made.server.stop()


def test_a_step_links_to_the_run_its_worker_started_and_back(browser, v1_server):
    server = v1_server.server
    raw = v1_client(server.url, v1_server.key).chat.completions.with_raw_response.create(
        model="recursive:single", messages=QUESTION
    )
    outer_id = int(raw.headers["X-Conductor-Run-Id"])
    context = browser.new_context(base_url=server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        log_in(page, server)
        page.goto(f"/runs/{outer_id}/")
        page.wait_for_selector("#step-list li[data-step-id]")
        step_id = page.get_attribute("#step-list li[data-step-id]", "data-step-id")
        page.goto(f"/runs/{outer_id}/#step-{step_id}")
        link = page.locator("#run-panel a.nested-run-link")
        link.wait_for()
        assert "succeeded" in link.inner_text()
        link.click()
        page.wait_for_url("**/runs/*/")
        back = page.locator("#run-called-from")
        assert back.inner_text() == f"called by step 0.0 of run {outer_id}"
        back.click()
        page.wait_for_selector("#run-panel a.nested-run-link")
        assert page.url.endswith(f"/runs/{outer_id}/#step-{step_id}")
    finally:
        context.close()
