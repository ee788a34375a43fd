"""How fast two 500-step runs are compared: the API's server time and the page drawn in Chromium.

Method: two finished runs of 500 steps (5 rounds, each a step that fans out into chains of ten
and a last step reading the ends of twenty chains: ``bench.graph_render``'s synthetic run) are
written straight into a fresh SQLite database. Two pairs:

- ``replay``: the second run is the first with every tenth step's instruction and response
  rewritten (50 changed positions, 450 the same): a replay of an edit;
- ``unrelated``: every step of the second run has another instruction, worker and a response of
  about 60 other words (500 changed positions): the worst case for the word diffs.

A real Daphne server (the browser tests' ``LiveServer``, inline execution) serves them. For each
pair:

- ``selector_ms``: ``selectors.run_compare`` in this process (reads and diffs), median of 5;
- ``api_ms``: ``GET /api/compare/?runs=A,B`` over HTTP with a logged-in session, from request to
  the whole JSON body received, median of 5 (the first request, warming caches, is not counted);
- ``drawn_ms``: from navigation start of ``/compare/?runs=A,B`` until both graphs have drawn their
  first frame with the change marks (``#compare-page[data-state=ready]``), median of 3 fresh
  pages (``html_ms``, ``state_read_ms``, ``graphs_created_ms``: when the page had its HTML, had
  read its embedded state, had handed the second graph to Cytoscape; ``html_bytes``: the page's
  size); ``click_ms``: from then
  until a click on a changed node shows its word diff;
- ``run_page_drawn_ms``: the baseline in the same conditions, the first run alone on its run
  page until its graph is drawn (median of 3), and ``drawn_vs_run_page``, the ratio: on this
  shared machine the load moves every figure, the ratio much less.

Target: ``drawn_ms`` ≤ 1,000 ms. Run from the repository root: ``python -m bench.compare``. Ends
with one JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.graph_render import create_admin, create_synthetic_run, setup_django  # noqa: E402
from harness.server import (  # noqa: E402
    CHROMIUM_ARGS,
    CHROMIUM_PATH,
    LiveServer,
    browser_missing_reason,
    log_in,
)

STEPS = 500
ROUNDS = 5
TARGET_MS = 1000
SERVER_REPEATS = 5
VISITS = 3
SENTENCE = (
    "check the partial result against the question and report any step that disagrees with "
    "the given numbers then restate the value found so far in one short sentence"
)


def rewrite(run_id: int, *, every: int, unrelated: bool) -> int:
    """Change every ``every``-th step of a run (instruction and response; with ``unrelated``
    also its worker, and a longer response). Returns how many steps changed."""
    from orchestrator.models import Step

    steps = list(Step.objects.filter(run_id=run_id).order_by("round", "index"))
    changed = []
    for number, step in enumerate(steps):
        if number % every:
            continue
        if unrelated:
            step.instruction = f"Look again at part {step.index}: {' '.join(SENTENCE.split()[:12])}"
            step.worker_name = "Deep Thinker"
            words = SENTENCE.split()
            rotated = words[number % len(words) :] + words[: number % len(words)]
            step.response = " ".join(rotated * 2)
        else:
            step.instruction += ", and double-check it"
            step.response = f"Result of part **{step.index}**, checked twice."
        changed.append(step)
    Step.objects.bulk_update(changed, ["instruction", "worker_name", "response"], batch_size=500)
    return len(changed)


def time_selector(run_ids: list[int]) -> float:
    from orchestrator import selectors
    from orchestrator.models import Run

    timings = []
    for _ in range(SERVER_REPEATS):
        started = time.perf_counter()
        runs = list(Run.objects.select_related("pool").filter(pk__in=run_ids))
        runs.sort(key=lambda run: run_ids.index(run.pk))
        selectors.run_compare(runs=runs)
        timings.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(timings), 1)


def time_api(page, base_url: str, run_ids: list[int]) -> tuple[float, int]:
    url = f"{base_url}/api/compare/?runs={run_ids[0]},{run_ids[1]}"
    page.request.get(url)  # warm up
    timings = []
    size = 0
    for _ in range(SERVER_REPEATS):
        started = time.perf_counter()
        response = page.request.get(url)
        body = response.body()
        timings.append((time.perf_counter() - started) * 1000)
        if not response.ok:
            raise RuntimeError(f"GET {url} answered {response.status}")
        size = len(body)
    return round(statistics.median(timings), 1), size


def visit(page, base_url: str, run_ids: list[int]) -> dict[str, int]:
    started = time.perf_counter()
    page.goto(f"{base_url}/compare/?runs={run_ids[0]},{run_ids[1]}", wait_until="commit")
    page.wait_for_selector("#compare-page[data-state=ready]", timeout=120_000)
    drawn_ms = (time.perf_counter() - started) * 1000
    # Where the time went, from the page's own clock (ms since navigation start).
    timing = page.evaluate(
        """() => {
            const nav = performance.getEntriesByType("navigation")[0];
            const mark = (name) => performance.getEntriesByName(name).at(-1)?.startTime;
            return {html: nav.responseEnd, state_read: mark("compare-page:state-read"),
                    graphs_created: mark("run-page:graph-created"), bytes: nav.decodedBodySize};
        }"""
    )
    html_bytes = timing.pop("bytes")
    step_id = page.evaluate(
        "window.comparePage.rows.find((row) => row.change === 'changed').steps[1].id"
    )
    point = page.evaluate(f"window.comparePage.graphs[1].view.clientPositionOf({step_id})")
    clicked = time.perf_counter()
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector("#compare-panel:not([hidden]) .diff-text", timeout=60_000)
    click_ms = (time.perf_counter() - clicked) * 1000
    if "changed" not in (page.text_content("#compare-panel-title") or ""):
        raise RuntimeError("the click did not open the changed step")
    return {
        "drawn_ms": round(drawn_ms),
        "click_ms": round(click_ms),
        "html_bytes": html_bytes,
        **{f"{name}_ms": round(value) for name, value in timing.items() if value is not None},
    }


def visit_run_page(page, base_url: str, run_id: int) -> int:
    """The baseline, in the same conditions: one of the runs alone on its own page, navigation
    start until its graph is drawn."""
    started = time.perf_counter()
    page.goto(f"{base_url}/runs/{run_id}/", wait_until="commit")
    page.wait_for_selector("#run-graph[data-state=ready]", timeout=120_000)
    return round((time.perf_counter() - started) * 1000)


def main() -> int:
    reason = browser_missing_reason()
    if reason:
        print(json.dumps({"bench": "compare", "skipped": reason}))
        return 0
    directory = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    server = LiveServer(directory=directory)
    setup_django(server.db_path)
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    user = create_admin(username=server.admin_username, password=server.admin_password)
    pairs: dict[str, list[int]] = {}
    changed: dict[str, int] = {}
    for name, every, unrelated in (("replay", 10, False), ("unrelated", 1, True)):
        first = create_synthetic_run(user=user, steps=STEPS, rounds=ROUNDS)
        second = create_synthetic_run(user=user, steps=STEPS, rounds=ROUNDS)
        changed[name] = rewrite(second, every=every, unrelated=unrelated)
        pairs[name] = [first, second]

    from playwright.sync_api import sync_playwright

    results: dict[str, dict] = {}
    for name, run_ids in pairs.items():
        results[name] = {"changed": changed[name], "selector_ms": time_selector(run_ids)}
    server.start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            log_in(page, server)
            for name, run_ids in pairs.items():
                api_ms, size = time_api(page, server.url, run_ids)
                visits = []
                for _ in range(VISITS):
                    fresh = context.new_page()
                    visits.append(visit(fresh, server.url, run_ids))
                    fresh.close()
                visits.sort(key=lambda figures: figures["drawn_ms"])
                alone = []
                for _ in range(VISITS):
                    fresh = context.new_page()
                    alone.append(visit_run_page(fresh, server.url, run_ids[0]))
                    fresh.close()
                median = visits[len(visits) // 2]
                results[name].update(
                    api_ms=api_ms,
                    api_bytes=size,
                    **median,
                    run_page_drawn_ms=statistics.median(alone),
                    drawn_vs_run_page=round(median["drawn_ms"] / statistics.median(alone), 2),
                )
                print(f"{name}: {results[name]}", file=sys.stderr)
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    summary = {
        "bench": "compare",
        "steps_per_run": STEPS,
        **results,
        "target_drawn_ms": TARGET_MS,
        "meets_target": all(figures["drawn_ms"] <= TARGET_MS for figures in results.values()),
        # Other work on this two-core machine shows in every figure: say how busy it was.
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
