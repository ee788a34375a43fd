"""The runs list in a real browser: start a run, the failed filter, keyboard navigation."""

from __future__ import annotations

import json
import re
import uuid

import pytest

pytestmark = pytest.mark.browser

RUN_PAGE = re.compile(r"/runs/(\d+)/$")


def stored_runs(live_server, *, token: str, count: int, status: str) -> list[int]:
    """Store ``count`` runs whose input carries ``token`` straight in the server's database,
    oldest first, and return their ids: for list tests that need many runs without waiting
    for their executions."""
    code = f"""
import json
from orchestrator.models import Pool, Run
pool = Pool.objects.filter(conductor_model__startswith="sim/").order_by("id").first()
ids = []
for i in range({count}):
    run = Run.objects.create(
        project=pool.project, pool=pool, input=f"{token} question {{i}}",
        status={status!r}, error="stored by the test" if {status!r} == "failed" else "",
    )
    ids.append(run.pk)
print(json.dumps(ids))
"""
    return json.loads(live_server.shell(code).strip().splitlines()[-1])


def row_ids(page) -> list[int]:
    return [
        int(i)
        for i in page.locator("#runs-table tbody tr").evaluate_all(
            "rows => rows.map(row => row.dataset.runId)"
        )
    ]


def selected_id(page) -> int:
    return int(
        page.locator('#runs-table tbody tr[aria-current="true"]').get_attribute("data-run-id")
    )


def test_start_a_run_from_the_form_and_land_on_its_page(browser_page, live_server_url, make_run):
    page = browser_page
    question = f"What is 17 * 23 + 4? ({uuid.uuid4().hex[:6]})"
    page.goto(f"{live_server_url}/")
    assert "simulated" in page.locator("#new-run-pool option:checked").inner_text().lower()
    assert page.locator("#new-run-pool-sim").is_visible()

    page.fill("#new-run-input", question)
    page.select_option("#new-run-strategy", "conductor")
    page.click("#new-run-submit")
    page.wait_for_url(RUN_PAGE)

    run_id = int(RUN_PAGE.search(page.url).group(1))
    assert question in page.content()
    assert make_run.wait(run_id)["status"] in ("succeeded", "failed")
    page.goto(f"{live_server_url}/?q={question[-7:-1]}")
    assert row_ids(page) == [run_id]


def test_a_rejected_field_is_named_next_to_it(browser_page, live_server_url):
    page = browser_page
    page.goto(f"{live_server_url}/")
    page.fill("#new-run-input", "What is 2 + 2?")
    # A strategy the server does not know: the 400 answer names the field.
    page.eval_on_selector(
        "#new-run-strategy",
        "select => { select.add(new Option('no-such-strategy', 'no-such-strategy'));"
        " select.value = 'no-such-strategy'; }",
    )
    page.click("#new-run-submit")
    error = page.locator("#new-run-strategy-error")
    error.wait_for(state="visible")
    assert error.inner_text().strip()
    assert page.locator("#new-run-strategy").get_attribute("aria-invalid") == "true"
    assert page.url == f"{live_server_url}/"

    page.fill("#new-run-input", "   ")
    page.click("#new-run-submit")
    assert page.locator("#new-run-input-error").inner_text().strip()


@pytest.fixture(scope="module")
def timing_out_pool(live_server) -> int:
    """A simulated pool whose models always exceed its step timeout: its runs fail for real."""
    code = """
import dataclasses
from orchestrator.models import Pool
from orchestrator.providers.simulator import demo_pool
from orchestrator.services.pools import pool_sync_from_data
demo = Pool.objects.filter(conductor_model__startswith="sim/").order_by("id").first()
data = dataclasses.replace(demo_pool(latency=2.0), name="Always too slow (simulated)")
pool, _ = pool_sync_from_data(project=demo.project, data=data)
pool.step_timeout = 0.01
pool.save(update_fields=["step_timeout"])
print(pool.pk)
"""
    return int(live_server.shell(code).strip().splitlines()[-1])


def test_failed_filter_shows_only_failed_runs(
    browser_page, live_server_url, make_run, timing_out_pool
):
    token = uuid.uuid4().hex[:8]
    # One after the other: concurrent runs on SQLite can hit "database is locked".
    succeeded = make_run(f"{token}: What is the capital city of Poland?", strategy="single")
    assert make_run.wait(succeeded)["status"] == "succeeded"
    failed = make_run(f"{token}: What is the capital city of Poland?", pool=timing_out_pool)
    assert make_run.wait(failed)["status"] == "failed"

    page = browser_page
    page.goto(f"{live_server_url}/?q={token}")
    assert row_ids(page) == [failed, succeeded]

    page.click("#quick-failed")
    page.wait_for_url(re.compile(r"status=failed"))
    assert f"q={token}" in page.url  # the quick filter keeps the others
    assert row_ids(page) == [failed]

    page.goto(f"{live_server_url}/")
    page.click("#quick-failed")
    page.wait_for_url(re.compile(r"status=failed"))
    statuses = page.locator("#runs-table tbody tr").evaluate_all(
        "rows => rows.map(row => row.dataset.status)"
    )
    assert failed in row_ids(page) and succeeded not in row_ids(page)
    assert set(statuses) == {"failed"}


def test_j_k_and_enter_follow_the_filter_across_pages(browser_page, live_server, live_server_url):
    token = uuid.uuid4().hex[:8]
    stored = stored_runs(live_server, token=token, count=52, status="succeeded")
    newest_first = list(reversed(stored))

    page = browser_page
    page.goto(f"{live_server_url}/?q={token}")
    assert row_ids(page) == newest_first[:50]
    assert selected_id(page) == newest_first[0]

    page.keyboard.press("j")
    page.keyboard.press("j")
    assert selected_id(page) == newest_first[2]
    page.keyboard.press("k")
    assert selected_id(page) == newest_first[1]

    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf"/runs/{newest_first[1]}/$"))

    # Moving past the last row opens the next page of the same filter.
    page.goto(f"{live_server_url}/?q={token}")
    for _ in range(49):
        page.keyboard.press("j")
    assert selected_id(page) == newest_first[49]
    with page.expect_navigation():
        page.keyboard.press("j")
    assert f"q={token}" in page.url and "page=2" in page.url
    assert row_ids(page) == newest_first[50:]
    assert selected_id(page) == newest_first[50]
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf"/runs/{newest_first[50]}/$"))

    # Typing in a field is typing, and Enter on a button presses it: neither navigates rows.
    page.goto(f"{live_server_url}/?q={token}")
    page.type("#id_worker", "jj")
    assert selected_id(page) == newest_first[0]
    page.fill("#id_worker", "")
    page.focus("#run-filters button[type=submit]")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url.startswith(f"{live_server_url}/?") and f"q={token}" in page.url
