"""The new-run form says which limit a question broke, next to the question, and starts nothing."""

from __future__ import annotations


def test_a_question_over_the_size_limit_is_named_next_to_it(browser_page, live_server_url):
    page = browser_page
    page.goto(f"{live_server_url}/")
    newest = f"{live_server_url}/api/runs/?page_size=1"
    before = [run["id"] for run in page.request.get(newest).json()["results"]]

    page.fill("#new-run-input", "x" * (100 * 1024 + 1))
    page.click("#new-run-submit")

    error = page.locator("#new-run-input-error")
    error.wait_for(state="visible")
    assert "the limit is 102,400 bytes (100 KB)" in error.inner_text()
    assert page.locator("#new-run-input").get_attribute("aria-invalid") == "true"
    assert page.url == f"{live_server_url}/"
    assert [run["id"] for run in page.request.get(newest).json()["results"]] == before
