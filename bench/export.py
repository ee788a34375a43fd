"""Exports of 100,000 runs: training decisions (JSON lines) and the runs list's CSV, per second
and in memory.

``python -m bench.export`` fills a scratch SQLite database (a temporary file) with RUNS conductor
runs (``BENCH_EXPORT_RUNS`` shrinks it), each with a plan of realistic shape (a 1.6 KB system
prompt and a user message; one run in ten has a first output that did not parse, so two
decisions), then, in a fresh interpreter, writes every decision to a file with the code
``manage.py export_trajectories`` and ``GET /api/export/trajectories.jsonl`` share
(``orchestrator.trajectories.trajectory_lines``). Reported: lines per second, megabytes written,
and the process's resident memory above its size before the export, sampled after 10% of the
lines and at the end (flat means constant memory), plus the peak (``ru_maxrss``).
Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench._support import django_setup, run_bench_child

RUNS = int(os.environ.get("BENCH_EXPORT_RUNS", "100000"))
BATCH = 5000
SYSTEM_PROMPT = (
    "You are the conductor of a team of language models. You do not answer questions yourself: "
    "for each question you write a short workflow, a list of steps. "
) * 12


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def fill() -> dict:
    django_setup()
    from django.core.management import call_command
    from django.db import transaction

    from orchestrator.models import Plan, Pool, Project, Run, Worker

    call_command("migrate", verbosity=0, interactive=False)
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("bench-superuser", password="unused-in-bench")
    project = Project.objects.create(name="Bench", slug="bench")
    pool = Pool.objects.create(project=project, name="Pool")
    Worker.objects.create(pool=pool, name="w", model="sim/math", description="math")
    rng = random.Random(7)
    workflow = [
        {"worker": 0, "instruction": "Solve it step by step.", "access": []},
        {"worker": 1, "instruction": "Check the answer above.", "access": "all"},
    ]
    raw = (
        'model_id = [0, 1]\nsubtasks = ["Solve it step by step.", "Check it."]\n'
        'access_list = [[], ["all"]]'
    )
    started = time.perf_counter()
    for start in range(0, RUNS, BATCH):
        with transaction.atomic():
            runs = Run.objects.bulk_create(
                Run(
                    project=project,
                    pool=pool,
                    strategy="conductor",
                    status="succeeded",
                    input=f"Question {i}: what is {i} * 7?",
                    answer=f"Answer: {i * 7}",
                    reference=str(i * 7),
                    grader="numeric",
                    score=rng.choice((0.0, 1.0)),
                )
                for i in range(start, min(start + BATCH, RUNS))
            )
            plans = []
            for run in runs:
                user = {
                    "role": "user",
                    "content": (
                        "## Workers\nModel 0: math\nModel 1: checker\n## Question\n"
                        f"{run.input}\n## Your workflow\nAt most 5 steps."
                    ),
                }
                messages = [{"role": "system", "content": SYSTEM_PROMPT}, user]
                attempts = [
                    {"raw": raw, "error": "", "tokens_in": 700, "tokens_out": 60, "latency": 0.1}
                ]
                if rng.random() < 0.1:
                    messages += [
                        {"role": "assistant", "content": "model_id = [0"},
                        {"role": "user", "content": "Unclosed list: write it again."},
                    ]
                    attempts.insert(0, {"raw": "model_id = [0", "error": "unclosed list"})
                plans.append(
                    Plan(
                        run=run,
                        round=0,
                        strategy="conductor",
                        messages=messages,
                        attempts=attempts,
                        workflow=workflow,
                    )
                )
            Plan.objects.bulk_create(plans)
    return {"fill_s": round(time.perf_counter() - started, 1)}


def export() -> dict:
    django_setup()
    from django.db import connection

    from orchestrator.models import Run
    from orchestrator.trajectories import trajectory_lines

    connection.ensure_connection()
    baseline = _rss_mb()
    total_runs = Run.objects.count()
    expected = total_runs  # at least one decision per run
    lines = written = 0
    at_tenth = None
    started = time.perf_counter()
    with tempfile.TemporaryFile("w", encoding="utf-8") as out:
        for line in trajectory_lines(runs=Run.objects.all(), partial_credit=0.5):
            out.write(line)
            lines += 1
            written += len(line)
            if at_tenth is None and lines >= expected // 10:
                at_tenth = _rss_mb() - baseline
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # KiB on Linux
    return {
        "runs": total_runs,
        "lines": lines,
        "seconds": round(seconds, 1),
        "lines_per_s": round(lines / seconds),
        "written_mb": round(written / 1e6, 1),
        "rss_before_mb": round(baseline, 1),
        "rss_growth_at_10pct_mb": round(at_tenth or 0.0, 1),
        "rss_growth_at_end_mb": round(_rss_mb() - baseline, 1),
        "peak_rss_mb": round(peak, 1),
    }


def export_runs_csv() -> dict:
    django_setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from orchestrator import selectors
    from orchestrator.run_export import csv_lines, export_rows

    connection.ensure_connection()
    user = get_user_model().objects.get(username="bench-superuser")
    baseline = _rss_mb()
    runs = selectors.run_list(user=user)
    expected = RUNS
    lines = written = 0
    at_tenth = None
    started = time.perf_counter()
    with tempfile.TemporaryFile("w", encoding="utf-8") as out:
        for line in csv_lines(export_rows(runs=runs)):
            out.write(line)
            lines += 1
            written += len(line)
            if at_tenth is None and lines >= expected // 10:
                at_tenth = _rss_mb() - baseline
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    return {
        "runs_csv_rows": lines - 1,
        "runs_csv_seconds": round(seconds, 1),
        "runs_csv_rows_per_s": round((lines - 1) / seconds),
        "runs_csv_written_mb": round(written / 1e6, 1),
        "runs_csv_rss_growth_at_10pct_mb": round(at_tenth or 0.0, 1),
        "runs_csv_rss_growth_at_end_mb": round(_rss_mb() - baseline, 1),
        "runs_csv_peak_rss_mb": round(peak, 1),
    }


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        DJANGO_SETTINGS_MODULE="webui.settings", LOG_LEVEL="WARNING", CONDUCTOR_EXECUTION="inline"
    )
    with tempfile.TemporaryDirectory(prefix="bench-export-") as directory:
        env["SQLITE_PATH"] = str(Path(directory) / "bench.sqlite3")
        figures = {"bench": "export", "backend": "sqlite"}
        figures.update(run_bench_child("bench.export", "fill", env=env, timeout=900))
        figures.update(run_bench_child("bench.export", "export", env=env, timeout=900))
        figures.update(run_bench_child("bench.export", "runs_csv", env=env, timeout=900))
    figures["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    if "--child" in sys.argv:
        child = {"fill": fill, "export": export, "runs_csv": export_runs_csv}[sys.argv[-1]]
        print(json.dumps(child()))
    else:
        main()
