"""The per-run lease in Redis that a Celery delivery holds while it executes a run.

The Redis transport delivers a message again when it stays unacknowledged longer than the
visibility timeout, even while its worker is alive and still running it; the lease turns such a
second delivery away while the first worker lives, and lapses soon after that worker dies.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import uuid
from types import TracebackType
from typing import Self

log = logging.getLogger(__name__)

LEASE_KEY_PREFIX = "conductor:run-lease:"

# Renew the lease only if we still own it; release it only if we still own it.
_RENEW_SCRIPT = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE_SCRIPT = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


@functools.cache
def redis_client(url: str):
    """One client (and connection pool) per process; made lazily, so after a worker forks."""
    import redis  # only the Celery path needs it

    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)


class RunLease:
    """Exclusive right to execute one run, held in Redis and kept alive by a heartbeat thread.

    The lease lapses ``seconds`` after its holder stops renewing it (the process died), so a
    later delivery of the same run can take over. Use as a context manager after ``acquire()``.
    """

    def __init__(self, run_id: int, *, redis_url: str, seconds: float) -> None:
        self.key = f"{LEASE_KEY_PREFIX}{run_id}"
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self.milliseconds = max(1, int(seconds * 1000))
        self._client = redis_client(redis_url)
        self._stopped = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def acquire(self) -> bool:
        """Take the lease if nobody holds it; start renewing it. False if another holds it."""
        taken = bool(self._client.set(self.key, self.token, nx=True, px=self.milliseconds))
        if taken:
            self._heartbeat = threading.Thread(
                target=self._renew_until_stopped, name=f"lease {self.key}", daemon=True
            )
            self._heartbeat.start()
        return taken

    def _renew_until_stopped(self) -> None:
        interval = self.milliseconds / 3000
        while not self._stopped.wait(interval):
            try:
                renewed = self._client.eval(
                    _RENEW_SCRIPT, 1, self.key, self.token, self.milliseconds
                )
            except Exception:  # a Redis blip: try again at the next beat, the lease may survive it
                log.warning("could not renew %s", self.key, exc_info=True)
                continue
            if not renewed:
                # Lapsed (this process stalled longer than the lease) and maybe taken by another
                # worker: from here two executions may overlap; say so loudly.
                log.error("lost %s while executing; another worker may be running it", self.key)
                return

    def release(self) -> None:
        self._stopped.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        try:
            self._client.eval(_RELEASE_SCRIPT, 1, self.key, self.token)
        except Exception:  # it lapses on its own
            log.warning("could not release %s", self.key, exc_info=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
