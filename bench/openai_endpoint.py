"""The OpenAI-compatible endpoint's overhead over a direct run, and 50 streaming clients at once.

Method: a real Daphne server (the browser tests' ``LiveServer``: inline execution, in-memory
channel layer, SQLite, the seeded demo pool) with the simulator at zero latency
(``CONDUCTOR_SIM_LATENCY_SCALE=0``), so what is timed is the platform, not the models.

1. Direct runs: SEQUENTIAL runs started one at a time with ``POST /api/runs/`` (token auth) and
   waited for; the run's own span is its stored ``finished_at - created_at``.
2. The same question over ``POST /v1/chat/completions``, one at a time, streamed (time to the
   first body byte, and to ``[DONE]``) and not streamed (time to the whole answer), with httpx.
   Overhead: the client's time to the last byte minus the direct runs' median span, and, per
   request, minus the span of the run it made (what the endpoint adds: HTTP, the key, creating
   the run, relaying its events).
3. CLIENTS concurrent streaming clients (one asyncio loop in this process, httpx), each making
   REQUESTS_EACH requests in a row: time to first byte and to ``[DONE]``, p50 and p95.

The clients share the machine's two cores with the server. Run from the repository root:
``python -m bench.openai_endpoint``. Ends with one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx

from harness.server import start_live_server  # noqa: E402

MODEL = "offline-demo-simulated"
QUESTION = "What is 17 * 23?"
SEQUENTIAL = int(os.environ.get("BENCH_OPENAI_SEQUENTIAL", "30"))
CLIENTS = int(os.environ.get("BENCH_OPENAI_CLIENTS", "50"))
REQUESTS_EACH = int(os.environ.get("BENCH_OPENAI_REQUESTS_EACH", "3"))


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict:
    return {"p50_ms": ms(statistics.median(values)), "p95_ms": ms(percentile(values, 0.95))}


def chat_body(stream: bool) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "stream": stream}


def direct_runs(client: httpx.Client, token: str, pool_id: int) -> list[int]:
    ids = []
    for _ in range(SEQUENTIAL):
        created = client.post(
            "/api/runs/",
            json={"input": QUESTION, "pool": pool_id},
            headers={"Authorization": f"Token {token}"},
        )
        created.raise_for_status()
        run_id = created.json()["id"]
        while True:
            status = client.get(f"/api/runs/{run_id}/", headers={"Authorization": f"Token {token}"})
            if status.json()["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.02)
        ids.append(run_id)
    return ids


def streamed_once(client: httpx.Client, key: str) -> tuple[float, float, int]:
    started = time.perf_counter()
    first = None
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json=chat_body(True),
        headers={"Authorization": f"Bearer {key}"},
    ) as response:
        response.raise_for_status()
        run_id = int(response.headers["X-Conductor-Run-Id"])
        body = b""
        for chunk in response.iter_raw():
            if first is None:
                first = time.perf_counter()
            body += chunk
    assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
    return first - started, time.perf_counter() - started, run_id


def whole_once(client: httpx.Client, key: str) -> float:
    started = time.perf_counter()
    response = client.post(
        "/v1/chat/completions", json=chat_body(False), headers={"Authorization": f"Bearer {key}"}
    )
    response.raise_for_status()
    return time.perf_counter() - started


async def concurrent(base_url: str, key: str) -> tuple[list[float], list[float], float]:
    firsts: list[float] = []
    lasts: list[float] = []
    limits = httpx.Limits(max_connections=CLIENTS + 5)
    async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as client:

        async def one_client() -> None:
            for _ in range(REQUESTS_EACH):
                started = time.perf_counter()
                first = None
                async with client.stream(
                    "POST",
                    "/v1/chat/completions",
                    json=chat_body(True),
                    headers={"Authorization": f"Bearer {key}"},
                ) as response:
                    response.raise_for_status()
                    async for _chunk in response.aiter_raw():
                        if first is None:
                            first = time.perf_counter()
                firsts.append(first - started)
                lasts.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(CLIENTS)))
        return firsts, lasts, time.perf_counter() - started


def run_spans(server, run_ids: list[int]) -> dict[int, float]:
    """Each run's stored span, ``finished_at - created_at``, by id."""
    output = server.shell(
        "from orchestrator.models import Run\n"
        f"for pk, start, end in Run.objects.filter(pk__in={run_ids!r}).values_list("
        "'pk', 'created_at', 'finished_at'):\n"
        "    print('SPAN', pk, (end - start).total_seconds())\n"
    )
    return {
        int(line.split()[1]): float(line.split()[2])
        for line in output.splitlines()
        if line.startswith("SPAN")
    }


def main() -> None:
    directory = Path(tempfile.mkdtemp(prefix="bench-openai-"))
    server = start_live_server(
        directory,
        extra_env={
            "CONDUCTOR_SIM_LATENCY_SCALE": "0",
            "CONDUCTOR_API_RATE_LIMIT": "1000000",
            "LOG_LEVEL": "WARNING",
        },
    )
    try:
        key = server.manage("api_key", "create", "admin", "--project", "default").stdout.split()[-1]
        token = server.manage("drf_create_token", "admin").stdout.split()[2]
        with httpx.Client(base_url=server.url, timeout=120) as client:
            pools = client.get("/api/pools/", headers={"Authorization": f"Token {token}"}).json()
            pool_id = next(p["id"] for p in pools if p["is_simulated"])
            for _ in range(3):  # warm up both paths
                streamed_once(client, key)
            direct_ids = direct_runs(client, token, pool_id)
            streamed = [streamed_once(client, key) for _ in range(SEQUENTIAL)]
            whole = [whole_once(client, key) for _ in range(SEQUENTIAL)]
        direct = list(run_spans(server, direct_ids).values())
        endpoint_spans = run_spans(server, [run_id for _, _, run_id in streamed])
        firsts, lasts, wall = asyncio.run(concurrent(server.url, key))
    finally:
        server.stop()

    direct_ms = statistics.median(direct)
    last_ms = statistics.median([last for _, last, _ in streamed])
    figures = {
        "bench": "openai_endpoint",
        "sequential": SEQUENTIAL,
        "direct_run_span_ms": ms(direct_ms),
        "endpoint_run_span_ms": ms(statistics.median(endpoint_spans.values())),
        "stream_first_byte_ms": ms(statistics.median([first for first, _, _ in streamed])),
        "stream_last_byte_ms": ms(last_ms),
        "whole_completion_ms": ms(statistics.median(whole)),
        "stream_overhead_vs_direct_ms": ms(last_ms - direct_ms),
        # Per request: the client's time to [DONE] minus its own run's span.
        "stream_overhead_vs_own_run_ms": ms(
            statistics.median([last - endpoint_spans[run_id] for _, last, run_id in streamed])
        ),
        "concurrent_clients": CLIENTS,
        "concurrent_requests": len(lasts),
        "concurrent_first_byte": summary(firsts),
        "concurrent_last_byte": summary(lasts),
        "concurrent_completions_per_s": round(len(lasts) / wall, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
