"""The simulated suite: the conductor against single workers, self-reflection and Mixture-of-Agents.

A thin use of ``manage.py experiment run``: in a child interpreter on a temporary SQLite file,
the bundled suite is a built-in dataset and each strategy an arm over the offline demo pool
(simulated workers, latency 0), every item × arm an ordinary stored run. First the conductor and
every single worker; then reflection (3 review rounds) with the best single worker, and MoA with
every other worker proposing and the best single worker aggregating. Per arm: accuracy (overall
and per domain), tokens per task (in + out, the conductor's own calls included; "of workers"
leaves those out), model calls and cost per task. Last, the conductor again with the compact
prompt (a pool whose ``conductor_prompt_style`` is "compact"). Run from the repository root:
``python -m bench.suite``. Ends with one JSON line.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench._support import run_bench_child

DOMAINS = ("arithmetic", "countdown", "code", "lookup")
COMPACT_POOL = "Offline demo, compact conductor prompt (simulated)"


def _experiment(arms: str, *extra: str) -> dict:
    from django.core.management import call_command

    out = io.StringIO()
    call_command(
        "experiment", "run", "--dataset", "suite", "--arms", arms, "--json", *extra, stdout=out
    )
    return json.loads(out.getvalue().strip().splitlines()[-1])


def _figures(row: dict) -> dict:
    return {
        "accuracy": row["accuracy"],
        "tokens_per_task": row["tokens_per_item"],
        "worker_tokens_per_task": row["worker_tokens_per_item"],
        "calls_per_task": row["calls_per_item"],
        "cost_per_task": row["cost_per_item"],
        "failed_runs": row["failed"],
        **{
            f"accuracy_{tag}": row["tags"][tag]["accuracy"] for tag in DOMAINS if tag in row["tags"]
        },
    }


def child() -> dict:
    import django

    django.setup()
    from django.core.management import call_command

    from orchestrator.providers.simulator import demo_pool
    from orchestrator.scoreboard import format_scoreboard
    from orchestrator.services.pools import pool_sync_from_data, project_get_or_create

    call_command("migrate", verbosity=0)
    project = project_get_or_create(name="Benchmark")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=0))
    workers = list(pool.workers.filter(enabled=True).order_by("position", "id"))
    started = time.perf_counter()
    first = _experiment(",".join(["conductor", *(f"single:{i}" for i in range(len(workers)))]))
    singles = {int(row["label"].split(":")[1]): row for row in first["scoreboard"]["arms"][1:]}
    best = max(singles, key=lambda index: (singles[index]["accuracy"], -index))
    second = _experiment(f"reflection:{best},moa:{best}")
    # The same conductor with the compact prompt (no worked examples), on a pool of its own.
    compact_pool = replace(
        demo_pool(latency=0), name=COMPACT_POOL, conductor_prompt_style="compact"
    )
    pool_sync_from_data(project=project, data=compact_pool)
    third = _experiment("conductor", "--pool", COMPACT_POOL)
    seconds = time.perf_counter() - started
    rows = {"conductor (sim)": _figures(first["scoreboard"]["arms"][0])}
    for index, row in singles.items():
        rows[f"single: {workers[index].name}"] = _figures(row)
    best_name = workers[best].name.split(" ")[0]
    reflection, moa = second["scoreboard"]["arms"]
    rows[f"reflection x3: {best_name}"] = _figures(reflection)
    rows[f"moa: {len(workers) - 1} + {best_name}"] = _figures(moa)
    rows["conductor, compact prompt (sim)"] = _figures(third["scoreboard"]["arms"][0])
    print(format_scoreboard(first["scoreboard"]), file=sys.stderr)
    print(format_scoreboard(second["scoreboard"]), file=sys.stderr)
    conductor, best_single = rows["conductor (sim)"], rows[f"single: {workers[best].name}"]
    moa_row = rows[f"moa: {len(workers) - 1} + {best_name}"]
    return {
        "benchmark": "suite",
        "tasks": first["scoreboard"]["arms"][0]["runs"],
        "strategies": rows,
        "conductor_minus_best_single_accuracy": round(
            conductor["accuracy"] - best_single["accuracy"], 4
        ),
        "conductor_tokens_over_moa_tokens": round(
            conductor["tokens_per_task"] / moa_row["tokens_per_task"], 3
        ),
        "compact_conductor_tokens_over_moa_tokens": round(
            rows["conductor, compact prompt (sim)"]["tokens_per_task"] / moa_row["tokens_per_task"],
            3,
        ),
        "conductor_cost_over_best_single_cost": round(
            conductor["cost_per_task"] / best_single["cost_per_task"], 3
        ),
        "seconds": round(seconds, 1),
    }


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        DJANGO_SETTINGS_MODULE="webui.settings",
        LOG_LEVEL="WARNING",
        CONDUCTOR_EXECUTION="inline",
        CONDUCTOR_SIM_LATENCY_SCALE="0",
    )
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as directory:
        env["SQLITE_PATH"] = str(Path(directory) / "suite.sqlite3")
        summary = run_bench_child("bench.suite", env=env, timeout=3600)
    print("Simulated suite, demo pool, latency 0 (an experiment per group of arms)\n")
    for name, figures in summary["strategies"].items():
        print(
            f"{name:<28} acc {figures['accuracy']:.3f}  tokens/task {figures['tokens_per_task']:>7.0f}"
            f"  of workers {figures['worker_tokens_per_task']:>7.0f}  calls {figures['calls_per_task']:.2f}"
            f"  cost ${figures['cost_per_task']:.6f}"
        )
    summary["load_average_1min"] = round(os.getloadavg()[0], 2)
    print()
    print(json.dumps(summary))


if __name__ == "__main__":
    if "--child" in sys.argv:
        print(json.dumps(child()))
    else:
        main()
