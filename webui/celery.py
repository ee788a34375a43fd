"""The Celery application. Tasks live in orchestrator/tasks.py and take ids only.

Two things happen in every worker, so a deployment has nothing more to run or remember:

- The database pool is turned off when the worker starts: a worker process runs one task at a
  time and keeps one connection, so it holds one connection at most.
- The worker sweeps for runs left ``queued`` past ``CONDUCTOR_QUEUED_DEADLINE_SECONDS`` (their
  message was lost: Redis down when the run was created, a web process killed between commit
  and enqueue) and hands them to Celery again. Every worker ticks every
  ``CONDUCTOR_SWEEP_INTERVAL_SECONDS``; a short Redis lock lets one of them send the sweep task
  per interval.
"""

import logging
import os

from celery import Celery, bootsteps, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")

log = logging.getLogger(__name__)

app = Celery("conductor_studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["orchestrator"])

SWEEP_LOCK_KEY_PREFIX = "conductor:sweep-lock:"


@signals.celeryd_init.connect
def one_connection_per_worker_process(**kwargs) -> None:
    """In a worker, before it connects anywhere: no pool, one persistent connection per process.

    Celery would close the connection after every task (a new PostgreSQL backend per run, and
    for a moment two per process while the old one exits); instead each task starts and ends
    like a request: a connection that failed or is unusable is closed, a healthy one is kept.
    """
    from django.conf import settings

    for database in settings.DATABASES.values():
        database.get("OPTIONS", {}).pop("pool", None)
        database["CONN_MAX_AGE"] = None
        database["CONN_HEALTH_CHECKS"] = True
    # Celery's own closing is put off by CELERY_DB_REUSE_MAX (settings.py).
    signals.task_prerun.connect(_close_unusable_connections, weak=False)
    signals.task_postrun.connect(_close_unusable_connections, weak=False)


def _close_unusable_connections(**kwargs) -> None:
    from django.db import close_old_connections

    close_old_connections()


class QueuedRunSweep(bootsteps.StartStopStep):
    """Every interval, one worker of the deployment sends the task that re-enqueues lost runs."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs) -> None:
        super().__init__(worker, **kwargs)
        self.timer_entry = None
        self.redis = None

    def start(self, worker) -> None:
        from django.conf import settings

        interval = settings.CONDUCTOR_SWEEP_INTERVAL_SECONDS
        if interval > 0 and settings.REDIS_URL:
            import redis

            self.redis = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5
            )
            self.timer_entry = worker.timer.call_repeatedly(interval, self.tick, (interval,))

    def stop(self, worker) -> None:
        if self.timer_entry is not None:
            self.timer_entry.cancel()
            self.timer_entry = None

    def tick(self, interval: float) -> None:
        queue = app.conf.task_default_queue
        try:
            # Slightly shorter than the interval, so the next tick of some worker takes it again.
            taken = self.redis.set(
                f"{SWEEP_LOCK_KEY_PREFIX}{queue}", "1", nx=True, px=max(1, int(interval * 900))
            )
            if taken:
                # By name: the site's modules do not import the tasks.
                app.send_task("orchestrator.tasks.runs_requeue_stale_task")
        except Exception:  # Redis away: the next tick tries again
            log.warning("could not start the sweep for queued runs", exc_info=True)


app.steps["worker"].add(QueuedRunSweep)
