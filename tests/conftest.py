"""Shared fixtures: a project with a simulated pool (no latency) and a user in each role."""

from __future__ import annotations

import pytest

from orchestrator.models import Membership, Pool, Project
from orchestrator.providers.simulator import demo_pool
from orchestrator.services.pools import pool_sync_from_data
from tests.availability import unavailable
from tests.factories import make_member, make_project, make_user


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Users are made in most tests; a deliberately slow hasher would dominate their time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# The events the schema check below has seen in the current test, in the order they left.
checked_events: list[dict] = []


@pytest.fixture(autouse=True)
def _payloads_match_the_wire_schema(monkeypatch):
    """Every event any test publishes, every snapshot and every graph any test reads is checked
    against its definition in ``orchestrator/wire.py`` (keys and types), at the one place each is
    made: a test whose code emits a payload off its schema fails, whatever it asserts itself."""
    from orchestrator import events, selectors, wire

    problems: list[str] = []
    checked_events.clear()

    def checked(name, shape_of, function):
        def wrapper(*args, **kwargs):
            result = function(*args, **kwargs)
            for value, shape in shape_of(result):
                problems.extend(f"{name}: {problem}" for problem in wire.check(value, shape))
            return result

        return wrapper

    # Every stored event leaves through ``events.deliver_on_commit`` (published, stored by the
    # recorder one at a time, held and inserted together, or written by its one statement).
    leave = events.deliver_on_commit

    def leaving(stored, *args, **kwargs):
        for event in stored:
            shape = wire.EVENT_SHAPES.get(event["type"], wire.Event)
            problems.extend(f"event: {problem}" for problem in wire.check(event, shape))
        checked_events.extend(stored)
        return leave(stored, *args, **kwargs)

    monkeypatch.setattr(events, "deliver_on_commit", leaving)
    monkeypatch.setattr(
        selectors,
        "run_snapshot_message",
        checked("snapshot", lambda m: [(m, wire.SnapshotMessage)], selectors.run_snapshot_message),
    )
    monkeypatch.setattr(
        selectors,
        "run_snapshot",
        checked("run state", lambda s: [(s, wire.RunState)], selectors.run_snapshot),
    )
    monkeypatch.setattr(
        selectors, "run_graph", checked("graph", lambda g: [(g, wire.Graph)], selectors.run_graph)
    )
    monkeypatch.setattr(
        selectors,
        "run_page_state",
        checked("page state", lambda p: [(p, wire.PageState)], selectors.run_page_state),
    )
    monkeypatch.setattr(
        selectors,
        "run_round_steps",
        checked("round steps", lambda s: [(s, wire.RoundSteps)], selectors.run_round_steps),
    )
    monkeypatch.setattr(
        selectors,
        "run_compare",
        checked("comparison", lambda c: [(c, wire.Comparison)], selectors.run_compare),
    )
    monkeypatch.setattr(
        selectors,
        "compare_page_state",
        checked("compare page", lambda p: [(p, wire.ComparePage)], selectors.compare_page_state),
    )
    yield
    assert not problems, "payloads off the wire schema:\n" + "\n".join(problems[:20])


@pytest.fixture
def project(db) -> Project:
    return make_project(name="Team")


@pytest.fixture
def sim_pool(project) -> Pool:
    """The offline demo pool (simulated conductor and workers) with every latency set to 0."""
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=0))
    return pool


@pytest.fixture
def project_admin(project):
    return make_member(project=project, role=Membership.Role.ADMIN, username="ada-admin")


@pytest.fixture
def reviewer(project):
    return make_member(project=project, role=Membership.Role.REVIEWER, username="rui-reviewer")


@pytest.fixture
def viewer(project):
    return make_member(project=project, role=Membership.Role.VIEWER, username="vera-viewer")


@pytest.fixture
def outsider(db):
    """A user of another project, who must see nothing of ``project``."""
    other = make_project(name="Elsewhere")
    return make_member(project=other, role=Membership.Role.ADMIN, username="otto-outsider")


@pytest.fixture
def superuser(db):
    return make_user(username="root", is_superuser=True, is_staff=True)


@pytest.fixture
async def async_db_connections_closed():
    """Close the connection that async code's database thread opened, so the test database can
    be dropped at the end (PostgreSQL refuses while a session is open)."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    await sync_to_async(connections.close_all)()


@pytest.fixture
def sent_events(monkeypatch) -> list[dict]:
    """Every live event sent (that is, after its transaction committed), whether sent from sync
    code (``events.send``) or from the loop (``events.send_async``, ``events.send_many_async``:
    to the run's group, or to this process's listeners only while nobody watched the run)."""
    from orchestrator import events

    sent: list[dict] = []
    send, send_many_async = events.send, events.send_many_async

    def capture(event: dict) -> None:
        sent.append(event)
        send(event)

    async def capture_many_async(batch, **options) -> None:
        sent.extend(batch)
        await send_many_async(batch, **options)

    monkeypatch.setattr(events, "send", capture)
    monkeypatch.setattr(events, "send_many_async", capture_many_async)
    return sent


@pytest.fixture
def code_sandbox() -> None:
    """For tests that run code in the grading sandbox: skipped with the reason where bubblewrap
    cannot run, unless CONDUCTOR_REQUIRE_SANDBOX=1 (CI), which makes that a failure."""
    from orchestrator.engine.sandbox import sandbox_problem

    problem = sandbox_problem()
    if problem is not None:
        unavailable(
            f"the code sandbox cannot run here: {problem}", required_by="CONDUCTOR_REQUIRE_SANDBOX"
        )
