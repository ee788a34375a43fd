"""How long one code grading takes: the answer's and the tests' sandboxes, started together.

Method: the bundled suite's code tasks are graded with their right solutions (``grade_code``,
what a run's end calls), one after another, ``ROUNDS`` times over; the wall time of each grading is
measured with ``time.perf_counter`` and the median and p95 reported in milliseconds, beside the
start of one bare sandbox (``print(1)``) for scale. Then the same gradings four at a time, from four
threads, as four runs ending together on one server would (median and p95 per grading, and
gradings per second). Every grading must pass, or the benchmark fails. Needs bubblewrap and root.
Target: under 100 ms per grading.

Run from the repository root: ``python -m bench.code_grading``. Ends with one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestrator.engine.code_grading import grade_code
from orchestrator.engine.sandbox import run_python, sandbox_problem
from orchestrator.providers.simulator import load_suite

ROUNDS = 5
PARALLEL = 4
TARGET_MS = 100.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def timed_grading(solution: str, reference: str) -> float:
    started = time.perf_counter()
    verdict = grade_code(solution, reference)
    elapsed = (time.perf_counter() - started) * 1000
    if not verdict.passed:
        raise SystemExit(f"a right solution was graded wrong: {verdict.failure}")
    return elapsed


def main() -> None:
    problem = sandbox_problem()
    if problem:
        raise SystemExit(problem)
    tasks = [(task.solution, task.reference) for task in load_suite() if task.grader == "code"]
    bare = []
    for _ in range(20):
        started = time.perf_counter()
        run_python(script="print(1)")
        bare.append((time.perf_counter() - started) * 1000)
    serial = [timed_grading(*task) for _ in range(ROUNDS) for task in tasks]
    started = time.perf_counter()
    with ThreadPoolExecutor(PARALLEL) as pool:
        parallel = list(pool.map(lambda task: timed_grading(*task), tasks * ROUNDS))
    parallel_seconds = time.perf_counter() - started
    figures = {
        "gradings": len(serial),
        "load_1min": round(os.getloadavg()[0], 2),
        "bare_sandbox_ms_median": round(statistics.median(bare), 1),
        "grading_ms_median": round(statistics.median(serial), 1),
        "grading_ms_p95": round(percentile(serial, 0.95), 1),
        "parallel_grading_ms_median": round(statistics.median(parallel), 1),
        "parallel_grading_ms_p95": round(percentile(parallel, 0.95), 1),
        "parallel_gradings_per_second": round(len(parallel) / parallel_seconds, 1),
        "target_ms": TARGET_MS,
    }
    print(f"{len(tasks)} code tasks x {ROUNDS}: median {figures['grading_ms_median']} ms a grading")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
