"""Make docs/screenshot-run.png: a real run of the conductor on the simulated pool, photographed.

    python scripts/screenshot.py [--output docs/screenshot-run.png] [--list-output PATH]

Starts the server the browser tests use (its own temporary SQLite file, seeded demo, inline
execution), asks a question of the simulator's suite with its reference answer (so it is
scored), opens the run's page while it runs, waits until the run has finished, and saves a PNG
of the page from headless Chromium. Nothing is drawn by hand.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from harness.server import (
    CHROMIUM_ARGS,
    CHROMIUM_PATH,
    RunMaker,
    browser_missing_reason,
    log_in,
    start_live_server,
)

# A countdown task of the simulator's suite: the conductor writes a workflow with fan-out.
DEFAULT_TASK = "countdown-001"
VIEWPORT = {"width": 1440, "height": 900}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "screenshot-run.png")
    parser.add_argument("--list-output", type=Path, help="also photograph the runs list")
    parser.add_argument("--task", default=DEFAULT_TASK, help="a task id of the simulator's suite")
    parser.add_argument("--strategy", default="conductor")
    args = parser.parse_args()

    missing = browser_missing_reason()
    if missing:
        print(f"cannot take the screenshot: {missing}", file=sys.stderr)
        return 1

    from playwright.sync_api import sync_playwright

    from orchestrator.providers.simulator.suite import load_suite

    task = next((t for t in load_suite() if t.id == args.task), None)
    if task is None:
        print(f"no task {args.task!r} in the simulator's suite", file=sys.stderr)
        return 1

    server = start_live_server(extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": "0.2"})
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
            page = context.new_page()
            page.set_default_timeout(30_000)
            log_in(page, server)
            runs = RunMaker(page, server)

            # A few earlier runs so the list has something to show besides the new one.
            if args.list_output:
                for question, strategy in (
                    ("What is the capital city of Poland?", "single"),
                    (
                        "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?",
                        "reflection",
                    ),
                ):
                    runs.wait(runs(question, strategy=strategy))

            # Created through the API, as the form does, with the reference so it is scored.
            run_id = runs(
                task.question, strategy=args.strategy, reference=task.reference, grader=task.grader
            )
            page.goto(f"{server.url}/runs/{run_id}/")
            final = runs.wait(run_id, timeout=120)
            print(f"run {run_id} {final.get('status')}: {str(final.get('answer', ''))[:80]!r}")

            # Reload so the page shows the finished run in full, then let the graph settle.
            page.reload()
            page.wait_for_load_state("networkidle")
            time.sleep(1.0)
            args.output.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.output))
            print(f"saved {args.output}")

            if args.list_output:
                page.goto(f"{server.url}/")
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(args.list_output))
                print(f"saved {args.list_output}")
            browser.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
