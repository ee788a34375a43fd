"""The simulated suite: the conductor against single workers, self-reflection and Mixture-of-Agents.

Every strategy answers every task of the bundled suite on the offline demo pool (simulated
workers, latency 0) through the same scheduler. Per strategy: accuracy (overall and per domain),
tokens per task (in + out, the conductor's own calls included), model calls per task and cost per
task; "of workers" leaves out the conductor's own calls (its prompt, with worked examples, is
most of its tokens). Reflection (3 review rounds) uses the best single worker; MoA has every other worker propose
and the best single worker aggregate. Run from the repository root: ``python -m bench.suite``.
Ends with one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from orchestrator.engine.grading import extract_answer, grade
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.strategies import build_strategy
from orchestrator.engine.types import RunResult, RunSettings, Strategy, WorkerInfo
from orchestrator.providers import make_client, worker_info
from orchestrator.providers.simulator import DOMAINS, Task, demo_pool, load_suite

SETTINGS = RunSettings()  # the embedded defaults: 5 steps, 2 rounds, fine access


@dataclass(slots=True)
class Tally:
    """Sums over the tasks one strategy answered."""

    tasks: int = 0
    correct: float = 0.0
    tokens: int = 0
    worker_tokens: int = 0
    calls: int = 0
    cost: float = 0.0
    failed: int = 0
    by_domain: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def figures(self) -> dict[str, float]:
        return {
            "accuracy": round(self.correct / self.tasks, 4),
            "tokens_per_task": round(self.tokens / self.tasks, 1),
            "worker_tokens_per_task": round(self.worker_tokens / self.tasks, 1),
            "calls_per_task": round(self.calls / self.tasks, 2),
            "cost_per_task": round(self.cost / self.tasks, 7),
            "failed_runs": self.failed,
            **{
                f"accuracy_{domain}": round(sum(scores) / len(scores), 4)
                for domain, scores in sorted(self.by_domain.items())
            },
        }


def pool_workers() -> list[WorkerInfo]:
    return [worker_info(worker) for worker in demo_pool(latency=0).workers]


async def answer_all(
    strategy: Strategy, workers: list[WorkerInfo], tasks: tuple[Task, ...]
) -> list[RunResult]:
    return [
        await execute_run(
            question=task.question, strategy=strategy, workers=workers, settings=SETTINGS
        )
        for task in tasks
    ]


def score_all(tasks: tuple[Task, ...], results: list[RunResult], cache: dict) -> Tally:
    """Grade every final answer; code answers run in subprocesses, two at a time, cached."""

    def score(pair: tuple[Task, RunResult]) -> float:
        task, result = pair
        if result.status != "succeeded":
            return 0.0
        answer = extract_answer(result.answer, kind=task.grader)
        key = (answer, task.reference, task.grader)
        if key not in cache:
            cache[key] = grade(answer, task.reference, task.grader)
        return cache[key]

    with ThreadPoolExecutor(max_workers=2) as executor:
        scores = list(executor.map(score, zip(tasks, results, strict=True)))
    tally = Tally()
    for task, result, value in zip(tasks, results, scores, strict=True):
        tally.tasks += 1
        tally.correct += value
        tally.tokens += result.totals.tokens_in + result.totals.tokens_out
        tally.worker_tokens += sum(step.tokens_in + step.tokens_out for step in result.steps)
        tally.calls += result.totals.model_calls
        tally.cost += result.totals.cost
        tally.failed += result.status != "succeeded"
        tally.by_domain[task.domain].append(value)
    return tally


def print_table(rows: dict[str, dict[str, float]]) -> None:
    domains = [f"accuracy_{d}" for d in DOMAINS]
    header = f"{'strategy':<26} {'acc':>6} " + " ".join(f"{d[:5]:>6}" for d in DOMAINS)
    header += f" {'tokens/task':>11} {'of workers':>10} {'calls/task':>10} {'cost/task $':>12}"
    print(header)
    print("-" * len(header))
    for name, figures in rows.items():
        print(
            f"{name:<26} {figures['accuracy']:>6.3f} "
            + " ".join(f"{figures[d]:>6.3f}" for d in domains)
            + f" {figures['tokens_per_task']:>11.0f} {figures['worker_tokens_per_task']:>10.0f}"
            + f" {figures['calls_per_task']:>10.2f}"
            + f" {figures['cost_per_task']:>12.6f}"
        )


async def main() -> None:
    os.environ["CONDUCTOR_SIM_LATENCY_SCALE"] = "0"
    started = time.perf_counter()
    tasks = load_suite()
    workers = pool_workers()
    pool = demo_pool(latency=0)
    cache: dict = {}
    rows: dict[str, dict[str, float]] = {}

    conductor = make_client(pool.conductor_model, params=pool.conductor_params)
    rows["conductor (sim)"] = score_all(
        tasks,
        await answer_all(build_strategy("conductor", conductor=conductor), workers, tasks),
        cache,
    ).figures()

    singles: dict[int, float] = {}
    for index, worker in enumerate(workers):
        strategy = build_strategy("single", options={"worker": index})
        figures = score_all(tasks, await answer_all(strategy, workers, tasks), cache).figures()
        rows[f"single: {worker.name}"] = figures
        singles[index] = figures["accuracy"]
    best = max(singles, key=lambda index: (singles[index], -index))
    best_name = workers[best].name.split(" ")[0]

    reflection = build_strategy("reflection", options={"worker": best, "rounds": 3})
    rows[f"reflection x3: {best_name}"] = score_all(
        tasks, await answer_all(reflection, workers, tasks), cache
    ).figures()

    proposers = [index for index in range(len(workers)) if index != best]
    moa = build_strategy("moa", options={"proposers": proposers, "aggregator": best})
    rows[f"moa: {len(proposers)} + {best_name}"] = score_all(
        tasks, await answer_all(moa, workers, tasks), cache
    ).figures()

    print(
        f"Simulated suite: {len(tasks)} tasks, demo pool of {len(workers)} simulated workers, latency 0\n"
    )
    print_table(rows)
    conductor_row = rows["conductor (sim)"]
    best_single = rows[f"single: {workers[best].name}"]
    moa_row = rows[f"moa: {len(proposers)} + {best_name}"]
    summary = {
        "benchmark": "suite",
        "tasks": len(tasks),
        "strategies": rows,
        "conductor_minus_best_single_accuracy": round(
            conductor_row["accuracy"] - best_single["accuracy"], 4
        ),
        "conductor_tokens_over_moa_tokens": round(
            conductor_row["tokens_per_task"] / moa_row["tokens_per_task"], 3
        ),
        "conductor_cost_over_best_single_cost": round(
            conductor_row["cost_per_task"] / best_single["cost_per_task"], 3
        ),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print()
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
