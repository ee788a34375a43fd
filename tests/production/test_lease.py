"""The per-run lease that keeps a redelivered run from executing twice at once (on Redis)."""

from __future__ import annotations

import random
import time

import pytest
from django.conf import settings

from orchestrator.lease import RunLease

pytestmark = pytest.mark.production


@pytest.fixture
def run_id() -> int:
    """A run id no other test (or stray worker) uses, so the lease key is ours alone."""
    return random.randrange(10**12, 10**13)


def lease(run_id: int, seconds: float) -> RunLease:
    return RunLease(run_id, redis_url=settings.REDIS_URL, seconds=seconds)


def die(holder: RunLease) -> None:
    """Stop renewing without releasing, as a killed process would."""
    holder._stopped.set()
    holder._heartbeat.join()


def test_only_one_holder_at_a_time_and_release_frees_it(run_id):
    first, second = lease(run_id, 5), lease(run_id, 5)
    assert first.acquire()
    try:
        assert not second.acquire()
    finally:
        first.release()
    assert second.acquire()
    second.release()


def test_a_live_holder_keeps_the_lease_past_its_duration(run_id):
    holder = lease(run_id, 0.3)
    assert holder.acquire()
    try:
        time.sleep(1.0)  # more than three lease durations, renewed every 0.1 s
        assert not lease(run_id, 0.3).acquire()
    finally:
        holder.release()


def test_a_dead_holders_lease_lapses_and_its_late_release_spares_the_next_holder(run_id):
    dead = lease(run_id, 0.3)
    assert dead.acquire()
    die(dead)
    assert not lease(run_id, 0.3).acquire()  # not yet lapsed
    time.sleep(0.5)
    successor = lease(run_id, 5)
    assert successor.acquire()
    try:
        dead.release()  # the old holder's release must not remove the successor's lease
        assert not lease(run_id, 5).acquire()
    finally:
        successor.release()
