"""Batch replay in a real browser: from a filtered runs list, "Replay these…", a worker override,
then the batch page's progress bar moving until every replay finished, with the aggregate."""

from __future__ import annotations

import json
import re

import pytest

from harness.server import wait_for_js

pytestmark = pytest.mark.browser

BATCH_PAGE = re.compile(r"/batches/(\d+)/$")
RUNS = 4

# A pool of its own in the demo project: Unskilled never solves arithmetic (its runs end wrong,
# executed here at once), Skilled always does, a second per step (so the replays can be watched).
SOURCE_RUNS = f"""
import json
from orchestrator.models import Pool, Worker
from orchestrator.providers.simulator import load_suite
from orchestrator.services.runs import run_create, run_execute
demo = Pool.objects.filter(conductor_model__startswith="sim/").order_by("id").first()
pool = Pool.objects.create(
    project=demo.project, name="Batch browser test", conductor_params={{"latency": 0}}
)
for position, (name, skill, latency) in enumerate((("Unskilled", 0.0, 0), ("Skilled", 1.0, 1.0))):
    Worker.objects.create(
        pool=pool, position=position, name=name, model="sim/swift", description="x",
        params={{"latency": latency, "skills": {{"arithmetic": skill}}}},
    )
tasks = [task for task in load_suite() if task.domain == "arithmetic"][:{RUNS}]
for steps, task in enumerate(tasks, start=1):
    # 1 to 4 steps, all on Unskilled: their replays take 1 to 4 s, so they end one by one.
    options = {{"worker": 0}} if steps == 1 else {{"worker": 0, "rounds": steps - 1}}
    run = run_create(
        pool=pool, input=task.question, reference=task.reference,
        strategy="single" if steps == 1 else "reflection", strategy_options=options,
        enqueue=False,
    )
    run_execute(run_id=run.pk)
print(json.dumps(pool.pk))
"""


def test_batch_page_progress_moves_to_the_end_with_the_aggregate(slow_page, slow_server):
    page = slow_page
    pool_id = json.loads(slow_server.shell(SOURCE_RUNS).strip().splitlines()[-1])

    page.goto(f"/?pool={pool_id}")
    assert page.locator("#runs-table tbody tr").count() == RUNS
    page.click("#batch-replay-link")
    page.wait_for_url(re.compile(r"/batches/new/\?pool="))
    assert page.locator("#batch-matched").inner_text().startswith(f"{RUNS} runs match")

    page.fill("#batch-from", "Unskilled")
    page.fill("#batch-to", "Skilled")
    page.click("#batch-submit")
    page.wait_for_url(BATCH_PAGE)

    # Seen moving: part of the way there at some point, then at the end.
    seen: set[int] = set()
    wait_for_js(page, "document.getElementById('batch-progress').dataset.done !== undefined")
    for _ in range(600):
        done = int(page.evaluate("document.getElementById('batch-progress').dataset.done"))
        seen.add(done)
        if done == RUNS:
            break
        page.wait_for_timeout(50)
    assert RUNS in seen, seen
    assert seen - {0, RUNS}, f"the bar never stood between 0 and {RUNS}: {seen}"
    wait_for_js(page, "document.getElementById('batch-status').textContent === 'finished'")
    assert page.evaluate("document.getElementById('batch-progress').value") == RUNS
    assert page.locator("#batch-progress-text").inner_text().startswith(f"{RUNS} of {RUNS} done")

    assert page.locator('#batch-aggregate [data-figure="fixed"]').inner_text() == str(RUNS)
    assert page.locator('#batch-aggregate [data-figure="broken"]').inner_text() == "0"
    assert page.locator("#batch-compared").inner_text() == str(RUNS)
    links = page.locator("#batch-items .compare-link").evaluate_all(
        "links => links.map(link => link.getAttribute('href'))"
    )
    assert len(links) == RUNS
    assert all(re.fullmatch(r"/compare/\?runs=\d+,\d+", link) for link in links), links
    outcomes = page.locator("#batch-items td[data-outcome]").evaluate_all(
        "cells => cells.map(cell => cell.dataset.outcome)"
    )
    assert outcomes == ["wrong", "right"] * RUNS
