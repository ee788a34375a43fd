"""Writes: every change to runs, plans, steps and pools goes through a function here.

- ``runs``: ``run_create``, ``run_execute``, ``run_execute_async``, ``run_cancel``.
- ``recording``: ``RecordingObserver``, which stores each engine callback and publishes its event.
- ``execution``: ``run_enqueue`` (inline on the server's loop, or Celery).
- ``pools``: ``pool_sync_from_data`` (used by ``seed_demo``).
"""
