"""Starting a real Daphne subprocess on the production stack (PostgreSQL, Redis, Celery
execution); shared by the production tests and the load benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.server import free_port

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class DaphneProcess:
    """A Daphne subprocess serving ``webui.asgi`` on 127.0.0.1, in its own process group."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers (its database connections close with it)."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        except ProcessLookupError:
            pass


def spawn_daphne(
    *, env: dict[str, str], log_path: Path, port: int | None = None, timeout: float = 60
) -> DaphneProcess:
    """Start Daphne with ``env`` (DATABASE_URL, REDIS_URL, ...) and wait until it answers."""
    port = port or free_port()
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["webui.asgi:application"],
            cwd=ROOT,
            env={"PYTHONUNBUFFERED": "1", **env},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = DaphneProcess(process=process, port=port, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited at start:\n{server.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/accounts/login/", timeout=2) as answer:
                if answer.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    server.stop()
    raise TimeoutError(f"daphne did not answer within {timeout:g}s:\n{server.log()[-3000:]}")
