"""Wall time of ``python manage.py check``, and whether it imported litellm.

Startup must not pay for litellm (seconds to import); only a model call loads it. Method: one
warm-up run (fills the page cache and __pycache__), then the median of 5 runs of
``python manage.py check`` as subprocesses, on the embedded defaults (no DATABASE_URL or
REDIS_URL). One more run under ``-X importtime`` lists what was imported, and the slowest
top-level imports are printed.

Run from the repository root: ``python -m bench.check_time``. Ends with one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The bench measures what the startup tests guard, with the same definitions.
from harness.imports import HEAVY, embedded_env, modules_imported

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5
TARGET_SECONDS = 1.5


def check_once(*extra: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *extra, "manage.py", "check"],
        check=False,
        cwd=ROOT,
        env=embedded_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"manage.py check failed:\n{done.stderr[-2000:]}")
    return seconds, done


def import_times(stderr: str) -> dict[str, int]:
    """Top-level packages and their cumulative import time in microseconds (-X importtime)."""
    cumulative: dict[str, int] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative_us, name = line[len("import time:") :].split("|")
        if name.startswith(" ") and not name.startswith("  "):  # top level: one space of indent
            with contextlib.suppress(ValueError):  # the header line
                cumulative[name.strip()] = int(cumulative_us)
    return cumulative


def main() -> None:
    check_once()  # warm-up
    times = [check_once()[0] for _ in range(RUNS)]
    median = statistics.median(times)
    _, traced = check_once("-X", "importtime")
    imported = modules_imported(traced.stderr)
    heavy = sorted({name.split(".")[0] for name in imported if name.split(".")[0] in HEAVY})
    slowest = sorted(import_times(traced.stderr).items(), key=lambda item: -item[1])[:8]

    print(
        f"manage.py check: median {median:.3f} s of {RUNS} (min {min(times):.3f}, "
        f"max {max(times):.3f}); target < {TARGET_SECONDS} s"
    )
    print("slowest top-level imports: " + ", ".join(f"{n} {us / 1e3:.0f} ms" for n, us in slowest))
    print(f"heavy modules imported: {heavy or 'none'}")
    print(
        json.dumps(
            {
                "benchmark": "check_time",
                "runs": RUNS,
                "median_seconds": round(median, 3),
                "min_seconds": round(min(times), 3),
                "max_seconds": round(max(times), 3),
                "litellm_imported": "litellm" in heavy,
                "heavy_imported": heavy,
                "target_seconds": TARGET_SECONDS,
                "ok": median < TARGET_SECONDS and not heavy,
            }
        )
    )


if __name__ == "__main__":
    main()
