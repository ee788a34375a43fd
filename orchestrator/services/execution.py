"""Where a run executes: inline on the server's own event loop, or on a Celery worker.

Inline runs are asyncio tasks on the loop that serves the site (Daphne's), with database work
through ``sync_to_async``. That is what makes live events work with the in-memory channel layer:
events published from ``sync_to_async`` code reach the consumers on the same loop, while events
published from a bare thread (with its own loop) never would.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.conf import settings

logger = logging.getLogger(__name__)

# The Celery task that executes a run (``orchestrator/tasks.py`` registers it under this name).
# Sent by name: the tasks call the services, so the services do not import the tasks.
RUN_EXECUTE_TASK = "orchestrator.tasks.run_execute_task"
# The Celery task that makes a batch's replays (``services/batches.py`` sends it).
BATCH_ADVANCE_TASK = "orchestrator.tasks.batch_advance_task"

# Tasks hold only weak references on their loop: keep each running inline run here, by run id.
_inline_runs: dict[int, asyncio.Task[None]] = {}
_inline_runs_lock = threading.Lock()


def run_enqueue(*, run_id: int) -> None:
    """Start executing a committed run with the configured backend (call it on commit)."""
    if settings.CONDUCTOR_EXECUTION == "celery":
        from celery import current_app  # the site's app (webui/celery.py) when Django runs

        current_app.send_task(RUN_EXECUTE_TASK, args=[run_id])
        return
    loop = _server_loop()
    if loop is None:
        # No server loop here (a shell, a WSGI server): run in a thread of its own. Live events
        # then reach only consumers behind a cross-process channel layer (Redis).
        logger.warning("run %s: no server event loop; executing it in a background thread", run_id)
        threading.Thread(target=_execute_in_thread, args=(run_id,), daemon=True).start()
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    # A fresh context: the run must not inherit the request's (asgiref marks the request's
    # thread executor as busy in a context variable; inheriting that would deadlock).
    if running is loop:
        contextvars.Context().run(_start_task, run_id)
    else:
        loop.call_soon_threadsafe(_start_task, run_id, context=contextvars.Context())


def run_stop_inline(*, run_id: int) -> None:
    """Cancel a run's inline task if it runs in this process (other backends stop on their own:
    the recording observer sees the cancelled status at its next callback)."""
    with _inline_runs_lock:
        task = _inline_runs.get(run_id)
    if task is None or task.done():
        return
    task.get_loop().call_soon_threadsafe(task.cancel)


def inline_task(run_id: int) -> asyncio.Task[None] | None:
    """The inline task executing a run in this process, if any (tests and shutdown wait on it)."""
    with _inline_runs_lock:
        return _inline_runs.get(run_id)


def server_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop serving this process, if any (other background work starts there too)."""
    return _server_loop()


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop serving this process, seen from async code on it or from a sync view that
    it runs through ``sync_to_async`` (where asgiref records the outer loop)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    local = SyncToAsync.threadlocal
    if getattr(local, "main_event_loop_pid", None) != os.getpid():
        return None
    loop = getattr(local, "main_event_loop", None)
    if loop is None or loop.is_closed() or not loop.is_running():
        return None
    return loop


def _start_task(run_id: int) -> None:
    task = asyncio.get_running_loop().create_task(_execute_inline(run_id), name=f"run-{run_id}")
    with _inline_runs_lock:
        _inline_runs[run_id] = task
    task.add_done_callback(lambda done: _forget(run_id, done))


async def _execute_inline(run_id: int) -> None:
    """Execute a run with a database thread of its own.

    Without a context of its own, the run's ``sync_to_async`` calls share the process's one
    thread-sensitive thread with every websocket consumer and every other inline run, so a step's
    write (and its live event) could wait behind a hundred clients loading their snapshots.
    """
    from django.db import connections

    from orchestrator.services.runs import run_execute_async

    async with ThreadSensitiveContext():
        try:
            await run_execute_async(run_id=run_id)
        finally:
            # The run's thread ends with the context: close its connection, not leave it to GC.
            await asyncio.shield(sync_to_async(connections.close_all)())


def _forget(run_id: int, task: asyncio.Task[None]) -> None:
    with _inline_runs_lock:
        if _inline_runs.get(run_id) is task:
            del _inline_runs[run_id]
    if not task.cancelled() and task.exception() is not None:
        logger.error("run %s failed", run_id, exc_info=task.exception())


def _execute_in_thread(run_id: int) -> None:
    from django.db import connections

    from orchestrator.services.runs import run_execute

    try:
        run_execute(run_id=run_id)
    except Exception:
        logger.exception("run %s failed", run_id)
    finally:
        connections.close_all()  # this thread's own connections only


# Experiments -------------------------------------------------------------------------------------

# The Celery task that executes a slice of an experiment (``orchestrator/tasks.py``).
EXPERIMENT_EXECUTE_TASK = "orchestrator.tasks.experiment_execute_task"
_inline_experiments: set[asyncio.Task[None]] = set()


def experiment_enqueue(*, experiment_id: int) -> None:
    """Start executing a committed experiment: ``CONDUCTOR_EXPERIMENT_SLICES`` Celery tasks that
    share its trials (any worker takes any), or, inline, one task on the server's loop running
    ``CONDUCTOR_EXPERIMENT_CONCURRENCY`` trials at a time (a thread when there is no loop)."""
    if settings.CONDUCTOR_EXECUTION == "celery":
        from celery import current_app

        for _ in range(settings.CONDUCTOR_EXPERIMENT_SLICES):
            current_app.send_task(EXPERIMENT_EXECUTE_TASK, args=[experiment_id])
        return
    loop = _server_loop()
    if loop is None:
        threading.Thread(target=_experiment_in_thread, args=(experiment_id,), daemon=True).start()
        return

    def start() -> None:
        task = asyncio.get_running_loop().create_task(
            _experiment_inline(experiment_id), name=f"experiment-{experiment_id}"
        )
        _inline_experiments.add(task)
        task.add_done_callback(_inline_experiments.discard)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        contextvars.Context().run(start)
    else:
        loop.call_soon_threadsafe(start, context=contextvars.Context())


async def _experiment_inline(experiment_id: int) -> None:
    from django.db import connections

    from orchestrator.services.experiments import experiment_execute_async

    async with ThreadSensitiveContext():
        try:
            await experiment_execute_async(
                experiment_id=experiment_id,
                concurrency=settings.CONDUCTOR_EXPERIMENT_CONCURRENCY,
            )
        except Exception:
            logger.exception("experiment %s failed", experiment_id)
        finally:
            await asyncio.shield(sync_to_async(connections.close_all)())


def _experiment_in_thread(experiment_id: int) -> None:
    from django.db import connections

    from orchestrator.services.experiments import experiment_execute

    try:
        experiment_execute(
            experiment_id=experiment_id, concurrency=settings.CONDUCTOR_EXPERIMENT_CONCURRENCY
        )
    except Exception:
        logger.exception("experiment %s failed", experiment_id)
    finally:
        connections.close_all()
