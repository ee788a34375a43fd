"""Make the screenshots in docs/: real runs of the simulated pool, photographed at three sizes.

    python scripts/screenshot.py [--output-dir docs] [--task countdown-001]

Starts the server the browser tests use (its own temporary SQLite file, seeded demo, inline
execution), asks a few questions of the simulator's suite (scored against the suite), one of them
answered wrong on purpose (a reference the answer cannot match), waits until they have finished,
and saves PNGs from headless Chromium: the run page at 1440×900 (with a step's details open, also
``screenshot-run.png`` for the README), 1024×700 and 390×844, and the runs list at 1440×900 and
390×844. Nothing is drawn by hand.
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
SIZES = {"1440": (1440, 900), "1024": (1024, 700), "390": (390, 844)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "docs")
    parser.add_argument("--task", default=DEFAULT_TASK, help="a task id of the simulator's suite")
    parser.add_argument("--strategy", default="conductor")
    args = parser.parse_args()

    missing = browser_missing_reason()
    if missing:
        print(f"cannot take the screenshots: {missing}", file=sys.stderr)
        return 1

    from playwright.sync_api import sync_playwright

    from orchestrator.providers.simulator.suite import load_suite

    task = next((t for t in load_suite() if t.id == args.task), None)
    if task is None:
        print(f"no task {args.task!r} in the simulator's suite", file=sys.stderr)
        return 1

    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    server = start_live_server(extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": "0.2"})
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)

            def page_at(size: str):
                width, height = SIZES[size]
                context = browser.new_context(
                    viewport={"width": width, "height": height}, device_scale_factor=1
                )
                page = context.new_page()
                page.set_default_timeout(30_000)
                log_in(page, server)
                return page

            page = page_at("1440")
            runs = RunMaker(page, server)
            # Earlier runs, so the list shows every verdict: suite questions are scored by
            # themselves; the Turkey one gets a reference its answer cannot match (wrong).
            for question, strategy, extra in (
                ("What is the capital city of Poland?", "single", {}),
                ("What is the capital city of Turkey?", "single", {"reference": "Izmir"}),
                ("Tell me a story about a conductor.", "single", {}),
                (
                    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. "
                    "How many cookies are left?",
                    "reflection",
                    {},
                ),
            ):
                runs.wait(runs(question, strategy=strategy, **extra))
            run_id = runs(task.question, strategy=args.strategy)
            final = runs.wait(run_id, timeout=120)
            print(
                f"run {run_id} {final.get('status')} {final.get('verdict')}: {final.get('answer_shown')!r}"
            )

            def shoot(page, name: str, path: str) -> None:
                page.goto(f"{server.url}{path}")
                page.wait_for_load_state("networkidle")
                time.sleep(1.0)
                target = out / name
                page.screenshot(path=str(target))
                print(f"saved {target}")

            shoot(page, "screenshot-list-1440.png", "/")
            steps = runs.get(run_id)["steps"]
            middle = steps[len(steps) // 2]["id"] if steps else None
            shoot(
                page,
                "screenshot-run.png",
                f"/runs/{run_id}/" + (f"#step-{middle}" if middle else ""),
            )
            page.context.close()
            for size in ("1024", "390"):
                page = page_at(size)
                shoot(page, f"screenshot-run-{size}.png", f"/runs/{run_id}/")
                if size == "390":
                    shoot(page, "screenshot-list-390.png", "/")
                page.context.close()
            browser.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
