"""Engine overhead: wall time per step of the scheduler with zero-latency in-process workers.

10,000 steps in all: 1,000 runs of a typical 5-step workflow (three independent solvers, a
verifier reading all of them, a final step reading the verifier), then one run of 10 rounds of 500
steps with wide fan-out. The workers answer at once and cost nothing, so what is measured is the
engine itself: scheduling, context assembly, records, retries bookkeeping, the null observer.

Run from the repository root: ``python -m bench.engine_overhead``. Ends with one JSON line.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time

from bench._support import answering_workers
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.types import (
    ALL,
    PlanRecord,
    RunSettings,
    StepSpec,
    Workflow,
)

TARGET_MICROSECONDS = 100.0
SMALL_RUNS = 1_000
BIG_ROUNDS = 10
BIG_STEPS_PER_ROUND = 500


class RepeatingStrategy:
    """Hands out the same workflow for ``rounds`` rounds, then stops."""

    name = "bench"

    def __init__(self, workflow: Workflow, rounds: int) -> None:
        self.workflow = workflow
        self.rounds = rounds
        self.max_rounds = rounds

    async def plan(self, *, round, question, workers, settings, previous_answer):
        if round >= self.rounds:
            return None
        return PlanRecord(round=round, strategy=self.name, workflow=self.workflow)


def typical_workflow() -> Workflow:
    return Workflow(
        (
            StepSpec(0, "Solve the question.", ()),
            StepSpec(1, "Solve the question.", ()),
            StepSpec(2, "Solve the question.", ()),
            StepSpec(3, "Verify the answers above.", ALL),
            StepSpec(0, "Give the final answer.", (3,)),
        )
    )


def wide_workflow(size: int) -> Workflow:
    """Groups of ten: a hub reading the previous group's last step, eight steps reading the
    hub, and a step combining those eight. Edges grow linearly with steps."""
    steps: list[StepSpec] = []
    while len(steps) + 10 <= size:
        hub = len(steps)
        steps.append(StepSpec(hub % 4, "Plan the next part.", (hub - 1,) if hub else ()))
        steps += [StepSpec(i % 4, f"Work on part {i}.", (hub,)) for i in range(8)]
        steps.append(StepSpec(1, "Combine the parts.", tuple(range(hub + 1, hub + 9))))
    return Workflow(tuple(steps))


async def measure() -> dict[str, float]:
    workers = answering_workers(4)
    settings = RunSettings(max_steps=BIG_STEPS_PER_ROUND, max_rounds=BIG_ROUNDS)

    small = RepeatingStrategy(typical_workflow(), rounds=1)
    started = time.perf_counter()
    for _ in range(SMALL_RUNS):
        result = await execute_run(
            question="What is 6 x 7?", strategy=small, workers=workers, settings=settings
        )
        assert result.status == "succeeded", result.error
    small_seconds = time.perf_counter() - started
    small_steps = SMALL_RUNS * 5

    big = RepeatingStrategy(wide_workflow(BIG_STEPS_PER_ROUND), rounds=BIG_ROUNDS)
    started = time.perf_counter()
    result = await execute_run(
        question="What is 6 x 7?", strategy=big, workers=workers, settings=settings
    )
    big_seconds = time.perf_counter() - started
    assert result.status == "succeeded", result.error
    big_steps = len(result.steps)

    return {
        "small_runs_us_per_step": small_seconds / small_steps * 1e6,
        "big_run_us_per_step": big_seconds / big_steps * 1e6,
        "steps": small_steps + big_steps,
        "seconds": small_seconds + big_seconds,
    }


def main() -> None:
    gc.collect()
    figures = asyncio.run(measure())
    per_step = figures["seconds"] / figures["steps"] * 1e6
    print(f"{SMALL_RUNS} runs of 5 steps: {figures['small_runs_us_per_step']:.1f} us/step")
    print(
        f"1 run, {BIG_ROUNDS} rounds x {BIG_STEPS_PER_ROUND} steps: "
        f"{figures['big_run_us_per_step']:.1f} us/step"
    )
    print(
        f"all {figures['steps']} steps: {per_step:.1f} us/step (target <= {TARGET_MICROSECONDS:g})"
    )
    print(
        json.dumps(
            {
                "benchmark": "engine_overhead",
                "steps": figures["steps"],
                "us_per_step": round(per_step, 1),
                "small_runs_us_per_step": round(figures["small_runs_us_per_step"], 1),
                "big_run_us_per_step": round(figures["big_run_us_per_step"], 1),
                "target_us_per_step": TARGET_MICROSECONDS,
                "ok": per_step <= TARGET_MICROSECONDS,
            }
        )
    )


if __name__ == "__main__":
    main()
