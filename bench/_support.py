"""Helpers shared by several benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
