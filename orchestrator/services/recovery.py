"""Resuming inline runs that a stopped server left unfinished.

An inline run executes on its server's event loop and holds a leased claim on its row
(``services/ownership.py``). When that server stops (SIGTERM lets go of its runs at exit;
SIGKILL leaves their leases to lapse), nothing would ever execute them again. So every server
that executes inline looks, when it starts and every third of a lease afterwards, for unfinished
runs that no live execution holds, and starts them on its own loop. Each start claims the run
first, so with several servers on one database exactly one of them resumes it; the engine
resumes from what is stored, so no finished step's model is called again. A run that cannot
resume fails with the reason (its error, or the interruption limit).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import connections
from django.utils import timezone

from orchestrator.selectors import run_ids_unheld
from orchestrator.services.execution import inline_task, run_enqueue

logger = logging.getLogger(__name__)

_watcher: asyncio.Task[None] | None = None


def inline_recovery_start() -> asyncio.Task[None] | None:
    """Start looking for interrupted runs on the running loop (once per process; inline
    execution only). Returns the watching task, or None when execution is not inline."""
    global _watcher
    if settings.CONDUCTOR_EXECUTION != "inline":
        return None
    if _watcher is None or _watcher.done():
        _watcher = asyncio.get_running_loop().create_task(
            _watch_for_unheld_runs(), name="inline-run-recovery"
        )
    return _watcher


async def _watch_for_unheld_runs() -> None:
    interval = settings.CONDUCTOR_RUN_LEASE_SECONDS / 3
    # Its own database thread, as each inline run has: never waiting behind page requests.
    async with ThreadSensitiveContext():
        try:
            while True:
                try:
                    run_ids = await sync_to_async(_unheld_run_ids)()
                except Exception:  # the database is away; look again at the next beat
                    logger.warning("could not look for interrupted runs", exc_info=True)
                else:
                    for run_id in run_ids:
                        if inline_task(run_id) is None:
                            logger.info("resuming run %s: no live execution holds it", run_id)
                            run_enqueue(run_id=run_id)
                await asyncio.sleep(interval)
        finally:
            await asyncio.shield(sync_to_async(connections.close_all)())


def _unheld_run_ids() -> list[int]:
    lease = timedelta(seconds=settings.CONDUCTOR_RUN_LEASE_SECONDS)
    return run_ids_unheld(now=timezone.now(), queued_for=lease)


__all__ = ["inline_recovery_start"]
