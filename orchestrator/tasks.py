"""Celery tasks: they take ids, re-fetch, and call one service.

``run_execute_task`` is ``acks_late``: the broker keeps the message until the task returns, so a
worker that dies mid-run (SIGKILL, lost machine) has its run delivered again and resumed by
``run_execute``, which never calls a finished step's model again.

The Redis transport also delivers a message again when it stays unacknowledged longer than the
visibility timeout (``CONDUCTOR_VISIBILITY_TIMEOUT``), even if its worker is alive and still
running it. Two workers executing one run would call models twice and race on its rows, so the
task holds a short per-run lease in Redis while it executes, renewed by a heartbeat. A delivery
that finds the lease held by another worker neither runs nor waits: it asks to be retried once the
lease could have expired, so the run still finishes if the holder dies.

A delivery that takes the lease takes the run over in the database too (``services/ownership``):
the run's fencing token goes up, so a worker that stalled past its lease and wakes up later
cannot record anything more, and a run whose earlier workers all died holding it is failed
once that happened ``CONDUCTOR_RUN_MAX_INTERRUPTIONS`` times, instead of being delivered again
forever.
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

from celery import Task, shared_task
from django.conf import settings

from orchestrator.models import Run
from orchestrator.services.execution import RUN_EXECUTE_TASK

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
def _redis_client(url: str):
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
        self._client = _redis_client(redis_url)
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


@shared_task(
    bind=True,
    name=RUN_EXECUTE_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    max_retries=None,
)
def run_execute_task(self: Task, run_id: int) -> None:
    """Execute (or resume) run ``run_id``. Idempotent: a finished or missing run is a no-op."""
    from orchestrator.services.runs import run_execute  # the engine loads only when a run does

    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        log.warning("run %s no longer exists; nothing to execute", run_id)
        return
    if status in Run.FINISHED:
        return
    redis_url = settings.REDIS_URL
    if not redis_url:  # an in-process broker (tests, eager mode): there is no second worker
        run_execute(run_id=run_id)
        return
    lease_seconds = settings.CONDUCTOR_RUN_LEASE_SECONDS
    lease = RunLease(run_id, redis_url=redis_url, seconds=lease_seconds)
    if not lease.acquire():
        # Another live worker is executing it (this is a duplicate delivery). Look again once
        # its lease could have lapsed; a retry is a new message, so this one is acknowledged.
        log.info("run %s is being executed elsewhere; checking again in %ss", run_id, lease_seconds)
        raise self.retry(countdown=lease_seconds)
    with lease:
        # The Redis lease makes this delivery the run's only executor: take the run over (its
        # fence goes up, so a stalled earlier holder can no longer record anything).
        run_execute(run_id=run_id, executor=lease.token, exclusive=True)
