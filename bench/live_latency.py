"""Live latency: from a step finishing on the server to a watching client's handler running.

Method: a real Daphne server (the browser tests' ``LiveServer``: inline execution, in-memory
channel layer, SQLite, the seeded simulated pool with workers slowed to about a second per step so
a run is watched while it goes). For each of RUNS runs, CLIENTS websocket clients (aiohttp, one
event loop in this process, logged in with the admin's session cookie) and one headless Chromium
on the run page watch the same run. For every ``step.finished`` event a client receives live
(not in the snapshot), latency = the client's clock when its handler runs minus the step's
``finished_at`` (set by the server when it records the result, before the write commits and the
event is sent). Everything runs on this machine, so both clocks are the same clock. In the
browser, the handler is the run page's own (``window.runPage.live.onEvent``), timed with
``Date.now()``.

The clients share the machine's two cores with the server, so the figures include their own
scheduling. Target: p95 at most 50 ms.

Run from the repository root: ``python -m bench.live_latency``. Ends with one JSON line.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._support import percentile

# A bench reuses the browser tests' server.
from harness.server import (
    CHROMIUM_ARGS,
    CHROMIUM_PATH,
    RunMaker,
    browser_missing_reason,
    log_in,
    start_live_server,
    wait_for_js,
)

CLIENTS = 100
RUNS = 6
QUESTIONS = (
    "What is 17 * 23 + 4?",
    "What is 12 * 12 - 4?",
    "What is 101 * 3 - 7?",
    "What is 9 + 10?",
)
TARGET_P95_MS = 50.0
LATENCY_SCALE = "1"
CONDUCTOR_SECONDS = 3.0

# Patches the run page's handler to time each live step.finished it handles.
BROWSER_PROBE = """() => {
  window.liveLatencies = [];
  const live = window.runPage.live;
  const handle = live.onEvent;
  live.onEvent = (event) => {
    if (event.type === "step.finished") {
      window.liveLatencies.push(Date.now() - Date.parse(event.step.finished_at));
    }
    handle(event);
  };
}"""


def finished_at(event: dict) -> float:
    return dt.datetime.fromisoformat(event["step"]["finished_at"]).timestamp()


async def watch(
    session,
    url: str,
    headers: dict,
    latencies: list[tuple[int, int, float]],
    connected: list[int],
    all_connected: threading.Event,
) -> bool:
    """One client: connect, skip the snapshot, time every live step.finished until run.finished."""
    async with session.ws_connect(url, headers=headers, max_msg_size=0) as socket:
        connected[0] += 1
        if connected[0] == CLIENTS:
            all_connected.set()
        async for message in socket:
            received = time.time()
            event = json.loads(message.data)
            if event["type"] == "step.finished":
                latencies.append(
                    (event["run"], event["seq"], (received - finished_at(event)) * 1000)
                )
            elif event["type"] == "run.finished":
                return True
            elif event["type"] == "snapshot" and event["state"]["run"].get("finished_at"):
                # On a busy machine the run may end before every client has connected.
                return True
    return False


async def watch_run(
    *,
    url: str,
    headers: dict,
    latencies: list[tuple[int, int, float]],
    all_connected: threading.Event,
) -> int:
    """CLIENTS clients on one run; returns how many saw the run finish."""
    import aiohttp

    connected = [0]
    async with aiohttp.ClientSession() as session:
        tasks = [
            watch(session, url, headers, latencies, connected, all_connected)
            for _ in range(CLIENTS)
        ]
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise RuntimeError(f"{len(failures)} clients failed, first: {failures[0]!r}")
    return sum(1 for r in results if r is True)


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"samples": 0}
    return {
        "samples": len(values),
        "median_ms": round(statistics.median(values), 1),
        "p95_ms": round(percentile(values, 0.95), 1),
        "max_ms": round(max(values), 1),
    }


def main() -> int:
    reason = browser_missing_reason()
    if reason:
        print(json.dumps({"bench": "live_latency", "skipped": reason}))
        return 0
    from playwright.sync_api import sync_playwright

    server = start_live_server(extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": LATENCY_SCALE})
    # The conductor takes CONDUCTOR_SECONDS to plan, so the clients and the page are watching
    # before the first step starts, even on a busy machine.
    server.shell(
        "from orchestrator.models import Pool\n"
        f"Pool.objects.update(conductor_params={{'latency': {CONDUCTOR_SECONDS}}})\n"
    )
    client_latencies: list[tuple[int, int, float]] = []  # (run, seq, ms)
    browser_latencies: list[float] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
            context = browser.new_context(base_url=server.url)
            page = context.new_page()
            log_in(page, server)
            session = next(c for c in context.cookies() if c["name"] == "sessionid")
            headers = {"Cookie": f"sessionid={session['value']}", "Origin": server.url}
            make_run = RunMaker(page, server)
            ws_url = server.url.replace("http://", "ws://")
            for number in range(RUNS):
                run_id = make_run(QUESTIONS[number % len(QUESTIONS)])
                all_connected = threading.Event()
                # The clients get an event loop of their own, so they read while the browser is
                # driven from this thread.
                clients = ThreadPoolExecutor(max_workers=1)
                watching = clients.submit(
                    asyncio.run,
                    watch_run(
                        url=f"{ws_url}/ws/runs/{run_id}/",
                        headers=headers,
                        latencies=client_latencies,
                        all_connected=all_connected,
                    ),
                )
                all_connected.wait(30)
                viewer = context.new_page()
                viewer.goto(f"/runs/{run_id}/")
                wait_for_js(
                    viewer,
                    # A boolean: a WebSocket object comes back as {}, which Python takes as false.
                    "!!(window.runPage && (window.runPage.live.socket || window.runPage.live.stopped))",
                )
                viewer.evaluate(BROWSER_PROBE)
                saw_the_end = watching.result(timeout=120)
                clients.shutdown()
                viewer.wait_for_selector("#live-indicator[data-state=finished]", timeout=60_000)
                browser_latencies += viewer.evaluate("window.liveLatencies")
                viewer.close()
                print(
                    f"run {run_id}: {saw_the_end} of {CLIENTS} clients saw it finish",
                    file=sys.stderr,
                )
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)
    clients = summary([ms for _, _, ms in client_latencies])
    # How much is the server reaching its first client, and how much the fan-out to the others.
    by_event: dict[tuple[int, int], list[float]] = {}
    for run_id, seq, ms in client_latencies:
        by_event.setdefault((run_id, seq), []).append(ms)
    first_client = [min(values) for values in by_event.values()]
    for (run_id, seq), values in sorted(by_event.items()):
        print(
            f"run {run_id} seq {seq}: first client {min(values):.1f} ms, last {max(values):.1f} ms",
            file=sys.stderr,
        )
    spread = [max(values) - min(values) for values in by_event.values()]
    result = {
        "bench": "live_latency",
        "clients": CLIENTS,
        "runs": RUNS,
        "websocket_clients": clients,
        "first_client_per_event": summary(first_client),
        "fan_out_spread_per_event": summary(spread),
        "browser_handler": summary(browser_latencies),
        "target_p95_ms": TARGET_P95_MS,
        "meets_target": clients.get("p95_ms", float("inf")) <= TARGET_P95_MS,
        # Other work on this two-core machine shows in every figure: say how busy it was.
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
