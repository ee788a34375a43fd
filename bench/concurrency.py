"""Concurrency: four independent steps and a final step reading all of them, workers at 200 ms.

The critical path is two steps (2 x 200 ms); a scheduler that runs independent steps at the same
time finishes close to it. Prints wall time / critical path per trial and the median (target at
most 1.15). Run from the repository root: ``python -m bench.concurrency``. Ends with one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

from bench._support import answering_workers
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.types import (
    ALL,
    PlanRecord,
    RunSettings,
    StepSpec,
    WorkerInfo,
    Workflow,
)

LATENCY = 0.2
CRITICAL_PATH = 2 * LATENCY
TARGET_RATIO = 1.15
TRIALS = 5


class FanInStrategy:
    """Four independent solvers, then one step reading all of them."""

    name = "bench"
    max_rounds = 1

    async def plan(self, *, round, question, workers, settings, previous_answer):
        if round > 0:
            return None
        steps = [StepSpec(i, "Solve the question.", ()) for i in range(4)]
        steps.append(StepSpec(0, "Combine the answers above.", ALL))
        return PlanRecord(round=0, strategy=self.name, workflow=Workflow(tuple(steps)))


async def trial(workers: list[WorkerInfo]) -> float:
    started = time.perf_counter()
    result = await execute_run(
        question="What is 6 x 7?", strategy=FanInStrategy(), workers=workers, settings=RunSettings()
    )
    elapsed = time.perf_counter() - started
    assert result.status == "succeeded", result.error
    return elapsed / CRITICAL_PATH


def main() -> None:
    workers = answering_workers(4, latency=LATENCY)
    ratios = [asyncio.run(trial(workers)) for _ in range(TRIALS)]
    median = statistics.median(ratios)
    print("wall time / critical path per trial: " + ", ".join(f"{r:.3f}" for r in ratios))
    print(f"median {median:.3f} (target <= {TARGET_RATIO})")
    print(
        json.dumps(
            {
                "benchmark": "concurrency",
                "trials": TRIALS,
                "ratio_median": round(median, 3),
                "ratio_max": round(max(ratios), 3),
                "target_ratio": TARGET_RATIO,
                "ok": median <= TARGET_RATIO,
            }
        )
    )


if __name__ == "__main__":
    main()
