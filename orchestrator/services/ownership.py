"""Who executes a run: claims, leases with a heartbeat, fencing tokens and the interruption limit.

Every execution claims its run before it plans or calls anything (``run_claim``): one UPDATE of
the run row that names the execution as its executor, raises the run's fencing token
(``Run.fence``) and, when the previous executor never let go (its process died: SIGKILL, out of
memory, a lost machine), counts one more interruption. The recording observer stores a
callback only while the run's fence is still the one its execution took, checked in the same
UPDATE that takes the callback's event seqs: an execution that was taken over (it stalled past
its lease and another one resumed the run) can no longer write anything.

Two kinds of claim:

- A leased claim (inline runs, the CLI): the claim holds until ``lease_expires_at``, renewed by
  a heartbeat while the execution lives. Another execution may take the run only once the
  lease has lapsed (or the executor let go). Servers look for such runs when they start and
  every third of a lease afterwards (``services/recovery.py``).
- An exclusive claim (Celery): the caller already holds an exclusive lease elsewhere (the run's
  lease in Redis, ``orchestrator/tasks.py``), so it takes the run whatever the row says.

A run whose executor died ``CONDUCTOR_RUN_MAX_INTERRUPTIONS`` times is failed with that reason
at its next claim instead of being resumed again (a run that kills its process every time would
otherwise be resumed, and kill it, forever).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from orchestrator.models import Run
from orchestrator.services.ending import run_fail
from orchestrator.sql import RUN_TABLE, can_return, db_datetime, update_returning

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Claim:
    """An execution's hold on a run: its token, the fence it took, and its lease (None when an
    exclusive lease elsewhere guards it)."""

    run_id: int
    executor: str
    fence: int
    lease_seconds: float | None


def new_executor_token() -> str:
    """A token naming one execution: host and process (for people reading the row), then a
    random part (so two executions are never confused, even in one process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def executes_here(executor: str) -> bool:
    """Whether ``executor`` (a token of ``new_executor_token``) names an execution of this
    process."""
    return executor.startswith(f"{socket.gethostname()}:{os.getpid()}:")


def interrupted_error(count: int, *, limit: int) -> str:
    """The error of a run failed for having killed its executor ``count`` times."""
    return (
        f"This run killed its worker {count} times: the process executing it died each time "
        "before the run finished (killed, out of memory, or its machine lost), so it is not "
        f"tried again (CONDUCTOR_RUN_MAX_INTERRUPTIONS is {limit})."
    )


def run_claim(*, run_id: int, executor: str, lease_seconds: float | None) -> Claim | None:
    """Claim an unfinished run for ``executor``; None if it cannot be taken now.

    With ``lease_seconds`` the claim is leased: it succeeds only if nobody holds the run (no
    executor, or a lapsed lease). Without, the caller holds an exclusive lease elsewhere and
    takes the run over whatever the row says. Either way the fence goes up by one, and a
    previous executor that never let go counts as an interruption. When that makes
    ``CONDUCTOR_RUN_MAX_INTERRUPTIONS``, the run is failed with that reason and None returned.
    """
    sql, params = claim_update(run_id=run_id, executor=executor, lease_seconds=lease_seconds)
    # With RETURNING it is one statement, atomic by itself; else the read-back joins it.
    with nullcontext() if can_return() else transaction.atomic():
        row = update_returning(
            sql, params, returning="fence, interruptions", table=RUN_TABLE, id=run_id
        )
    if row is None:
        return None
    fence, interruptions = row
    return claim_taken(
        run_id=run_id,
        executor=executor,
        lease_seconds=lease_seconds,
        fence=fence,
        interruptions=interruptions,
    )


def claim_update(
    *, run_id: int, executor: str, lease_seconds: float | None
) -> tuple[str, list[object]]:
    """The UPDATE that claims a run (``run_claim``), without its RETURNING, and its parameters:
    it matches no row when the run cannot be taken now (one statement in plain SQL: it runs
    once per execution, and the ORM took longer to build it than the database to run it)."""
    now = timezone.now()
    expires = now + timedelta(seconds=lease_seconds) if lease_seconds is not None else None
    sql = (
        f"UPDATE {RUN_TABLE} SET executor = %s, lease_expires_at = %s, fence = fence + 1, "
        "interruptions = interruptions + CASE WHEN executor = '' THEN 0 ELSE 1 END "
        f"WHERE id = %s AND status NOT IN ({', '.join(['%s'] * len(Run.FINISHED))})"
    )
    params: list[object] = [executor, db_datetime(expires), run_id]
    params += [str(s) for s in Run.FINISHED]
    if lease_seconds is not None:
        sql += " AND (executor = '' OR lease_expires_at < %s)"
        params.append(db_datetime(now))
    return sql, params


def claim_taken(
    *, run_id: int, executor: str, lease_seconds: float | None, fence: int, interruptions: int
) -> Claim | None:
    """The claim that ``claim_update`` took (the fence and interruptions it left on the row);
    None, having failed the run, when its interruptions reached the limit."""
    limit = settings.CONDUCTOR_RUN_MAX_INTERRUPTIONS
    if interruptions >= limit:
        logger.error("run %s killed its executor %s times; failing it", run_id, interruptions)
        with transaction.atomic():
            run_fail(
                run_id=run_id, error=interrupted_error(interruptions, limit=limit), fence=fence
            )
            run_claim_release(claim=Claim(run_id, executor, fence, lease_seconds))
        return None
    claim = Claim(run_id=run_id, executor=executor, fence=fence, lease_seconds=lease_seconds)
    if lease_seconds is not None:
        _held_claims_add(claim)
    return claim


def run_claim_renew(*, claim: Claim) -> bool:
    """Push a leased claim's expiry one lease ahead; False if the execution no longer holds the
    run (taken over, or finished)."""
    if claim.lease_seconds is None:
        return True
    expires = timezone.now() + timedelta(seconds=claim.lease_seconds)
    return bool(
        Run.objects.filter(pk=claim.run_id, fence=claim.fence, executor=claim.executor)
        .exclude(status__in=Run.FINISHED)
        .update(lease_expires_at=expires)
    )


def run_claim_release(*, claim: Claim) -> None:
    """Let go of a run (the execution ended, or its process is stopping cleanly): the next
    execution may take it at once, and this one does not count as an interruption."""
    run_claim_forget(claim=claim)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {RUN_TABLE} SET executor = '', lease_expires_at = NULL "
            "WHERE id = %s AND fence = %s AND executor = %s",
            [claim.run_id, claim.fence, claim.executor],
        )


def run_claim_forget(*, claim: Claim) -> None:
    """The execution ended with its run finished: nothing will claim the run again, so the row
    keeps its last executor and only this process forgets the claim (no database work)."""
    with _held_claims_lock:
        _held_claims.pop((claim.run_id, claim.fence), None)


# Leased claims still held by this process, released when it exits cleanly (SIGTERM stops
# Daphne's loop without ending its runs' tasks): a stopped server's runs resume at the next start
# without waiting for their leases to lapse, and a clean stop is no interruption.
_held_claims: dict[tuple[int, int], Claim] = {}
_held_claims_lock = threading.Lock()
_release_at_exit_registered = False


def _held_claims_add(claim: Claim) -> None:
    global _release_at_exit_registered
    with _held_claims_lock:
        _held_claims[(claim.run_id, claim.fence)] = claim
        if not _release_at_exit_registered:
            atexit.register(_release_held_claims)
            _release_at_exit_registered = True


def _release_held_claims() -> None:
    with _held_claims_lock:
        claims = list(_held_claims.values())
    if not claims:
        return
    # No logging here: at exit its streams may be closed already.
    try:
        for claim in claims:
            run_claim_release(claim=claim)
    except Exception:  # noqa: BLE001 - the leases lapse on their own
        pass
    finally:
        connection.close()


__all__ = [
    "Claim",
    "interrupted_error",
    "new_executor_token",
    "run_claim",
    "run_claim_forget",
    "run_claim_release",
    "run_claim_renew",
]
