"""Starting a real `celery worker` subprocess; shared by the production tests and the Celery
throughput benchmark, so both exercise the worker the same way."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spawn_celery_worker(
    *, concurrency: int, queue: str, name: str, env: dict[str, str], log_path: Path
) -> subprocess.Popen[bytes]:
    """Start a prefork worker consuming only ``queue``, logging to ``log_path``.

    It gets a process group of its own so that killing the group also kills its pool
    children; gossip, mingle and heartbeat are off because nothing here needs them and they
    slow the start.
    """
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "webui",
        "worker",
        "-P",
        "prefork",
        "-c",
        str(concurrency),
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-Q",
        queue,
        "-n",
        name,
        "--loglevel",
        "INFO",
    ]
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_until_ready(process: subprocess.Popen[bytes], log_path: Path, timeout: float) -> None:
    """Return once the worker logs " ready."; raise if it exits first or takes over ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = log_path.read_text(errors="replace")
        if " ready." in log:
            return
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited early:\n{log[-3000:]}")
        time.sleep(0.1)
    log = log_path.read_text(errors="replace")
    raise TimeoutError(f"celery worker not ready after {timeout:g}s:\n{log[-3000:]}")
