"""Helpers shared by several benchmarks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from orchestrator.engine.types import Completion, Message, WorkerInfo

ROOT = Path(__file__).resolve().parent.parent


def run_bench_child(module: str, *args: str, env: dict[str, str], timeout: float = 300) -> dict:
    """Run ``python -m MODULE --child ARGS`` and return the JSON of its last output line.

    A benchmark measures in a child process when the figures need a Django configured
    differently (another database) from the driving process.
    """
    done = subprocess.run(
        [sys.executable, "-m", module, "--child", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


class AnsweringClient:
    """A worker that answers "Answer: 42" after ``latency`` seconds (at once for 0), with fixed
    usage and no cost: what is measured is the engine around it, not a model."""

    def __init__(self, model: str, latency: float = 0.0) -> None:
        self.model = model
        self.latency = latency

    async def complete(self, messages: Sequence[Message], *, timeout: float) -> Completion:
        if self.latency:
            await asyncio.sleep(self.latency)
        return Completion("Answer: 42", tokens_in=20, tokens_out=5, latency=self.latency)


def answering_workers(count: int, *, latency: float = 0.0) -> list[WorkerInfo]:
    """``count`` workers ``w0, w1, ...``, each an AnsweringClient."""
    return [
        WorkerInfo(
            name=f"w{i}",
            model=f"bench/m{i}",
            description="",
            client=AnsweringClient(f"bench/m{i}", latency),
        )
        for i in range(count)
    ]
