"""The run snapshot of a big run: what a run page and the socket's first message cost to read.

``python -m bench.run_snapshot`` stores one run of 10,000 finished steps in a temporary SQLite
file (1% of them retried: three attempts, two failed, in ``attempt_log`` where the schema has
it), then reads ``selectors.run_snapshot`` (one query per table, the steps as tuples) again and
again: CPU time per read (median of repeats, ``time.process_time``) and the bytes of its JSON.
Prints one JSON line. The step count is ``BENCH_STEPS``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench._support import run_bench_child

STEPS = int(os.environ.get("BENCH_STEPS", "10000"))
RETRIED_EVERY = 100
REPEATS = 9
ATTEMPT_LOG = [
    {"attempt": 1, "offset": 0.0, "seconds": 0.4, "error": "provider said 429", "backoff": 0.5},
    {"attempt": 2, "offset": 0.9, "seconds": 0.4, "error": "timed out after 120s", "backoff": 1.0},
    {"attempt": 3, "offset": 2.3, "seconds": 0.6, "error": "", "backoff": 0.0},
]


def measure() -> dict:
    """Runs inside the child interpreter, against the SQLite file its environment names."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    from orchestrator import selectors
    from orchestrator.models import Plan, Pool, Project, Run, Step

    call_command("migrate", verbosity=0, interactive=False)
    project = Project.objects.create(name="Bench", slug="bench")
    pool = Pool.objects.create(project=project, name="Bench pool")
    now = timezone.now()
    run = Run.objects.create(
        project=project, pool=pool, input="Add it up", status="succeeded", step_count=STEPS
    )
    plan = Plan.objects.create(run=run, round=0, strategy="bench", workflow=[])
    has_log = any(field.name == "attempt_log" for field in Step._meta.get_fields())
    rows = []
    for index in range(STEPS):
        retried = index % RETRIED_EVERY == 0
        fields = {"attempt_log": ATTEMPT_LOG if retried else []} if has_log else {}
        rows.append(
            Step(
                run=run,
                plan=plan,
                round=index // 1000,
                index=index % 1000,
                instruction=f"Do part {index} of the work, then hand it on.",
                worker_index=index % 5,
                worker_name=f"w{index % 5}",
                model="bench/m",
                status="succeeded",
                tokens_in=120,
                tokens_out=40,
                cost=0.0001,
                latency=0.9,
                attempts=3 if retried else 1,
                error="provider said 429" if retried else "",
                started_at=now,
                finished_at=now,
                **fields,
            )
        )
    Step.objects.bulk_create(rows, batch_size=2000)

    cpu = []
    for _ in range(REPEATS):
        started = time.process_time()
        state = selectors.run_snapshot(run=run)
        cpu.append((time.process_time() - started) * 1000)
    payload = json.dumps(state, separators=(",", ":")).encode()
    return {
        "snapshot_cpu_ms": round(statistics.median(cpu[1:]), 1),  # the first warms caches
        "snapshot_bytes": len(payload),
        "bytes_per_step": round(len(payload) / STEPS, 1),
        "attempt_log": has_log,
    }


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(DJANGO_SETTINGS_MODULE="webui.settings", LOG_LEVEL="WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-run-snapshot-") as directory:
        env["SQLITE_PATH"] = str(Path(directory) / "bench.sqlite3")
        figures = {"steps": STEPS, "retried_every": RETRIED_EVERY, "repeats": REPEATS}
        figures |= run_bench_child("bench.run_snapshot", env=env, timeout=600)
    figures["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    if "--child" in sys.argv:
        print(json.dumps(measure()))
    else:
        main()
