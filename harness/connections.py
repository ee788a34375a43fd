"""Counting a database's PostgreSQL connections while something runs, from ``pg_stat_activity``.

Each process under test sets ``PGAPPNAME`` (libpq reads it), so the counts come per kind of
process: the web servers' pools, the Celery workers. Shared by the production tests and the load
benchmark.
"""

from __future__ import annotations

import threading
from collections import Counter
from types import TracebackType
from typing import Self

WEB_APP_NAME = "conductor-web"
WORKER_APP_NAME = "conductor-worker"

_COUNT = """
SELECT coalesce(application_name, ''), count(*)
FROM pg_stat_activity
WHERE datname = %s AND pid <> pg_backend_pid()
GROUP BY 1
"""


class ConnectionSampler:
    """Samples the connections to ``database`` every ``interval`` seconds on a thread of its own
    (with a connection of its own, not counted); ``peak`` holds the highest count per
    application name, ``peak_app`` the highest sum of the web servers' and the workers',
    ``peak_total`` the highest sum over every connection to the database."""

    def __init__(self, *, conninfo: str, database: str, interval: float = 0.05) -> None:
        self.conninfo = conninfo
        self.database = database
        self.interval = interval
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        self.peak_app = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def sample(self, cursor) -> dict[str, int]:
        cursor.execute(_COUNT, [self.database])
        counts = {name: int(count) for name, count in cursor.fetchall()}
        for name, count in counts.items():
            self.peak[name] = max(self.peak[name], count)
        self.peak_total = max(self.peak_total, sum(counts.values()))
        app = counts.get(WEB_APP_NAME, 0) + counts.get(WORKER_APP_NAME, 0)
        self.peak_app = max(self.peak_app, app)
        self.samples += 1
        return counts

    def _loop(self) -> None:
        import psycopg

        try:
            with (
                psycopg.connect(self.conninfo, autocommit=True) as connection,
                connection.cursor() as cursor,
            ):
                while not self._stop.is_set():
                    self.sample(cursor)
                    self._stop.wait(self.interval)
        except BaseException as error:  # noqa: BLE001 - reported by stop()
            self._error = error

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._loop, name="pg-connections", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._error is not None:
            raise RuntimeError(f"sampling pg_stat_activity failed: {self._error!r}")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
