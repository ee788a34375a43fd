"""Replay against a fresh re-run: model calls and wall time of a replay that edits one step.

``python -m bench.replay`` fills a scratch SQLite database (a temporary file) in a child
process and, on simulated workers that take LATENCY seconds a call (``sim/...`` models; the
simulator sleeps for real), measures:

- a chain of N steps (the ``reflection`` strategy, each step reading the one before): a replay
  that edits step k's instruction, for k = 1, N/2 and N (1-based), against running the same
  question again from scratch; the replay runs N - k + 1 steps;
- a binary tree of 7 steps (4 leaves, 2 inner steps, a root; written by a scripted conductor,
  the benchmark's own stand-in, so the shape is fixed): a replay that edits a leaf, which runs
  the leaf, its parent and the root, against a fresh run (which also asks the conductor).

Each figure is the median of REPEATS. The wall time of a replay runs from ``replay_create`` to
its end (creation included); a fresh run's from ``run_create`` to its end. Reported per case:
model calls and seconds of each, and their ratios (replay / fresh). Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench._support import run_bench_child

CHAIN_STEPS = 8
LATENCY = 0.2
REPEATS = 3
QUESTION = "What is 17 * 23?"
TREE = (
    "```python\nmodel_id = [0, 1, 0, 1, 0, 1, 0]\n"
    'subtasks = ["Find the tens.", "Find the units.", "Find the carry.", "Check the digits.", '
    '"Join the first two.", "Join the last two.", "Combine into the answer."]\n'
    "access_list = [[], [], [], [], [0, 1], [2, 3], [4, 5]]\n```"
)


class _TreeConductor:
    """The benchmark's conductor: always writes TREE (no model behind it, no latency)."""

    model = "bench/tree-conductor"

    async def complete(self, messages: Sequence[dict], *, timeout: float):
        from orchestrator.engine.types import Completion

        return Completion(TREE, tokens_in=200, tokens_out=60)


def _measure() -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from orchestrator import providers
    from orchestrator.models import Pool, Project, Run, Step, Worker
    from orchestrator.services.replay import replay_create
    from orchestrator.services.runs import run_create, run_execute

    call_command("migrate", verbosity=0, interactive=False)
    real_make_client = providers.make_client

    def make_client(model, **kwargs):
        return (
            _TreeConductor() if model == _TreeConductor.model else real_make_client(model, **kwargs)
        )

    providers.make_client = make_client
    admin = get_user_model().objects.create_superuser("bench", password="bench-only")
    project = Project.objects.create(name="Bench", slug="bench")

    def pool(name: str, conductor: str) -> Pool:
        pool = Pool.objects.create(
            project=project,
            name=name,
            conductor_model=conductor,
            max_steps=20,
            max_rounds=1,
            token_budget=None,
            cost_budget=None,
        )
        for position, model in enumerate(("sim/swift", "sim/abacus")):
            Worker.objects.create(
                pool=pool,
                position=position,
                name=model,
                model=model,
                description="A simulated worker.",
                params={"latency": LATENCY, "seed": 0},
            )
        return pool

    def fresh(pool: Pool, **options) -> tuple[Run, float]:
        started = time.perf_counter()
        run = run_create(pool=pool, input=QUESTION, enqueue=False, **options)
        run_execute(run_id=run.pk)
        seconds = time.perf_counter() - started
        run.refresh_from_db()
        assert run.status == Run.Status.SUCCEEDED, run.error
        return run, seconds

    def replayed(source: Run, index: int) -> tuple[Run, float]:
        step = Step.objects.get(run=source, round=0, index=index)
        started = time.perf_counter()
        run = replay_create(
            source=source,
            actor=admin,
            enqueue=False,
            edits=[{"step": step.pk, "instruction": f"{step.instruction} Be brief."}],
        )
        run_execute(run_id=run.pk)
        seconds = time.perf_counter() - started
        run.refresh_from_db()
        assert run.status == Run.Status.SUCCEEDED, run.error
        return run, seconds

    def compare(make_fresh, make_replay) -> dict:
        fresh_calls, fresh_seconds, replay_calls, replay_seconds = [], [], [], []
        for _ in range(REPEATS):
            run, seconds = make_fresh()
            fresh_calls.append(run.model_calls)
            fresh_seconds.append(seconds)
            replay, seconds = make_replay(run)
            replay_calls.append(replay.model_calls)
            replay_seconds.append(seconds)
        figures = {
            "fresh_calls": statistics.median(fresh_calls),
            "replay_calls": statistics.median(replay_calls),
            "fresh_s": round(statistics.median(fresh_seconds), 3),
            "replay_s": round(statistics.median(replay_seconds), 3),
        }
        figures["calls_ratio"] = round(figures["replay_calls"] / figures["fresh_calls"], 3)
        figures["time_ratio"] = round(figures["replay_s"] / figures["fresh_s"], 3)
        return figures

    chain_pool = pool("Chain", "sim/conductor")
    chain_options = {"strategy": "reflection", "strategy_options": {"rounds": CHAIN_STEPS - 1}}
    results: dict = {"chain_steps": CHAIN_STEPS, "latency_s": LATENCY, "repeats": REPEATS}
    for k in (1, CHAIN_STEPS // 2, CHAIN_STEPS):
        results[f"chain_edit_step_{k}"] = compare(
            lambda: fresh(chain_pool, **chain_options),
            lambda source, k=k: replayed(source, k - 1),
        )
    tree_pool = pool("Tree", _TreeConductor.model)
    results["tree_edit_leaf"] = compare(
        lambda: fresh(tree_pool), lambda source: replayed(source, 0)
    )
    return results


def main() -> None:
    if "--child" in sys.argv:
        print(json.dumps(_measure()))
        return
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["CONDUCTOR_SIM_LATENCY_SCALE"] = "1"
    env["CONDUCTOR_EXECUTION"] = "inline"
    with tempfile.TemporaryDirectory() as directory:
        env["SQLITE_PATH"] = str(Path(directory) / "bench.sqlite3")
        figures = run_bench_child("bench.replay", env=env, timeout=900)
    figures["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
