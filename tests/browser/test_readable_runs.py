"""Readable runs in a real browser: right or wrong in the list and the header, the answer itself,
a suite question scored without a reference, the live list and its worker filter."""

from __future__ import annotations

import re
import uuid

import pytest

from harness.server import wait_for_js

pytestmark = pytest.mark.browser

RUN_PAGE = re.compile(r"/runs/(\d+)/$")
TURKEY = "What is the capital city of Turkey?"


def wait_until_finished(page, timeout: float = 60_000) -> None:
    page.wait_for_selector("#live-indicator[data-state=finished]", timeout=timeout)


def test_a_wrong_answer_shows_as_wrong_in_the_list_and_the_header(browser_page, make_run):
    page = browser_page
    # Whatever the simulated worker answers, it is not this reference.
    run_id = make_run(TURKEY, strategy="single", reference="Izmir", grader="exact")
    run = make_run.wait(run_id)
    assert run["status"] == "succeeded" and run["verdict"] == "wrong"

    page.goto("/")
    row = page.locator(f'#runs-table tr[data-run-id="{run_id}"]')
    assert row.locator(".verdict").inner_text().strip() == "wrong"
    assert "verdict-wrong" in row.locator(".verdict").get_attribute("class")
    # The answer itself, not the start of the raw response; the full response one click away.
    shown = row.locator(".answer-shown").inner_text().strip()
    assert shown == run["answer_shown"] and not shown.startswith("[simulated")
    assert not row.locator(".response-text").is_visible()
    row.locator(".full-response summary").click()
    assert row.locator(".response-text").is_visible()
    assert row.locator(".response-text").inner_text().startswith("[simulated")

    page.goto("/?verdict=wrong")
    assert page.locator(f'#runs-table tr[data-run-id="{run_id}"]').count() == 1
    assert set(
        page.locator("#runs-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.verdict)"
        )
    ) == {"wrong"}

    page.goto(f"/runs/{run_id}/")
    assert page.inner_text("#run-verdict").strip() == "wrong"
    assert page.inner_text("#run-answer").strip() == run["answer_shown"]
    assert not page.locator("#run-response-body").is_visible()
    page.click("#run-response summary")
    assert page.locator("#run-response-body").is_visible()


def test_a_suite_question_typed_into_the_form_is_scored(browser_page):
    page = browser_page
    page.goto("/")
    page.fill("#new-run-input", TURKEY)
    page.select_option("#new-run-strategy", "single")
    page.click("#new-run-submit")
    page.wait_for_url(RUN_PAGE)
    wait_until_finished(page)
    assert page.inner_text("#run-verdict").strip() in ("right", "wrong")
    assert page.inner_text("#run-reference").strip() == "Ankara"
    assert "bundled suite" in page.inner_text("#run-reference-source")
    # The final node of the graph says it too.
    verdict = page.inner_text("#run-verdict").strip()
    assert wait_for_js(page, "window.runPage.graph.finalVerdict()") == verdict


def test_a_reference_typed_into_the_form_scores_the_run(browser_page):
    page = browser_page
    page.goto("/")
    page.fill("#new-run-input", f"Which city is the capital of Turkey? ({uuid.uuid4().hex[:6]})")
    page.click("#new-run-grading summary")
    page.fill("#new-run-reference", "Ankara")
    page.select_option("#new-run-grader", "exact")
    page.select_option("#new-run-strategy", "single")
    page.click("#new-run-submit")
    page.wait_for_url(RUN_PAGE)
    wait_until_finished(page)
    assert page.inner_text("#run-reference").strip() == "Ankara"
    assert page.inner_text("#run-verdict").strip() in ("right", "wrong")


def test_a_run_started_through_the_api_appears_in_an_open_list(browser_page, make_run):
    page = browser_page
    page.goto("/")
    page.wait_for_selector("#runs-table")
    run_id = make_run(
        f"What is the capital city of Turkey? ({uuid.uuid4().hex[:6]})", strategy="single"
    )
    row = page.locator(f'#runs-table tr[data-run-id="{run_id}"]')
    row.wait_for(timeout=10_000)
    assert page.locator("#runs-table tbody tr").first.get_attribute("data-run-id") == str(run_id)
    # Its end shows too, without a reload.
    page.wait_for_selector(
        f'#runs-table tr[data-run-id="{run_id}"][data-status="succeeded"]', timeout=30_000
    )
    assert row.locator(".verdict").inner_text().strip() == "unscored"


def test_the_worker_filter_finds_a_worker_by_its_model_string(browser_page, make_run):
    page = browser_page
    pools = page.request.get("/api/pools/").json()
    pool = next(
        p
        for p in (pools.get("results", pools) if isinstance(pools, dict) else pools)
        if p["id"] == make_run.default_pool_id()
    )
    worker = pool["workers"][0]
    run_id = make_run(TURKEY, strategy="single", strategy_options={"worker": 0})
    make_run.wait(run_id)
    model = worker["model"]  # e.g. sim/summit: not the display name
    assert model.lower() not in worker["name"].lower()
    page.goto("/")
    page.fill("#id_worker", model.upper())
    page.click("#run-filters button[type=submit]")
    page.wait_for_url(re.compile(r"worker="))
    ids = page.locator("#runs-table tbody tr").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.runId))"
    )
    assert run_id in ids
