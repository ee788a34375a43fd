"""A real Conductor Studio server in a subprocess, for browser tests and scripts.

The server is Daphne with inline execution over its own SQLite file, migrated and seeded with
the demo project (simulated pool, admin user) the way ``make demo`` does it. The test process
never touches that database through the ORM: it talks to the server over HTTP, or runs a
management command against the same file with :meth:`LiveServer.manage`.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_PATH = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ADMIN_USERNAME = "admin"
DEMO_POOL_NAME = "Offline demo (simulated)"
# Simulated workers answer after a latency scaled by this: visible in the graph, small in tests.
SIM_LATENCY_SCALE = "0.05"
# Variables that would point the server at shared services instead of its own files.
_SERVICE_VARIABLES = ("DATABASE_URL", "REDIS_URL", "CONDUCTOR_EXECUTION")


def browser_missing_reason() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    if not Path(CHROMIUM_PATH).exists():
        return f"Chromium is not installed at {CHROMIUM_PATH} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install -e '.[test]')"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    """A Daphne subprocess over a SQLite file; ``restart()`` keeps the port and the database."""

    directory: Path
    port: int = field(default_factory=free_port)
    admin_username: str = ADMIN_USERNAME
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db_path(self) -> Path:
        return self.directory / "db.sqlite3"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SERVICE_VARIABLES}
        env.update(
            DJANGO_SETTINGS_MODULE="webui.settings",
            SQLITE_PATH=str(self.db_path),
            CONDUCTOR_EXECUTION="inline",
            CONDUCTOR_SIM_LATENCY_SCALE=SIM_LATENCY_SCALE,
            CONDUCTOR_BASE_URL=self.url,
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``manage.py ARGS`` against this server's database; raise with its output on failure."""
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            check=False,
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"manage.py {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def shell(self, code: str) -> str:
        """Run Python in ``manage.py shell`` against this server's database; returns its stdout."""
        return self.manage("shell", "-c", code).stdout

    def prepare(self) -> None:
        """Migrate, seed the demo, and give the admin a password this object knows."""
        self.manage("migrate", "--noinput")
        self.manage("seed_demo")
        self.shell(
            "from django.contrib.auth import get_user_model\n"
            f"user = get_user_model().objects.get(username={self.admin_username!r})\n"
            f"user.set_password({self.admin_password!r})\n"
            "user.save(update_fields=['password'])\n"
        )

    def start(self, timeout: float = 60) -> None:
        """Start Daphne and wait until it answers."""
        if self.process and self.process.poll() is None:
            return
        with open(self.log_path, "ab") as log:
            command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
            self.process = subprocess.Popen(
                [*command, "webui.asgi:application"],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the server (its database stays)."""
        if not self.process:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        """Stop and start again on the same port and database (open websockets drop)."""
        self.stop()
        self.start()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


def start_live_server(directory: Path | None = None, **kwargs) -> LiveServer:
    """A prepared, running server in ``directory`` (a new temporary one by default)."""
    server = LiveServer(
        directory=directory or Path(tempfile.mkdtemp(prefix="conductor-live-")), **kwargs
    )
    server.prepare()
    server.start()
    return server


def log_in(page, server: LiveServer) -> None:
    """Log in through the login form, as a person would."""
    page.goto(f"{server.url}/accounts/login/")
    page.fill("#id_username", server.admin_username)
    page.fill("#id_password", server.admin_password)
    with page.expect_navigation():
        page.click("button[type=submit]")
    if "/accounts/login/" in page.url:
        raise RuntimeError("logging in failed: still on the login page")


def wait_for_js(page, expression: str, timeout: float = 30_000, every: float = 0.05) -> object:
    """Poll a JavaScript expression until it is truthy; returns its value.

    Use this instead of ``page.wait_for_function``: Playwright builds that predicate with
    ``new Function`` inside the page, which the site's Content-Security-Policy refuses (no
    'unsafe-eval'), while ``page.evaluate`` goes through the debugging protocol and is allowed.
    """
    deadline = time.monotonic() + timeout / 1000
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"still falsy after {timeout:.0f} ms: {expression}")
        time.sleep(every)


def csrf_token(context) -> str:
    """The CSRF cookie of a logged-in browser context, for API calls made with its session."""
    for cookie in context.cookies():
        if cookie["name"] == "csrftoken":
            return cookie["value"]
    raise RuntimeError("no csrftoken cookie in this browser context")


def pick_pool_id(api_pools: object) -> int:
    """The demo pool from a ``GET /api/pools/`` answer (list or paginated); failing that, the
    first simulated pool, then the first pool."""
    pools = api_pools.get("results", []) if isinstance(api_pools, dict) else list(api_pools)
    if not pools:
        raise RuntimeError("GET /api/pools/ lists no pool")
    for wanted in (
        lambda pool: pool.get("name") == DEMO_POOL_NAME,
        lambda pool: pool.get("is_simulated"),
    ):
        for pool in pools:
            if wanted(pool):
                return pool["id"]
    return pools[0]["id"]


FINISHED_STATUSES = ("succeeded", "failed", "cancelled")


class RunMaker:
    """Creates runs through the API with a logged-in page's session; ``wait()`` waits for the end."""

    def __init__(self, page, server: LiveServer):
        self.page = page
        self.server = server
        self._pool_id: int | None = None

    def default_pool_id(self) -> int:
        if self._pool_id is None:
            response = self.page.request.get(f"{self.server.url}/api/pools/")
            if not response.ok:
                raise RuntimeError(
                    f"GET /api/pools/ answered {response.status}: {response.text()[:500]}"
                )
            self._pool_id = pick_pool_id(response.json())
        return self._pool_id

    def __call__(
        self, input: str, strategy: str = "conductor", pool: int | None = None, **extra
    ) -> int:
        payload = {
            "input": input,
            "strategy": strategy,
            "pool": pool if pool is not None else self.default_pool_id(),
            **extra,
        }
        response = self.page.request.post(
            f"{self.server.url}/api/runs/",
            data=payload,
            headers={
                "X-CSRFToken": csrf_token(self.page.context),
                "Referer": self.server.url + "/",
            },
        )
        if response.status != 201:
            raise RuntimeError(
                f"POST /api/runs/ answered {response.status}: {response.text()[:500]}"
            )
        return int(response.json()["id"])

    def get(self, run_id: int) -> dict:
        response = self.page.request.get(f"{self.server.url}/api/runs/{run_id}/")
        if not response.ok:
            raise RuntimeError(f"GET /api/runs/{run_id}/ answered {response.status}")
        return response.json()

    def wait(self, run_id: int, timeout: float = 60) -> dict:
        """Poll the API until the run has finished; returns its last state."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if run.get("status") in FINISHED_STATUSES:
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {run.get('status')} after {timeout:.0f} s")
            time.sleep(0.2)
