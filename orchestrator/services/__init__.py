"""Writes: every change to runs, plans, steps and pools goes through a function here.

- ``runs``: ``run_create``, ``run_execute``, ``run_execute_async``, ``run_cancel``.
- ``recording``: ``RecordingObserver``, the engine's observer: each callback stored by
  ``recorder.RunRecorder`` (one transaction per callback, or per several taken together), its
  events sent in order after the commit.
- ``ending``: ``run_fail`` and closing a run's open steps, whatever ends it.
- ``grading``: grading a final answer, and whether code can be graded here.
- ``execution``: ``run_enqueue`` (inline on the server's loop, or the Celery task sent by name).
- ``ownership``: ``run_claim``, ``run_claim_renew``, ``run_claim_release`` (who executes a run,
  its lease and fencing token, the interruption limit).
- ``recovery``: ``inline_recovery_start`` (a server resumes the runs no live execution holds).
- ``pools``: ``pool_sync_from_data`` (used by ``seed_demo``).
- ``api_keys``: ``api_key_create``, ``api_key_revoke``, ``api_key_authenticate`` (keys for /v1).
- ``chat``: ``chat_run_create`` (a /v1 chat request as a run); ``nesting``: the calling step of a
  worker that is a pool of a Conductor Studio server.
- ``review``: ``comment_create``/``_edit``/``_delete``, ``label_add``/``_remove``, ``run_assign``,
  ``review_score_set``, ``run_flag``, ``review_resolve``/``_reopen``, ``failure_kind_*``.
"""
